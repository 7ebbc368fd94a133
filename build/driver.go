package build

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/driver"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
)

// 2. Driver: unpack the pinned driver source, apply the series, build against the kernel.
func driverStage() *stage {
	return &stage{
		Name: StageDriver, Version: driver.Version,
		Deps:       []StageName{StageKernel},
		Roles:      []string{lock.RoleDriverSource},
		Fields:     []string{"driver.version", "driver.modules"},
		DataFields: []string{"driver.patches"},
		Clock:      clockOwn,
		Data: func(pc *planContext) ([]Datum, []string, error) {
			r := pc.Recipe
			var data []Datum
			var errs recipe.Errors
			for i, f := range r.Driver.Patches {
				b, _, err := r.ReadData(f, driver.Patches, driver.PatchDir(r.Driver.Version))
				if err != nil {
					errs = append(errs, r.ErrorAt(fmt.Sprintf("driver.patches[%d]", i), "%v", err))
					continue
				}
				data = append(data, Datum{Name: "patch " + f, Bytes: b})
			}
			if len(errs) > 0 {
				return nil, nil, errs
			}
			return data, nil, nil
		},
		Run: func(ctx context.Context, sr *stageRun) error {
			src, err := sr.unpack(ctx, lock.RoleDriverSource, filepath.Join(sr.Scratch, "src"))
			if err != nil {
				return err
			}
			var patches []driver.Patch
			for _, d := range sr.Data {
				if name, ok := strings.CutPrefix(d.Name, "patch "); ok {
					patches = append(patches, driver.Patch{Name: name, Data: d.Bytes})
				}
			}
			res, err := driver.Build(ctx, driver.Options{
				Source: src, KernelOut: sr.Dep(StageKernel), Patches: patches, Modules: sr.Recipe.Driver.Modules,
				Epoch: sr.Epoch, Jobs: sr.Jobs, Log: sr.Log, LogFile: filepath.Join(sr.Scratch, "driver.log"),
			}, sr.Out)
			if err != nil {
				return err
			}
			fmt.Fprintf(sr.Log, "driver: %d modules for %s\n", len(res.Modules), res.Release)
			return nil
		},
	}
}
