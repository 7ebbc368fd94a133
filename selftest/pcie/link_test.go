package pcie

import (
	"math"
	"testing"
)

func TestLinkGTps(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{"16.0 GT/s PCIe", 16},
		{"2.5 GT/s PCIe", 2.5},
		{"32.0 GT/s PCIe", 32},
		{"8 GT/s", 8}, // older kernels
		{"5 GT/s", 5},
		{"Unknown", 0},
		{"Unknown speed", 0},
		{"", 0},
		{"16.0", 0},
		{"16.0 MB/s", 0},
		{"fast GT/s", 0},
		{"-8 GT/s", 0},
		{"NaN GT/s", 0},
		{"Inf GT/s", 0},
	}
	for _, tt := range tests {
		if got := LinkGTps(tt.in); got != tt.want {
			t.Errorf("LinkGTps(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestTheoreticalGBps(t *testing.T) {
	tests := []struct {
		speed string
		width int
		want  float64
	}{
		{"16.0 GT/s PCIe", 16, 31.5077}, // 16e9*16*128/130/8
		{"16.0 GT/s PCIe", 8, 15.7538},
		{"8.0 GT/s PCIe", 16, 15.7538},
		{"32.0 GT/s PCIe", 16, 63.0154},
		{"5.0 GT/s PCIe", 16, 8}, // 8b/10b
		{"2.5 GT/s PCIe", 16, 4},
		{"2.5 GT/s PCIe", 1, 0.25},
		{"16.0 GT/s PCIe", 0, 0},
		{"Unknown", 16, 0},
	}
	for _, tt := range tests {
		if got := TheoreticalGBps(tt.speed, tt.width); math.Abs(got-tt.want) > 1e-3 {
			t.Errorf("TheoreticalGBps(%q, %d) = %.4f, want %.4f", tt.speed, tt.width, got, tt.want)
		}
	}
}

func TestSpeedName(t *testing.T) {
	want := map[int]float64{0: 0, 1: 2.5, 2: 5, 3: 8, 4: 16, 5: 32, 6: 64, 7: 0, -1: 0}
	for code, gt := range want {
		if got := LinkGTps(SpeedName(code)); got != gt {
			t.Errorf("LinkGTps(SpeedName(%d)) = %v (%q), want %v", code, got, SpeedName(code), gt)
		}
	}
}

// TestTheoreticalGBpsNegativeWidth: a garbled width (sysfs read as -4) is unknown,
// never a negative rate that would pass as a ceiling below every measurement.
func TestTheoreticalGBpsNegativeWidth(t *testing.T) {
	if got := TheoreticalGBps("16.0 GT/s PCIe", -4); got != 0 {
		t.Errorf("TheoreticalGBps(16 GT/s, -4) = %v, want 0", got)
	}
}
