package selftest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// roundTrip encodes r, decodes it and wants r back; it returns the decoded report.
func roundTrip(t *testing.T, r *Report) *Report {
	t.Helper()
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip changed the report:\n got %+v\nwant %+v", got, r)
	}
	return got
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := sampleReport()
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got := roundTrip(t, r)
	b2, _ := Encode(got)
	if !bytes.Equal(b, b2) {
		t.Error("re-encoding is not byte-identical")
	}
}

// Every key is present even in an empty report, so consumers can rely on the shape.
func TestEmptyReportHasEveryKey(t *testing.T) {
	b, err := Encode(New())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"schema": 2`, `"verdict"`, `"findings": []`, `"recipe"`, `"kernel"`, `"modules": []`,
		`"gpus": []`, `"cuda"`, `"cu_init": null`, `"nvml"`, `"durations": []`, `"started_at"`, `"deadline_exceeded"`,
		`"pairs": []`, `"copies": []`, `"high_mem": []`, `"kernel_events": []`, `"nccl": null`, `"stall": null`, `"iommu"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("empty report lacks %s:\n%s", k, b)
		}
	}
}

func TestDecodeRejectsOtherSchema(t *testing.T) {
	for _, in := range []string{`{"schema": 1}`, `{"schema": 3}`, `{}`, `[]`, `not json`} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%s) = nil error", in)
		}
	}
}

func TestLineRoundTrip(t *testing.T) {
	r := sampleReport()
	line, err := EncodeLine(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, Marker+" ") || strings.ContainsAny(line, "\n\r") {
		t.Fatalf("bad line %q", line)
	}
	again, _ := EncodeLine(r)
	if again != line {
		t.Error("EncodeLine is not deterministic")
	}
	for _, wrap := range []string{
		"%s",
		"%s\r",
		"[    3.141592] random: crng init done%s",
		"garbage PEERBOOT-REPORT !!! then %s trailing words",
		"  \t%s \x1b[0m",
	} {
		in := strings.Replace(wrap, "%s", line, 1)
		got, err := DecodeLine(in)
		if err != nil {
			t.Errorf("DecodeLine(%q...): %v", in[:min(len(in), 40)], err)
			continue
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("DecodeLine(%q...) changed the report", in[:min(len(in), 40)])
		}
	}
	console := "boot\n" + "[ 1.0] x" + line + "\nshell$ \n"
	if _, err := FindLine([]byte(console)); err != nil {
		t.Errorf("FindLine: %v", err)
	}
}

func TestDecodeLineErrors(t *testing.T) {
	if _, err := DecodeLine("no marker here"); !errors.Is(err, ErrNoMarker) {
		t.Errorf("want ErrNoMarker, got %v", err)
	}
	for _, in := range []string{Marker, Marker + " ", Marker + " ####", Marker + " aGVsbG8=", Marker + " AAAA"} {
		if _, err := DecodeLine(in); err == nil {
			t.Errorf("DecodeLine(%q) = nil error", in)
		}
	}
}

func FuzzDecodeLine(f *testing.F) {
	r := sampleReport()
	line, _ := EncodeLine(r)
	f.Add(line)
	f.Add("[  1.2] " + line + "\r")
	f.Add(Marker + " H4sIAAAAAAAA/w==")
	f.Add(Marker + Marker)
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := DecodeLine(s)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same report.
		l2, err := EncodeLine(got)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeLine(l2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, got) {
			t.Fatalf("unstable round trip for %q", s)
		}
	})
}

func TestParseInitRecord(t *testing.T) {
	arr, err := ParseInitRecord([]byte(` [{"name":"nvidia","result":"ENODEV","errno":19}]`))
	if err != nil || len(arr.Modules) != 1 || arr.Modules[0].Errno != 19 {
		t.Fatalf("array form: %+v, %v", arr, err)
	}
	obj, err := ParseInitRecord([]byte(`{"modules":[{"name":"nvidia"}],"findings":[{"status":"fail","id":"recipe"}],"durations":[{"phase":"modules","ms":5}]}`))
	if err != nil || len(obj.Modules) != 1 || len(obj.Findings) != 1 || len(obj.Durations) != 1 {
		t.Fatalf("object form: %+v, %v", obj, err)
	}
	if _, err := ParseInitRecord([]byte(`{"modules": 3}`)); err == nil {
		t.Error("bad record parsed")
	}
	r := New()
	r.Durations = []Duration{{Phase: "cuda", MS: 1}}
	r.Merge(obj)
	if r.Durations[0].Phase != "modules" || r.Modules[0].Name != "nvidia" || r.Findings[0].ID != "recipe" {
		t.Errorf("merge order: %+v", r)
	}
}

// sampleReport is a VM boot's report with findings, as p2pcheck writes it.
func sampleReport() *Report {
	r := New()
	r.Recipe = RecipeRef{Name: "default", Digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	r.Kernel = Kernel{Release: "6.1.0-peerboot", Cmdline: "console=ttyS0,115200 panic=-1"}
	r.Modules = []Module{
		{Name: "nvidia", File: "updates/nvidia.ko", Result: ModENODEV, Errno: 19, Error: "no such device", KernelLog: []string{"NVRM: No NVIDIA GPU found."}},
		{Name: "nvidia-uvm", Result: ModSkipped, Error: "nvidia not loaded"},
	}
	r.CUDA = CUDA{Library: "libcuda.so.1", Loaded: true, CuInit: &Status{Name: "CUDA_ERROR_NO_DEVICE", Code: 100}, DriverVersion: 12020}
	r.NVML = NVML{Library: "libnvidia-ml.so.1", Loaded: true, Init: &Status{Name: "NVML_ERROR_DRIVER_NOT_LOADED", Code: 9}}
	r.Durations = []Duration{{Phase: PhasePrecheck, MS: 3}, {Phase: PhaseCUDA, MS: 41}, {Phase: PhaseNVML, MS: 7}}
	r.StartedAt = "2025-06-01T12:00:00Z"
	r.Findings = append(r.Findings, Finding{ID: "platform", Status: SevInfo, Subject: "recipe", Message: "no recipe: platform unknown"},
		Finding{ID: "driver.nvidia", Status: SevInfo, Subject: "nvidia", Message: "nvidia.ko found no GPU (ENODEV)", Evidence: "no such device (errno 19)"})
	r.Settle()
	return r
}

// Settle: any fail finding fails the boot; warn and info do not.
func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		sevs []string
		want string
	}{
		{nil, Pass},
		{[]string{SevInfo, SevWarn}, Pass},
		{[]string{SevInfo, SevFail, SevWarn}, Fail},
		{[]string{SevWarn, SevWarn, SevFail}, Fail},
	} {
		r := New()
		if r.Verdict != Fail {
			t.Fatalf("New's verdict %q: a report nobody settled must not pass", r.Verdict)
		}
		for i, s := range tc.sevs {
			r.Add(s, fmt.Sprintf("check%d", i), "message", "hint")
		}
		r.Settle()
		if r.Verdict != tc.want {
			t.Errorf("Settle over %q: %q, want %q", tc.sevs, r.Verdict, tc.want)
		}
	}
	r := New()
	r.Add(SevWarn, "p2p.slow", "slow", "check the link")
	if want := []Finding{{ID: "p2p.slow", Status: SevWarn, Message: "slow", Hint: "check the link"}}; !reflect.DeepEqual(r.Findings, want) {
		t.Errorf("Add: %+v, want %+v", r.Findings, want)
	}
}

// A report missing a list, or holding null for it, decodes to an empty list, so it
// re-encodes with the documented shape; a list with entries is kept as it is.
func TestDecodeFillsMissingLists(t *testing.T) {
	for _, body := range []string{
		`{"schema": 2, "verdict": "pass"}`,
		`{"schema": 2, "verdict": "pass", "findings": null, "modules": null, "gpus": null, "durations": null, "pairs": null,
		  "copies": null, "high_mem": null, "latencies": null, "kernel_events": null, "bar1": null}`,
	} {
		r, err := Decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"findings", "modules", "gpus", "durations", "pairs", "copies", "high_mem", "latencies", "kernel_events", "bar1"} {
			if !strings.Contains(string(b), `"`+k+`": []`) {
				t.Errorf("%s: %q is not an empty list:\n%s", body, k, b)
			}
		}
	}
	r := fullSample()
	r.KernelEvents = []KEvent{{Kind: KEventXid, BDF: "0000:01:00.0", Code: 79, Line: "NVRM: Xid 79"}}
	roundTrip(t, r)
}

// Decode's refusals that are not about one value: another schema, bytes after the
// report (trailing white space is fine), and a report Validate refuses.
func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(gpuSample())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(append(bytes.Clone(good), " \n\t\n"...)); err != nil {
		t.Errorf("trailing white space refused: %v", err)
	}
	for _, tc := range []struct {
		body, want string
	}{
		{`{"schema": 1, "verdict": "pass"}`, "decoding report: schema 1, want 2"},
		{`{"verdict": "pass"}`, "decoding report: schema 0, want 2"},
		{`{"schema": 2, "verdict": "pass"}` + "\n x", "2:2: not JSON: bytes follow the report"},
		{`{"schema": 2, "verdict": "pass"} {}`, "1:34: not JSON: bytes follow the report"},
		{`{"schema": 2, "verdict": "pass"}` + "\n\u00a0", "2:1: not JSON: bytes follow the report"}, // only JSON's whitespace may follow
		{`{"schema": 2, "verdict": "pass", "durations": [{"ms": -5}]}`, "decoding report: invalid report: durations[0].ms: -5, want 0 or more"},
		{`{"schema": 2, "verdict": "pass", "findings": [{"status": "fail", "id": "x"}]}`, `decoding report: invalid report: verdict: "pass" with a fail finding, want "fail"`},
		// A report of another schema is refused as such even when a field it types
		// differently is what fails to decode (docs/selftest.md: the schema is bumped
		// when a field changes meaning): a newer image's report, not a broken one.
		{`{"schema": 3, "verdict": {"value": "pass"}}`, "decoding report: schema 3, want 2"},
		{`{"copies": [{"gbps": "24.1 GB/s"}], "schema": 1}`, "decoding report: schema 1, want 2"},
		// Schema 2 itself, or no schema number to go by: the key that is wrong.
		{`{"schema": 2, "verdict": {"value": "pass"}}`, "1:27: verdict: want a string, got an object"},
		{`{"verdict": {"value": "pass"}}`, "1:14: verdict: want a string, got an object"},
		{`{"schema": "3", "verdict": "pass"}`, "1:15: schema: want a whole number, got a string"},
		// Not JSON stays not JSON, whatever its schema says.
		{`{"schema": 3, "verdict": {`, "1:27: not JSON: the input ends inside a value"},
	} {
		if _, err := Decode([]byte(tc.body)); err == nil || err.Error() != tc.want {
			t.Errorf("Decode(%s): %v\nwant %s", tc.body, err, tc.want)
		}
	}
}

// A value JSON cannot hold (a NaN rate) is an error from both encoders, not a
// report that would not decode.
func TestEncodeRefusesNaN(t *testing.T) {
	r := gpuSample()
	r.Copies[0].GBps = math.NaN()
	if _, err := Encode(r); err == nil || !strings.HasPrefix(err.Error(), "encoding report: json: unsupported value: NaN") {
		t.Errorf("Encode: %v", err)
	}
	if _, err := EncodeLine(r); err == nil || !strings.HasPrefix(err.Error(), "report line: json: unsupported value: NaN") {
		t.Errorf("EncodeLine: %v", err)
	}
	b, err := Encode(gpuSample())
	if err != nil || !bytes.HasSuffix(b, []byte("}\n")) {
		t.Errorf("Encode does not end in a newline: %q, %v", b[max(len(b)-4, 0):], err)
	}
}
