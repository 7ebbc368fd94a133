package verdict

import (
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/recipe"
)

// The recipe adapter: the one place that reads a recipe for the rules.

// FromRecipe collects what the verdict rules need from a resolved recipe; nil for nil.
func FromRecipe(rc *recipe.Recipe) *Expect {
	if rc == nil {
		return nil
	}
	e := FromPlatform(&rc.Platform)
	e.DriverVersion = rc.Driver.Version
	e.P2P = rc.Driver.P2P
	e.ModeLineChips = modeLineChips(rc.Driver)
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

// modeLineChips are the chips whose GPUs log the mode line under the recipe's driver
// (driver/patches/README.md, "The mode line"): peerboot's P2P series does, for the
// chips its branch covers (550: AD102; 580 on: GA102, AD102, GB202), when driver.p2p
// says a patched driver and driver.patches names a patch of peerboot's series (a bare
// NAME from driver/patches/<version>/, not a ./path of the recipe's own). Below 550
// there is no such series. TestModeLineChipsMatchSeries holds this to the patch text.
func modeLineChips(d recipe.Driver) []string {
	if d.P2P != P2PStaticBAR1 && d.P2P != P2PDynamicBAR1 {
		return nil
	}
	series := false
	for _, p := range d.Patches {
		series = series || !strings.Contains(p, "/")
	}
	major, err := strconv.Atoi(strings.SplitN(d.Version, ".", 2)[0])
	switch {
	case !series || err != nil || major < 550:
		return nil
	case major < 580:
		return []string{"AD102"}
	}
	return []string{"GA102", "AD102", "GB202"}
}
