package pcie

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/pcie/pcietest"
)

func TestParseAERStats(t *testing.T) {
	for _, tt := range []struct {
		name    string
		in      string
		total   string
		counts  map[string]int64
		sum     int64
		wantErr bool
	}{
		{"kernel-6.1", "RxErr 0\nBadTLP 2\nBadDLLP 5\nTOTAL_ERR_COR 7\n", "TOTAL_ERR_COR", map[string]int64{"RxErr": 0, "BadTLP": 2, "BadDLLP": 5}, 7, false},
		// Before 5.4 there was no total line: the sum stands in.
		{"no-total-line", "DLP 1\nMalfTLP 2\n", "TOTAL_ERR_FATAL", map[string]int64{"DLP": 1, "MalfTLP": 2}, 3, false},
		// The total is the kernel's own count, not recomputed (it counts errors whose bit has no name too).
		{"total-wins", "DLP 1\nTOTAL_ERR_NONFATAL 4\n", "TOTAL_ERR_NONFATAL", map[string]int64{"DLP": 1}, 4, false},
		{"empty", "", "TOTAL_ERR_COR", map[string]int64{}, 0, false},
		{"three-fields", "RxErr 0 1\n", "TOTAL_ERR_COR", nil, 0, true},
		{"negative", "RxErr -1\n", "TOTAL_ERR_COR", nil, 0, true},
		{"not-a-number", "RxErr many\n", "TOTAL_ERR_COR", nil, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			counts, sum, err := ParseAERStats([]byte(tt.in), tt.total)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (!reflect.DeepEqual(counts, tt.counts) || sum != tt.sum) {
				t.Errorf("got %v total %d, want %v total %d", counts, sum, tt.counts, tt.sum)
			}
		})
	}
}

func FuzzParseAERStats(f *testing.F) {
	f.Add([]byte("RxErr 0\nBadTLP 2\nTOTAL_ERR_COR 2\n"))
	f.Add([]byte("DLP 1\n\n  MalfTLP 9223372036854775807\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		counts, total, err := ParseAERStats(b, "TOTAL_ERR_COR")
		if err != nil {
			return
		}
		if total < 0 {
			t.Errorf("negative total %d", total)
		}
		for k, v := range counts {
			if v < 0 || k == "TOTAL_ERR_COR" {
				t.Errorf("count %s = %d", k, v)
			}
		}
	})
}

// ReadAER over a fixture tree: the kernel's three files, a device without them, and
// AERDevices' list of a GPU's path.
func TestReadAER(t *testing.T) {
	dir := t.TempDir()
	l := pcietest.EPYC4GPU()
	if err := pcietest.Build(dir, l); err != nil {
		t.Fatal(err)
	}
	r, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	bdfs, of := AERDevices(r.GPUs)
	if len(bdfs) < len(r.GPUs) || len(bdfs) != len(of) {
		t.Fatalf("AERDevices: %v %v", bdfs, of)
	}
	seen := map[string]bool{}
	for i, b := range bdfs {
		if seen[b] {
			t.Errorf("%s listed twice", b)
		}
		seen[b] = true
		if of[i] == "" {
			t.Errorf("%s has no name", b)
		}
	}
	g0 := r.GPUs[0].BDF
	if _, err := ReadAER(dir, g0); !errors.Is(err, ErrNoAER) {
		t.Errorf("a device without statistics: %v, want ErrNoAER", err)
	}
	if err := pcietest.WriteAER(dir, g0, pcietest.AER{Correctable: map[string]int64{"BadDLLP": 3, "RxErr": 1}, NonFatal: map[string]int64{"CmpltTO": 2}}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAER(dir, g0)
	if err != nil {
		t.Fatal(err)
	}
	want := selftest.AERCounts{Correctable: 4, NonFatal: 2, Fatal: 0, Detail: map[string]int64{"correctable BadDLLP": 3, "correctable RxErr": 1, "nonfatal CmpltTO": 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadAER %+v, want %+v", got, want)
	}
}

// TestReadAERBound: a statistics file is read up to maxAERFile bytes and refused past
// them, so a file that never ends (a broken driver, a FIFO where a file should be)
// cannot grow the report or stall the pre-check, and one that fits is read whole.
func TestReadAERBound(t *testing.T) {
	const bdf = "0000:01:00.0"
	for _, tt := range []struct {
		name    string
		size    int
		wantErr bool
	}{
		{"at the bound", maxAERFile, false},
		{"one byte past it", maxAERFile + 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dev := filepath.Join(root, "sys", "bus", "pci", "devices", bdf)
			if err := os.MkdirAll(dev, 0o755); err != nil {
				t.Fatal(err)
			}
			// Counts first, then blank lines (which the parser skips) up to the size.
			b := []byte("RxErr 2\nTOTAL_ERR_COR 2\n")
			b = append(b, bytes.Repeat([]byte("\n"), tt.size-len(b))...)
			if err := os.WriteFile(filepath.Join(dev, "aer_dev_correctable"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadAER(root, bdf)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "larger than") {
					t.Errorf("ReadAER of a %d-byte file = %+v, %v; want it refused as too large", tt.size, got, err)
				}
				return
			}
			if err != nil || got.Correctable != 2 {
				t.Errorf("ReadAER of a %d-byte file = %+v, %v; want 2 correctable", tt.size, got, err)
			}
		})
	}
}

// TestParseAERStatsLine: a malformed line is named by its number in the file, blank
// lines counted, so the error points at what to look at.
func TestParseAERStatsLine(t *testing.T) {
	_, _, err := ParseAERStats([]byte("RxErr 0\n\nBadTLP many\n"), "TOTAL_ERR_COR")
	if err == nil || !strings.HasPrefix(err.Error(), "line 3:") {
		t.Errorf("err = %v, want it to name line 3", err)
	}
}

// TestAERDevices: every port on each GPU's path, root port first, then the GPU; a
// port shared by two GPUs is listed once, for the first; a bridge whose address is
// unknown (an empty BDF) is not a device to read.
func TestAERDevices(t *testing.T) {
	br := func(bdf string) selftest.Bridge { return selftest.Bridge{BDF: bdf} }
	gpus := []selftest.GPU{
		{BDF: "0000:1a:00.0", Upstream: []selftest.Bridge{br("0000:17:00.0"), br("0000:18:00.0"), br("0000:19:00.0")}},
		{BDF: "0000:1b:00.0", Upstream: []selftest.Bridge{br("0000:17:00.0"), br(""), br("0000:19:08.0")}},
		{BDF: "0000:3a:00.0", Upstream: []selftest.Bridge{}},
	}
	bdfs, of := AERDevices(gpus)
	wantBDFs := []string{"0000:17:00.0", "0000:18:00.0", "0000:19:00.0", "0000:1a:00.0", "0000:19:08.0", "0000:1b:00.0", "0000:3a:00.0"}
	wantOf := []string{"port above GPU0", "port above GPU0", "port above GPU0", "GPU0", "port above GPU1", "GPU1", "GPU2"}
	if !reflect.DeepEqual(bdfs, wantBDFs) || !reflect.DeepEqual(of, wantOf) {
		t.Errorf("AERDevices\n got %q %q\nwant %q %q", bdfs, of, wantBDFs, wantOf)
	}
}
