package nccl

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/peerboot/peerboot/selftest"
)

func TestParseTransportLines(t *testing.T) {
	const pfx = "host:1234:1240 [0] NCCL INFO "
	tr := func(ch, from, to int, via string) selftest.Transport {
		return selftest.Transport{Channel: ch, From: from, To: to, Via: via, P2P: strings.HasPrefix(via, "P2P/")}
	}
	tests := []struct {
		line string
		want []selftest.Transport
	}{
		{pfx + "Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer", []selftest.Transport{tr(0, 0, 1, "P2P/direct pointer")}},
		{pfx + "Channel 01/0 : 1[1] -> 0[0] via P2P/direct pointer/read", []selftest.Transport{tr(1, 1, 0, "P2P/direct pointer/read")}},
		{pfx + "Channel 00/0 : 0[2] -> 1[3] via SHM/direct/direct", []selftest.Transport{tr(0, 0, 1, "SHM/direct/direct")}},
		{pfx + "Channel 03/1 : 2[2] -> 3[3] via P2P/CUMEM/read", []selftest.Transport{tr(3, 2, 3, "P2P/CUMEM/read")}},
		{pfx + "Channel 15/0 : 3[3] -> 0[0] via P2P/IPC/CE", []selftest.Transport{tr(15, 3, 0, "P2P/IPC/CE")}},
		{pfx + "Channel 00/0 : 0[0] -> 1[1] via NET/Socket/0", []selftest.Transport{tr(0, 0, 1, "NET/Socket/0")}},
		{pfx + "Channel 02/0 : 0[0] -> 1[1] [send] via P2P/CUMEM/read", []selftest.Transport{tr(2, 0, 1, "P2P/CUMEM/read")}},
		{pfx + "Channel 02/0 : 1[1] -> 0[0] [receive] via P2P/CUMEM/read", []selftest.Transport{tr(2, 1, 0, "P2P/CUMEM/read")}},
		{pfx + "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0(1)/GDRDMA", []selftest.Transport{tr(0, 0, 8, "NET/IB/0(1)/GDRDMA")}},
		{pfx + "Channel 01/0 : 0[1000] -> 1[2000] via P2P/indirect/2[2]", []selftest.Transport{tr(1, 0, 1, "P2P/indirect/2[2]")}},
		{pfx + "Ring 00 : 0[0] -> 1[1] via P2P/IPC", []selftest.Transport{tr(0, 0, 1, "P2P/IPC")}},
		{pfx + "Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer   \r", []selftest.Transport{tr(0, 0, 1, "P2P/direct pointer")}},
		// Not connection lines.
		{pfx + "Channel 00/02 :    0   1   2   3", nil},
		{pfx + "Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1", nil},
		{pfx + "Connected all rings, use ring PXN 0 GDR 1", nil},
		{pfx + "P2P is disabled between connected GPUs 0 and 1. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.", nil},
		{pfx + "Channel 00/0 : 0[0] -> 1[1] via ", nil},
		{pfx + "Channel xx/0 : 0[0] -> 1[1] via P2P/direct pointer", nil},
		{"", nil},
	}
	for _, tc := range tests {
		got, err := ParseTransports(strings.NewReader(tc.line))
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if tc.want == nil {
			tc.want = []selftest.Transport{}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.line, got, tc.want)
		}
	}
}

func TestParseTransportsLog(t *testing.T) {
	tests := []struct {
		file           string
		n, p2p, nonP2P int
		first          string
	}{
		// 4 ranks, 2 ring channels, then the tree connections: the repeated
		// "Channel 00/0 : 0[0] -> 1[1]" is counted once.
		{"transport-4gpu-p2p.log", 9, 9, 0, ""},
		// The stock driver: NVML says CNS, NCCL stages through host memory.
		{"transport-4gpu-shm.log", 8, 0, 8, "Channel 00 : 0 -> 1 via SHM/direct/direct"},
	}
	for _, tc := range tests {
		f, err := os.Open(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		ts, err := ParseTransports(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if len(ts) != tc.n {
			t.Errorf("%s: %d transports, want %d: %+v", tc.file, len(ts), tc.n, ts)
		}
		p2p, non, first := Summarize(ts)
		if p2p != tc.p2p || non != tc.nonP2P || first != tc.first {
			t.Errorf("%s: Summarize = %d, %d, %q; want %d, %d, %q", tc.file, p2p, non, first, tc.p2p, tc.nonP2P, tc.first)
		}
	}
}

func TestParseTransportsOrderAndDedupe(t *testing.T) {
	log := strings.Join([]string{
		"h:1:2 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/direct pointer",
		"h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer",
		"h:1:2 [1] NCCL INFO Channel 01/1 : 1[1] -> 0[0] via P2P/direct pointer",        // other connection index: same key
		"h:1:2 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] [send] via P2P/direct pointer", // tagged: same key
		"h:1:2 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/direct pointer/read",   // other via: kept
	}, "\n") // no final newline: the last line still counts
	got, err := ParseTransports(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []selftest.Transport{
		{Channel: 1, From: 1, To: 0, Via: "P2P/direct pointer", P2P: true},
		{Channel: 0, From: 0, To: 1, Via: "P2P/direct pointer", P2P: true},
		{Channel: 1, From: 1, To: 0, Via: "P2P/direct pointer/read", P2P: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// A huge line from another program is dropped without losing the lines around it.
func TestParseTransportsLongLine(t *testing.T) {
	log := "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer\n" +
		strings.Repeat("x", 3*transportMaxLine) + " via P2P/x\n" +
		"h:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n"
	got, err := ParseTransports(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Via != "SHM/direct/direct" {
		t.Errorf("got %+v", got)
	}
}

func TestParseTransportsReadError(t *testing.T) {
	boom := errors.New("disk gone")
	r := iotest.TimeoutReader(strings.NewReader("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer\n" + strings.Repeat("y", 8192)))
	_, err := ParseTransports(r)
	if err == nil || !errors.Is(err, iotest.ErrTimeout) {
		t.Errorf("err = %v, want a wrapped read error", err)
	}
	got, err := ParseTransports(iotest.ErrReader(boom))
	if !errors.Is(err, boom) || len(got) != 0 || got == nil {
		t.Errorf("got %v, %v", got, err)
	}
}

func TestSummarizeEmpty(t *testing.T) {
	if p, n, f := Summarize(nil); p != 0 || n != 0 || f != "" {
		t.Errorf("Summarize(nil) = %d, %d, %q", p, n, f)
	}
	p, n, f := Summarize([]selftest.Transport{
		{Channel: 0, From: 0, To: 1, Via: "P2P/direct pointer", P2P: true},
		{Channel: 2, From: 2, To: 3, Via: "NET/Socket/0"},
		{Channel: 3, From: 3, To: 0, Via: "SHM/direct/direct"},
	})
	if p != 1 || n != 2 || f != "Channel 02 : 2 -> 3 via NET/Socket/0" {
		t.Errorf("Summarize = %d, %d, %q", p, n, f)
	}
}

func FuzzParseTransports(f *testing.F) {
	for _, s := range []string{
		"host:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer\n",
		"host:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via SHM/direct/direct\r\n",
		"Ring 00 : 0[0] -> 1[1] via P2P/IPC",
		"Channel 00/02 :    0   1   2   3\n",
		"Channel 99999/0 : 0[0] -> 1[1] via \n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := ParseTransports(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("reading from memory failed: %v", err)
		}
		seen := map[selftest.Transport]bool{}
		for _, tr := range ts {
			if seen[tr] {
				t.Errorf("duplicate %+v", tr)
			}
			seen[tr] = true
			if tr.P2P != strings.HasPrefix(tr.Via, "P2P/") || tr.Via == "" || tr.Via != strings.TrimSpace(tr.Via) {
				t.Errorf("bad transport %+v", tr)
			}
			if tr.Channel < 0 || tr.From < 0 || tr.To < 0 {
				t.Errorf("negative field %+v", tr)
			}
		}
		p, n, first := Summarize(ts)
		if p+n != len(ts) || (n > 0) != (first != "") {
			t.Errorf("Summarize(%+v) = %d, %d, %q", ts, p, n, first)
		}
	})
}

// transportMaxLine is the longest line read, its newline included: a connection line
// of exactly that length is parsed, one byte longer is dropped (however little it
// is over).
func TestParseTransportsLineLimit(t *testing.T) {
	const conn = " NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer"
	line := func(n int) string { // n bytes with the newline
		return strings.Repeat("h", n-len(conn)-1) + conn + "\n"
	}
	for _, tt := range []struct {
		n    int
		want int
	}{
		{transportMaxLine - 1, 1},
		{transportMaxLine, 1},
		{transportMaxLine + 1, 0},
		{transportMaxLine + 4096, 0},
		{transportMaxLine + 5000, 0},
	} {
		// The line after the long one is always read.
		log := line(tt.n) + "h:1:2 [0] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via SHM/direct/direct\n"
		got, err := ParseTransports(strings.NewReader(log))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tt.want+1 || got[len(got)-1].Via != "SHM/direct/direct" || (tt.want == 1 && got[0].Via != "P2P/direct pointer") {
			t.Errorf("a %d-byte line: got %+v, want it %s", tt.n, got, map[int]string{0: "dropped", 1: "parsed"}[tt.want])
		}
	}
}

// A "via" followed only by white space the regexp's \S lets through (a vertical
// tab) names no transport.
func TestParseTransportsEmptyVia(t *testing.T) {
	got, err := ParseTransports(strings.NewReader("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via \v\u00a0\n"))
	if err != nil || len(got) != 0 {
		t.Errorf("got %+v, %v; want nothing", got, err)
	}
}
