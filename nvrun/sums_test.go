package nvrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

// The header's CRCsum and MD5 are each checked on their own, over the stub as
// well as the payload: a change that leaves the payload decompressing (so only
// the sums can see it) is refused, and so is a header whose one sum is wrong.
// And an installer without GSP firmware is refused: the open modules need it.
// (Issue 35: none of these had a test that failed without its check.)
func TestUnpackChecksSumsAndFirmware(t *testing.T) {
	good := build(t, nvruntest.Spec{})
	noMD5 := build(t, nvruntest.Spec{NoMD5: true})
	stubEdit := func(b []byte) []byte { // the stub's text, after line 4: no decompressor reads it
		out := bytes.Replace(b, []byte("exit 1\n"), []byte("exit 7\n"), 1)
		if bytes.Equal(out, b) {
			t.Fatal("no stub line to edit")
		}
		return out
	}
	header := func(b []byte, key, val string) []byte {
		re := regexp.MustCompile(`(?m)^` + key + `=.*$`)
		if !re.Match(b) {
			t.Fatalf("no %s= line", key)
		}
		return re.ReplaceAll(b, []byte(key+"="+val))
	}
	crcOf := regexp.MustCompile(`(?m)^CRCsum=(\d+)$`)
	var crc uint32
	fmt.Sscan(string(crcOf.FindSubmatch(good)[1]), &crc)
	noGSP := regexp.MustCompile(`(?m)^firmware/.*\n`).ReplaceAllString(nvruntest.Manifest(v), "")
	cases := []struct {
		name string
		data []byte
		is   error
		msg  string
	}{
		{"stub edited, both sums stale", stubEdit(good), ErrCorrupt, "cksum of lines 4.. is"},
		{"stub edited, CRC only (MD5 none)", stubEdit(noMD5), ErrCorrupt, "cksum of lines 4.. is"},
		{"CRCsum wrong, MD5 right", header(good, "CRCsum", fmt.Sprint(crc^1)), ErrCorrupt, fmt.Sprintf("the header's CRCsum is %d", crc^1)},
		{"MD5 wrong, CRCsum right", header(good, "MD5", strings.Repeat("5", 32)), ErrCorrupt, "the header's MD5 is " + strings.Repeat("5", 32)},
		{"no GSP firmware", build(t, nvruntest.Spec{Manifest: noGSP}), ErrMissing, "lists no GSP firmware (firmware/gsp_*.bin)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scratch := t.TempDir()
			_, err := Unpack(context.Background(), write(t, c.data), Options{Version: v, Scratch: scratch})
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v\nwant %v saying %q", err, c.is, c.msg)
			}
			if left, _ := os.ReadDir(scratch); len(left) != 0 {
				t.Errorf("a refused installer left %d entries in scratch", len(left))
			}
		})
	}
	for _, b := range [][]byte{good, noMD5} { // the unedited archives pass
		u, err := Unpack(context.Background(), write(t, b), Options{Version: v, Scratch: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		u.Close()
	}
}
