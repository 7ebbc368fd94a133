package verdict

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestSummaryGolden(t *testing.T) {
	tests := []struct {
		name   string
		report func() *selftest.Report
		gpus   int
	}{
		{"vm-pass", vmReport, 0},
		{"vm-no-libcuda", func() *selftest.Report {
			r := vmReport()
			r.Modules[0] = selftest.Module{Name: "nvidia", File: "updates/nvidia.ko", Result: selftest.ModError, Errno: 8, Error: "exec format error"}
			r.CUDA = selftest.CUDA{Library: "libcuda.so.1", Error: "libcuda.so.1: cannot open shared object file: No such file or directory"}
			return r
		}, 0},
		{"gpu-stalled", func() *selftest.Report {
			r := gpuReport(4)
			r.GPUs[3].Link.CurrentWidth = 8
			r.DeadlineExceeded = "cuda"
			r.CUDA.CuInit = nil
			return r
		}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.report()
			Judge(r, FromPlatform(&recipe.Platform{GPUs: tt.gpus}))
			got := selftest.Summary(r)
			path := filepath.Join("testdata", "summary-"+tt.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if got != string(want) {
				t.Errorf("summary differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
}
