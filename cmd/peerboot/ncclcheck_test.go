package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/fatbin"
	"github.com/peerboot/peerboot/ncclinfo/nccltest"
	"github.com/peerboot/peerboot/recipe"
)

// build warns when the image's NCCL has no code for the platform's GPU: Debian's
// (built with CUDA 12.4, cubins to sm_90) on the RTX 5090; not on the RTX 4090, not
// with an sm_120 build, and not when the image has no NCCL.
func TestNCCLCheck(t *testing.T) {
	r5090, err := recipe.Load("../../recipes/epyc-4x5090.toml")
	if err != nil {
		t.Fatal(err)
	}
	r4090, err := recipe.Load("../../recipes/epyc-4gpu.toml")
	if err != nil {
		t.Fatal(err)
	}
	debian := []fatbin.Entry{{Kind: fatbin.Cubin, SM: 60}, {Kind: fatbin.Cubin, SM: 70}, {Kind: fatbin.Cubin, SM: 80}, {Kind: fatbin.Cubin, SM: 90}}
	withSM120 := append(append([]fatbin.Entry{}, debian...), fatbin.Entry{Kind: fatbin.Cubin, SM: 120})
	for _, c := range []struct {
		name    string
		r       *recipe.Resolved
		cuda    string
		entries []fatbin.Entry // nil: no NCCL in the image
		want    []string
	}{
		{"debian on the 5090", r5090, "12.4", debian, []string{"NCCL 2.29.7 (built with CUDA 12.4) cannot run on the platform's RTX 5090 (GB202, sm_120)", "1 of 1 modules", "no kernel image is available", "CUDA 12.4 cannot compile for sm_120"}},
		{"debian on the 4090", r4090, "12.4", debian, nil},
		{"an sm_120 build on the 5090", r5090, "12.8", withSM120, nil},
		{"no NCCL", r5090, "", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.entries != nil {
				nccltest.Build(t, filepath.Join(root, ncclLib), "2.29.7", c.cuda, c.entries)
			}
			got := ncclCheck(c.r, root)
			if len(c.want) == 0 {
				if len(got) != 0 {
					t.Errorf("warned: %q", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %q, want one warning", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("%q lacks %q", got[0], w)
				}
			}
		})
	}
}
