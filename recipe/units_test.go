package recipe

import (
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func TestSizeRoundTrip(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		out  string // String(); "" = in
	}{
		{"0", 0, ""},
		{"0B", 0, "0"},
		{"0GiB", 0, "0"},
		{"512B", 512, ""},
		{"1KiB", 1 << 10, ""},
		{"1024B", 1 << 10, "1KiB"},
		{"1536B", 1536, ""},
		{"256MiB", 256 << 20, ""},
		{"32GiB", 32 << 30, ""},
		{"49140MiB", 49140 << 20, ""},
		{"2048MiB", 2 << 30, "2GiB"},
		{"2TiB", 2 << 40, ""},
		{"4194304TiB", 1 << 62, ""},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err != nil {
			t.Errorf("ParseSize(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseSize(%q) = %d, want %d", tt.in, got, tt.want)
		}
		out := tt.out
		if out == "" {
			out = tt.in
		}
		if got.String() != out {
			t.Errorf("ParseSize(%q).String() = %q, want %q", tt.in, got.String(), out)
		}
		back, err := ParseSize(got.String())
		if err != nil || back != got {
			t.Errorf("ParseSize(%q) = %d, %v: String does not round-trip", got.String(), back, err)
		}
		text, _ := got.MarshalText()
		var u Size
		if err := u.UnmarshalText(text); err != nil || u != got {
			t.Errorf("text round-trip of %d: got %d, %v", got, u, err)
		}
	}
}

func TestSizeRejects(t *testing.T) {
	for _, in := range []string{
		"256MB", "256mb", "256M", "1GB", "1.5GiB", "-1MiB", "+1MiB", "MiB", "", "B",
		"01MiB", "00", "1 MiB", " 1MiB", "1MiB ", "0x10MiB", "1_000MiB", "1e3MiB", "1MiBB",
		"4194305TiB", "9223372036854775807B", "99999999999999999999MiB", "-0MiB",
	} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	// Through TOML the error surfaces with the value.
	var v struct{ S Size }
	if _, err := toml.Decode(`S = "256MB"`, &v); err == nil || !strings.Contains(err.Error(), `"256MB"`) {
		t.Errorf("decoding 256MB: %v", err)
	}
	// A bare number (disk_size = 512) reaches UnmarshalText as "512": the message
	// names the missing unit rather than quoting it back as if a string were written.
	for _, in := range []string{`S = 512`, `S = "512"`} {
		if _, err := toml.Decode(in, &v); err == nil || !strings.Contains(err.Error(), `got 512 with no unit ("512MiB" for mebibytes)`) {
			t.Errorf("decoding %s: %v", in, err)
		}
	}
}

func TestSizeMiB(t *testing.T) {
	for _, tt := range []struct {
		s    Size
		want int64
	}{{0, 0}, {1<<20 - 1, 0}, {1 << 20, 1}, {49140 << 20, 49140}, {2 << 40, 2 << 20}} {
		if got := tt.s.MiB(); got != tt.want {
			t.Errorf("Size(%d).MiB() = %d, want %d", tt.s, got, tt.want)
		}
	}
}

func TestDuration(t *testing.T) {
	for _, tt := range []struct {
		in, out string
		want    time.Duration
	}{
		{"90s", "1m30s", 90 * time.Second},
		{"2m", "2m0s", 2 * time.Minute},
		{"5m0s", "5m0s", 5 * time.Minute},
		{"1h", "1h0m0s", time.Hour},
		{"1.5s", "1.5s", 1500 * time.Millisecond},
		{"0s", "0s", 0},
	} {
		var d Duration
		if err := d.UnmarshalText([]byte(tt.in)); err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		if d.Std() != tt.want {
			t.Errorf("%q = %v, want %v", tt.in, d.Std(), tt.want)
		}
		text, _ := d.MarshalText()
		if string(text) != tt.out {
			t.Errorf("%q marshals as %q, want %q", tt.in, text, tt.out)
		}
		var back Duration
		if err := back.UnmarshalText(text); err != nil || back != d {
			t.Errorf("%q does not round-trip: %v, %v", text, back, err)
		}
	}
	for _, in := range []string{"", "90", "2 minutes", "1d", "s"} {
		var d Duration
		err := d.UnmarshalText([]byte(in))
		if err == nil {
			t.Errorf("%q parsed as %v, want an error", in, d.Std())
		} else if !strings.Contains(err.Error(), "want a duration") {
			t.Errorf("%q: error %q does not say what is wanted", in, err)
		}
	}
}
