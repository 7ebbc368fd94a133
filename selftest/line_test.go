package selftest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// The base64 run after the marker ends at the first byte outside the standard
// alphabet (with padding), so whatever the console printed after it is left out.
func TestIsBase64(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
	for c := range 256 {
		if got, want := isBase64(byte(c)), strings.IndexByte(alphabet, byte(c)) >= 0; got != want {
			t.Errorf("isBase64(%q) = %v, want %v", rune(c), got, want)
		}
	}
}

// gzLine is a report line carrying js as it is.
func gzLine(t *testing.T, js []byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(js); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return Marker + " " + base64.StdEncoding.EncodeToString(buf.Bytes())
}

// DecodeLine inflates at most 16 MiB: a report of exactly that size decodes, one byte
// more is refused before it is parsed (a console capture is outside input, and a
// gzip bomb must not take the collector down).
func TestDecodeLineBound(t *testing.T) {
	js, err := Encode(gpuSample())
	if err != nil {
		t.Fatal(err)
	}
	padded := append(js, bytes.Repeat([]byte(" "), maxReportBytes-len(js))...)
	r, err := DecodeLine(gzLine(t, padded))
	if err != nil || r.GPUs[1].BDF != "0000:02:00.0" {
		t.Errorf("a %d-byte report: %v", len(padded), err)
	}
	_, err = DecodeLine(gzLine(t, append(padded, ' ')))
	if want := "report line: report larger than 16777216 bytes"; err == nil || err.Error() != want {
		t.Errorf("a report one byte over: %v, want %s", err, want)
	}
}

// DecodeLine's errors say which layer failed.
func TestDecodeLineLayers(t *testing.T) {
	for _, tc := range []struct {
		line, want string
	}{
		{"no marker", ErrNoMarker.Error()},
		{Marker + " \t", "report line: nothing after " + Marker},
		{Marker + " !AAAA", "report line: nothing after " + Marker},
		{Marker + " AAA", "report line: base64: illegal base64 data at input byte 0"},
		{Marker + " " + base64.StdEncoding.EncodeToString([]byte("not a gzip stream")), "report line: gzip: gzip: invalid header"},
		// A gzip header, then no deflate stream.
		{Marker + " " + base64.StdEncoding.EncodeToString([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff\xff\xff")), "report line: gzip: flate: corrupt input"},
		{gzLine(t, []byte(`{"schema": 3}`)), "decoding report: schema 3, want 2"},
		// The last marker wins: a half-printed report and then a whole one read as the whole one.
		{Marker + " H4sIAAAA" + gzLine(t, []byte(`{"schema": 1}`)), "decoding report: schema 1, want 2"},
	} {
		_, err := DecodeLine(tc.line)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("DecodeLine(%.40q): %v, want %s", tc.line, err, tc.want)
		}
	}
}

// FindLine takes the last line of the console that holds a marker, the first line
// included; a console without one is ErrNoMarker.
func TestFindLine(t *testing.T) {
	a, b := gpuSample(), sampleReport()
	la, err := EncodeLine(a)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := EncodeLine(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		console string
		gpus    int
	}{
		{la, 2},
		{la + "\nlogin: ", 2},
		{"boot\n" + lb + "\nreboot\n" + la + "\r\n\n", 2},
		{la + "\n" + lb + "\n", 0},
	} {
		r, err := FindLine([]byte(tc.console))
		if err != nil {
			t.Errorf("FindLine(%.60q): %v", tc.console, err)
			continue
		}
		if len(r.GPUs) != tc.gpus {
			t.Errorf("FindLine(%.60q): the report with %d GPUs, want %d", tc.console, len(r.GPUs), tc.gpus)
		}
	}
	// The last line with a marker decides, even when an earlier one holds a good report.
	if _, err := FindLine([]byte(la + "\n" + Marker + " AAA\n")); err == nil {
		t.Error("FindLine read past a broken last report line")
	}
	if _, err := FindLine([]byte("boot\nlogin: \n")); !errors.Is(err, ErrNoMarker) {
		t.Errorf("FindLine without a marker: %v", err)
	}
}
