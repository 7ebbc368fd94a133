package sqldb

import (
	"testing"
	"time"
)

// A time stored as microseconds reads back as itself (in UTC, to the
// microsecond); 0 is the zero time, not 1970.
func TestMicrosRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 3, 19, 47, 1, 123456000, time.FixedZone("CET", 3600))
	if got := fromMicros(micros(at)); !got.Equal(at) || got.Location() != time.UTC {
		t.Errorf("fromMicros(micros(%v)) = %v", at, got)
	}
	if got := fromMicros(0); !got.IsZero() {
		t.Errorf("fromMicros(0) = %v, want the zero time", got)
	}
}
