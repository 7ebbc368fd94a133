package selftest

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(r *Report)
		want   string // "" = valid
	}{
		{"sample", func(r *Report) {}, ""},
		{"verdict maybe", func(r *Report) { r.Verdict = "maybe" }, `verdict: "maybe", want "pass" or "fail"`},
		{"pass over a fail", func(r *Report) { r.Findings[0].Status = SevFail; r.Verdict = Pass }, "verdict: \"pass\" with a fail finding"},
		{"unknown severity", func(r *Report) { r.Findings[1].Status = "error" }, `findings[1].status: "error"`},
		{"copy from GPU 2000", func(r *Report) { r.Copies[0].Src = 2000 }, "copies[0].src: 2000, want 0..1 (the report has 2 GPUs)"},
		{"pair beyond the GPUs", func(r *Report) { r.Pairs[0].B = 5 }, "pairs[0]: GPUs 0 and 5"},
		{"offset past the copy", func(r *Report) {
			r.Copies[0].Verified, r.Copies[0].Mismatch = false, &Mismatch{Offset: 0x3ffff000, Words: 1024}
		}, "copies[0].mismatch.offset: 0x3ffff000, past the end of the 256MiB copy"},
		{"verified and corrupt", func(r *Report) { r.Copies[0].Mismatch = &Mismatch{Offset: 64, Words: 1} }, "copies[0].verified: true with a mismatch"},
		{"rate beyond physics", func(r *Report) { r.Copies[0].GBps = 1e6 }, "copies[0].gbps: 1e+06 GB/s"},
		{"BAR1 used over total", func(r *Report) { v := int64(64 << 30); r.BAR1[0].UsedAfter = &v }, "bar1[0].used_after"},
		{"several at once", func(r *Report) { r.Verdict = "x"; r.Copies[0].Dst = -1 }, "verdict: \"x\", want \"pass\" or \"fail\"\n  copies[0].dst: -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := gpuSample()
			tc.mutate(r)
			err := Validate(r)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("valid report refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good, err := Encode(gpuSample())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, body, want string
		notJSON          bool
	}{
		{"empty", "", "empty input", true},
		{"truncated", string(good[:len(good)/2]), "the input ends inside a value", true},
		{"syntax", "{\n  \"schema\": 2,,\n}", "2:16: not JSON: invalid character ','", true},
		{"list", "[1, 2]", "1:2: not a self-test report: want a JSON object, got a list", false},
		{"type", strings.Replace(string(good), `"numa_node": 0`, `"numa_node": "zero"`, 1), "gpus.numa_node: want a whole number, got a string", false},
		{"trailing", string(good) + "{}", "bytes follow the report", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if errors.Is(err, ErrNotJSON) != tc.notJSON {
				t.Errorf("errors.Is(ErrNotJSON) = %v, want %v", !tc.notJSON, tc.notJSON)
			}
			if strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "selftest.") {
				t.Errorf("error names Go internals: %v", err)
			}
		})
	}
}

// gpuSample is a two-GPU report that Validate accepts.
func gpuSample() *Report {
	r := sampleReport()
	vram := int64(24 << 30)
	for _, bdf := range []string{"0000:01:00.0", "0000:02:00.0"} {
		r.GPUs = append(r.GPUs, GPU{BDF: bdf, Vendor: "0x10de", Device: "0x2204", BAR1Bytes: 256 << 20, VRAMBytes: &vram,
			Link: Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16}})
	}
	r.Pairs = []Pair{{A: 0, B: 1, Topology: TopoPHB, Path: []string{}, ACSOn: []string{}}}
	r.Copies = []Copy{
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, Bytes: 256 << 20, GBps: 24.1, Samples: []float64{24, 24.1}, LinkGBps: 31.5, Verified: true},
		{Src: 1, Dst: 0, Method: MethodCE, Direction: DirWrite, Bytes: 256 << 20, GBps: 24.0, Samples: []float64{24}, LinkGBps: 31.5, Verified: true},
	}
	after := int64(5 << 20)
	r.BAR1 = []BAR1Usage{{GPU: 0, Total: 256 << 20, UsedBefore: 5 << 20, UsedAfter: &after}, {GPU: 1, Total: 256 << 20, UsedBefore: 5 << 20}}
	return r
}

// FuzzDecode: whatever Decode accepts is valid, re-encodes to a report that decodes the
// same, and renders at any width without a panic and within a bound (the 34 MB of
// dashes came from an index nobody checked).
func FuzzDecode(f *testing.F) {
	good, _ := Encode(gpuSample())
	vm, _ := Encode(sampleReport())
	f.Add(good, 80)
	f.Add(vm, 40)
	f.Add(bytes.Replace(good, []byte(`"src": 1,`), []byte(`"src": 2000,`), 1), 80)
	f.Add(bytes.Replace(good, []byte(`"verdict": "fail"`), []byte(`"verdict": "maybe"`), 1), 120)
	f.Add([]byte(`{"schema":2,"verdict":"pass","gpus":[{}],"copies":[{"src":0,"dst":0,"mismatch":{"offset":4,"words":1}}]}`), 10)
	f.Add([]byte(`{"schema":2}`), 0)
	f.Add([]byte(`[]`), 80)
	f.Fuzz(func(t *testing.T, b []byte, width int) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		if err := Validate(r); err != nil {
			t.Fatalf("Decode accepted what Validate refuses: %v", err)
		}
		enc, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(enc)
		if err != nil {
			t.Fatalf("a decoded report does not decode again: %v", err)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatal("unstable round trip")
		}
		out := RenderWidth(r, width%400)
		if limit := 64*len(b) + 1<<16; len(out) > limit {
			t.Fatalf("a %d-byte report renders to %d bytes", len(b), len(out))
		}
		_ = Summary(r)
	})
}
