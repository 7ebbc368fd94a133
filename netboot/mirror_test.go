package netboot

import (
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/mirror"
	"github.com/peerboot/peerboot/output"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// mirrorEnv serves the default build with FilesURL on a loopback mirror of
// dir, which the test fills (mirror.Publish) before the first script.
func mirrorEnv(t *testing.T) (*testEnv, string, *httptest.Server) {
	dir := t.TempDir()
	m := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(m.Close)
	e := newEnv(t, Options{FilesURL: m.URL + "/boot/"})
	return e, dir, m
}

// script fetches a boot script with the run's variable parts (loopback ports,
// the build id, the token, the nonce) replaced by names, as the golden files hold it.
func (e *testEnv) script(t *testing.T, mirrorURL string) string {
	t.Helper()
	resp, body := e.get(t, "/boot.ipxe?mac=52:54:00:12:34:56")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	b := e.srv.opt.Builds.All()[0]
	body = strings.ReplaceAll(body, e.srv.Token(b.ID, "52:54:00:12:34:56"), "TOKEN")
	body = strings.ReplaceAll(body, b.ID, "BUILD") // fakeBuild's manifest lists its files in map order
	body = strings.ReplaceAll(body, mirrorURL, "http://MIRROR")
	body = strings.ReplaceAll(body, e.http.URL, "http://SERVE")
	return regexp.MustCompile(`peerboot\.nonce=\S+`).ReplaceAllString(body, "peerboot.nonce=NONCE")
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n%s\nwant:\n%s", name, got, want)
	}
}

// With --files-url and a mirror that holds the files, the script fetches the
// kernel and initrd from the mirror by sha256, and tells the init the
// initrd's sha256 (and the kernel to keep it).
func TestBootScriptFromMirror(t *testing.T) {
	e, dir, m := mirrorEnv(t)
	if _, err := mirror.Publish(context.Background(), filepath.Join(e.out, "default"), filepath.Join(dir, "boot")); err != nil {
		t.Fatal(err)
	}
	got := e.script(t, m.URL)
	golden(t, "boot-mirror.ipxe", got)
	b := e.srv.opt.Builds.All()[0]
	for _, want := range []string{
		"kernel http://MIRROR/boot/sha256/" + b.Files[output.PXEKernelPath] + " ",
		"initrd --name initrd.img http://MIRROR/boot/sha256/" + b.Files[output.PXEInitrdPath] + "\n",
		" retain_initrd peerboot.initrd_sha256=" + b.Files[output.PXEInitrdPath],
	} {
		if !strings.Contains(got, want) {
			t.Errorf("script lacks %q:\n%s", want, got)
		}
	}
	// Without --files-url the same build's script is serve's, as before.
	plain := newEnv(t, Options{})
	golden(t, "boot-serve.ipxe", plain.script(t, m.URL))
}

// A file altered (or missing) on the mirror is refused by its sha256: no node
// is sent for it, and serve's own copy boots the node instead.
func TestBootScriptMirrorRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, entry string)
		log   string
	}{
		{"altered", func(t *testing.T, entry string) {
			b, _ := os.ReadFile(entry)
			b[len(b)/2] ^= 1
			if err := os.WriteFile(entry, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "the file was altered or damaged"},
		{"missing", func(t *testing.T, entry string) { os.Remove(entry) }, "not on the mirror"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, dir, m := mirrorEnv(t)
			if _, err := mirror.Publish(context.Background(), filepath.Join(e.out, "default"), filepath.Join(dir, "boot")); err != nil {
				t.Fatal(err)
			}
			b := e.srv.opt.Builds.All()[0]
			c.spoil(t, filepath.Join(dir, "boot", mirror.Path(b.Files[output.PXEInitrdPath])))
			got := e.script(t, m.URL)
			if strings.Contains(got, "MIRROR") || strings.Contains(got, "retain_initrd") {
				t.Fatalf("the script sends the node to a mirror that failed its check:\n%s", got)
			}
			if !strings.Contains(got, "initrd --name initrd.img http://SERVE/builds/default/BUILD/pxe/initrd.img\n") {
				t.Errorf("no fallback to serve's copy:\n%s", got)
			}
			if log := e.log.String(); !strings.Contains(log, "boot files from serve, not the mirror") || !strings.Contains(log, c.log) {
				t.Errorf("log does not say why:\n%s", log)
			}
		})
	}
}

func TestFilesURLRefused(t *testing.T) {
	for _, u := range []string{"ftp://x/", "mirror.example", "http://"} {
		if _, err := checkFilesURL(u); err == nil || !strings.Contains(err.Error(), "files URL: want http(s)://") {
			t.Errorf("%q: %v", u, err)
		}
	}
}
