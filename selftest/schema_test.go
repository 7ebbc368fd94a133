package selftest

import (
	"sort"
	"testing"
)

// TopoRank orders the topology classes nearest first (the verdict compares them with
// NCCL_P2P_LEVEL and with "no farther than PXB"); a class it does not know ranks
// after every known one.
func TestTopoRank(t *testing.T) {
	classes := []string{"", TopoSYS, "XYZ", TopoPHB, TopoPIX, TopoNODE, TopoPXB}
	sort.SliceStable(classes, func(i, j int) bool { return TopoRank(classes[i]) < TopoRank(classes[j]) })
	want := []string{TopoPIX, TopoPXB, TopoPHB, TopoNODE, TopoSYS, "", "XYZ"}
	for i := range want {
		if classes[i] != want[i] {
			t.Fatalf("ordered %q, want %q", classes, want)
		}
	}
	if TopoRank("") != TopoRank("XYZ") {
		t.Errorf("unknown classes rank %d and %d, want the same", TopoRank(""), TopoRank("XYZ"))
	}
}

// Redirects: any one of the three ACS bits that send peer traffic to the root complex
// counts; a port without the capability (nil) redirects nothing.
func TestACSRedirects(t *testing.T) {
	for _, tc := range []struct {
		acs  *ACS
		want bool
	}{
		{nil, false},
		{&ACS{Cap: 0x7f}, false},
		{&ACS{RequestRedirect: true}, true},
		{&ACS{CompletionRedirect: true}, true},
		{&ACS{EgressControl: true}, true},
		{&ACS{RequestRedirect: true, CompletionRedirect: true, EgressControl: true}, true},
	} {
		if got := tc.acs.Redirects(); got != tc.want {
			t.Errorf("%+v.Redirects() = %v, want %v", tc.acs, got, tc.want)
		}
	}
}
