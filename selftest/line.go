package selftest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Marker starts the one console line that carries the whole report, so a QEMU test or a
// serial logger can recover the JSON from a console capture alone.
const Marker = "PEERBOOT-REPORT"

// maxReportBytes bounds what DecodeLine inflates: console captures are outside bytes and
// a gzip bomb must not take the collector down.
const maxReportBytes = 16 << 20

// ErrNoMarker means the line carries no report.
var ErrNoMarker = errors.New("no " + Marker + " marker")

// EncodeLine renders the report as "PEERBOOT-REPORT <base64(gzip(json))>" without a
// trailing newline. The JSON is compact and gzip's header carries no name or time, so
// equal reports give equal lines.
func EncodeLine(r *Report) (string, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("report line: %w", err)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", fmt.Errorf("report line: %w", err)
	}
	if _, err := zw.Write(js); err != nil {
		return "", fmt.Errorf("report line: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("report line: %w", err)
	}
	return Marker + " " + base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// DecodeLine finds the marker anywhere in line (the kernel may have printed on the same
// console line before it, and a serial capture may end it with "\r") and decodes the
// base64 run that follows it. The last marker wins: a line that holds two is most
// likely a half-printed report followed by a whole one.
func DecodeLine(line string) (*Report, error) {
	i := strings.LastIndex(line, Marker)
	if i < 0 {
		return nil, ErrNoMarker
	}
	rest := strings.TrimLeft(line[i+len(Marker):], " \t")
	n := 0
	for n < len(rest) && isBase64(rest[n]) {
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("report line: nothing after %s", Marker)
	}
	raw, err := base64.StdEncoding.DecodeString(rest[:n])
	if err != nil {
		return nil, fmt.Errorf("report line: base64: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("report line: gzip: %w", err)
	}
	js, err := io.ReadAll(io.LimitReader(zr, maxReportBytes+1))
	if err != nil {
		return nil, fmt.Errorf("report line: gzip: %w", err)
	}
	if len(js) > maxReportBytes {
		return nil, fmt.Errorf("report line: report larger than %d bytes", maxReportBytes)
	}
	return Decode(js)
}

// FindLine scans console output for the last report line and decodes it.
func FindLine(console []byte) (*Report, error) {
	lines := strings.Split(string(console), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], Marker) {
			return DecodeLine(lines[i])
		}
	}
	return nil, ErrNoMarker
}

func isBase64(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='
}
