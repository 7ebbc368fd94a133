package pcie

import (
	"reflect"
	"testing"
)

// TestSplitCmdline: runs of blanks separate parameters and leave no empty ones, a
// last parameter without a newline after it is kept, and quotes hold blanks in.
func TestSplitCmdline(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"quiet  iommu=pt\n", []string{"quiet", "iommu=pt"}},
		{"quiet iommu=pt", []string{"quiet", "iommu=pt"}},
		{" \t\n", nil},
		{`a="b c"  d `, []string{`a="b c"`, "d"}},
	} {
		if got := splitCmdline(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitCmdline(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// What the scan keeps of a command line written without its newline.
	if got := IOMMUParams("amd_iommu=on iommu=pt"); !reflect.DeepEqual(got, []string{"amd_iommu=on", "iommu=pt"}) {
		t.Errorf("IOMMUParams = %q, want both parameters", got)
	}
}
