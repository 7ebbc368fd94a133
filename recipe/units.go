package recipe

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written with a binary unit ("256MiB"). Decimal units ("256MB")
// are refused: on these boxes the difference between 32 GB and 32 GiB is a real bug.
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// ParseSize parses "0", "512B", "256MiB", "32GiB", "2TiB".
func ParseSize(s string) (Size, error) {
	if s == "0" {
		return 0, nil
	}
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n < 0 || num != strconv.FormatInt(n, 10) {
			break
		}
		if n > (1<<62)/u.mult {
			return 0, fmt.Errorf("want a size below 4 EiB, got %q", s)
		}
		return Size(n * u.mult), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && s == strconv.FormatInt(n, 10) {
		// disk_size = 512 reaches here as "512", as does "512": name what is missing.
		return 0, fmt.Errorf("want a whole number with a binary unit (B, KiB, MiB, GiB, TiB), got %s with no unit (\"%sMiB\" for mebibytes)", s, s)
	}
	return 0, fmt.Errorf("want a whole number with a binary unit (B, KiB, MiB, GiB, TiB), got %q", s)
}

func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes the largest unit that divides exactly, so values round-trip.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s Size) String() string {
	if s == 0 {
		return "0"
	}
	for _, u := range sizeUnits {
		if int64(s)%u.mult == 0 {
			return strconv.FormatInt(int64(s)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// MiB is s in whole mebibytes (rounded down).
func (s Size) MiB() int64 { return int64(s) >> 20 }

// Duration is a Go duration string ("90s", "2m").
type Duration time.Duration

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration like \"90s\" or \"2m\", got %q", string(b))
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d Duration) Std() time.Duration { return time.Duration(d) }
