package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

const moduleCertDatum = "module certificate"

// 1. Kernel: unpack the pinned source, apply patches, merge fragments, compile, collect.
func kernelStage() *stage {
	return &stage{
		Name: StageKernel, Version: kernel.Version,
		Roles:      []string{lock.RoleKernelSource},
		Fields:     []string{"kernel.base"},
		DataFields: []string{"kernel.fragments", "kernel.patches", "sign.module_cert"},
		Clock:      clockOwn,
		Data: func(pc *planContext) ([]Datum, []string, error) {
			r := pc.Recipe
			var data []Datum
			var errs recipe.Errors
			for i, f := range r.Kernel.Fragments {
				b, _, err := r.ReadData(f, kernel.Configs, kernel.ConfigsDir)
				if err != nil {
					errs = append(errs, r.ErrorAt(fmt.Sprintf("kernel.fragments[%d]", i), "%v", err))
					continue
				}
				data = append(data, Datum{Name: "fragment " + f, Bytes: b})
			}
			for i, f := range r.Kernel.Patches {
				b, _, err := r.ReadData(f, kernel.Configs, "patches")
				if err != nil {
					errs = append(errs, r.ErrorAt(fmt.Sprintf("kernel.patches[%d]", i), "%v", err))
					continue
				}
				data = append(data, Datum{Name: "patch " + f, Bytes: b})
			}
			// Only with a certificate: a recipe without module signing keeps its key.
			ms, err := pc.moduleSigning()
			if err != nil {
				errs = append(errs, asRecipeErrors(err)...)
			}
			if len(errs) > 0 {
				return nil, nil, errs
			}
			if ms != nil {
				data = append(data, Datum{Name: moduleCertDatum, Bytes: ms.CertPEM})
			}
			return data, nil, nil
		},
		Run: func(ctx context.Context, sr *stageRun) error {
			src, err := sr.unpack(ctx, lock.RoleKernelSource, filepath.Join(sr.Scratch, "src"))
			if err != nil {
				return err
			}
			var frags, patches []kernel.Fragment
			for _, d := range sr.Data {
				if name, ok := strings.CutPrefix(d.Name, "fragment "); ok {
					frags = append(frags, kernel.Fragment{Name: name, Data: d.Bytes})
				}
				if name, ok := strings.CutPrefix(d.Name, "patch "); ok {
					patches = append(patches, kernel.Fragment{Name: name, Data: d.Bytes})
				}
			}
			cert, _ := sr.Datum(moduleCertDatum)
			base := sr.Recipe.Kernel.Base
			// The step count of the last compile of this config makes the total and
			// the ETA of the progress lines; it never changes the output.
			hint := kernelStepsHint(sr.Store, base, frags)
			res, err := kernel.Build(ctx, kernel.Options{
				Source: src, Base: base, Fragments: frags, Patches: patches, ModuleSigCert: cert, Epoch: sr.Epoch,
				Jobs: sr.Jobs, Log: sr.Log, LogFile: filepath.Join(sr.Scratch, "kernel.log"), ObjectsHint: hint,
			}, sr.Out)
			if err != nil {
				return err
			}
			saveKernelSteps(sr.Store, base, frags, res.Steps)
			fmt.Fprintf(sr.Log, "kernel: release %s\n", res.Release)
			return nil
		},
	}
}

// kernelStepsFiles are where the store remembers a kernel compile's step count:
// by the config (base and fragments: what decides which objects are built),
// then by the base alone, for a config never compiled in this store.
func kernelStepsFiles(st *store.Store, base string, frags []kernel.Fragment) []string {
	h := sha256.New()
	fmt.Fprintf(h, "base %s\n", base)
	for _, f := range frags {
		fmt.Fprintf(h, "fragment %s %d\n", f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return []string{
		st.HintPath("kernel-steps-" + base + "-" + hex.EncodeToString(h.Sum(nil))[:16]),
		st.HintPath("kernel-steps-" + base),
	}
}

// kernelStepsHint is the step count of the last compile of this config (else
// of this base), 0 when the store has none.
func kernelStepsHint(st *store.Store, base string, frags []kernel.Fragment) int64 {
	for _, f := range kernelStepsFiles(st, base, frags) {
		if n, err := readInt(f); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

func saveKernelSteps(st *store.Store, base string, frags []kernel.Fragment, steps int64) {
	if steps <= 0 {
		return
	}
	for _, f := range kernelStepsFiles(st, base, frags) {
		os.MkdirAll(filepath.Dir(f), 0o755)
		// Atomic: a concurrent build of another recipe may read it. A hint
		// that cannot be saved costs only the next build's progress estimate.
		fsutil.WriteFileAtomic(f, []byte(strconv.FormatInt(steps, 10)+"\n"), 0o644)
	}
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
