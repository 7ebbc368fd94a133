package verdict

import "github.com/peerboot/peerboot/recipe"

// The recipe adapter: the one place that reads a recipe for the rules.

// FromRecipe collects what the verdict rules need from a resolved recipe; nil for nil.
func FromRecipe(rc *recipe.Recipe) *Expect {
	if rc == nil {
		return nil
	}
	e := FromPlatform(&rc.Platform)
	e.DriverVersion = rc.Driver.Version
	e.P2P = rc.Driver.P2P
	e.DriverParams = rc.Driver.Params
	e.RequireP2P = rc.Selftest.RequireP2P
	e.NoVerify = !rc.Selftest.Verify
	e.MinBusBWGBps = rc.Selftest.MinBusbwGBps
	if len(rc.Selftest.Thresholds) > 0 {
		e.Thresholds = make(map[string]Threshold, len(rc.Selftest.Thresholds))
		for class, t := range rc.Selftest.Thresholds {
			e.Thresholds[class] = Threshold{UnidirGBps: t.UnidirGBps, BidirGBps: t.BidirGBps, MaxLatencyUS: t.MaxLatencyUS}
		}
	}
	e.Env = rc.Env
	return e
}

// FromPlatform is an Expect that knows only the hardware; nil for nil.
func FromPlatform(p *recipe.Platform) *Expect {
	if p == nil {
		return nil
	}
	return &Expect{GPUs: p.GPUs, GPUModel: p.GPUModel, VRAMBytes: int64(p.VRAM), BAR1Bytes: int64(p.BAR1), GPUNUMA: p.GPUNUMA}
}
