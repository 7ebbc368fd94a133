package recipe

import (
	"cmp"
	"fmt"
	"maps"
	"net/url"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/peerboot/peerboot/apt"
	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/output"
)

// Limits that no real box exceeds; values beyond them are typos.
const (
	maxGPUs    = 16
	maxSockets = 8
	maxNUMA    = 64
	maxBAR1    = Size(2 << 40) // 2 TiB: the largest BAR a PCIe resizable BAR capability encodes for these parts
	maxVRAM    = Size(1 << 40)
)

var (
	nameRe      = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	debNameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]+$`)
	debVerRe    = regexp.MustCompile(`^([0-9]+:)?[0-9][A-Za-z0-9.+~:-]*$`)
	hex40       = regexp.MustCompile(`^[0-9a-f]{40}$`)
	hex64       = regexp.MustCompile(`^[0-9a-f]{64}$`)
	driverVerRe = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)
	envKeyRe    = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
	paramRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	keyRefRe    = regexp.MustCompile(`^(file:.+|env:[A-Za-z_][A-Za-z0-9_]*)$`)
)

// KnownModules are the kernel modules nvidia-open builds, in a valid load order.
var KnownModules = []string{"nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem"}

// gpuChipRe names the chip behind a platform.gpu_model, for the boards the
// P2P series cover (driver/patches/README.md, decision table). Other models
// are not checked.
var gpuChipRe = []struct {
	re   *regexp.Regexp
	chip string
}{
	{regexp.MustCompile(`(?i)\bRTX\s*30(80|90)\b`), "GA102"},
	{regexp.MustCompile(`(?i)\bRTX\s*4090\b`), "AD102"},
	{regexp.MustCompile(`(?i)\bRTX\s*5090\b`), "GB202"},
}

// GPUChip is the chip of a platform.gpu_model ("RTX 3090" → "GA102"), "" when
// the model is not one the P2P series know.
func GPUChip(model string) string {
	for _, c := range gpuChipRe {
		if c.re.MatchString(model) {
			return c.chip
		}
	}
	return ""
}

// TopologyClasses are nvidia-smi's PCIe path classes, nearest first.
var TopologyClasses = []string{"PIX", "PXB", "PHB", "NODE", "SYS"}

type checker struct{ errs Errors }

func (c *checker) add(key, format string, args ...any) {
	c.errs = append(c.errs, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) oneOf(key, got string, allowed ...string) {
	for _, a := range allowed {
		if got == a {
			return
		}
	}
	c.add(key, "want one of %s, got %q", strings.Join(allowed, ", "), got)
}

func (c *checker) intRange(key string, got, lo, hi int) {
	if got < lo || got > hi {
		c.add(key, "want %d..%d, got %d", lo, hi, got)
	}
}

func (c *checker) sizeRange(key string, got, lo, hi Size) {
	if got < lo || got > hi {
		c.add(key, "want %s..%s, got %s", lo, hi, got)
	}
}

func unique[S ~string](c *checker, key string, list []S) {
	seen := map[S]int{}
	for i, v := range list {
		if j, ok := seen[v]; ok {
			c.add(fmt.Sprintf("%s[%d]", key, i), "duplicate %q (also at index %d)", v, j)
		}
		seen[v] = i
	}
}

func validate(r *Recipe) Errors {
	c := &checker{}
	if !nameRe.MatchString(r.Name) {
		c.add("name", "want lower-case letters, digits, '.', '_', '-', got %q", r.Name)
	}
	if r.SourceDateEpoch < 0 {
		c.add("source_date_epoch", "want seconds since 1970 (0: derived from the inputs), got %d", r.SourceDateEpoch)
	}
	c.platform(&r.Platform)
	c.repos(r.Repos)
	c.source("kernel.source", r.Kernel.Source, len(r.Repos) > 0)
	c.oneOf("kernel.base", r.Kernel.Base, "tinyconfig", "x86_64_defconfig")
	c.fileList("kernel.fragments", r.Kernel.Fragments, true)
	c.fileList("kernel.patches", r.Kernel.Patches, false)
	if strings.ContainsAny(r.Kernel.Cmdline, "\n\r") {
		c.add("kernel.cmdline", "want one line")
	}
	c.driver(&r.Driver, len(r.Repos) > 0)
	if r.Driver.P2P == P2PStaticBAR1 && r.Platform.BAR1 > 0 && r.Platform.BAR1 < r.Platform.VRAM {
		c.add("driver.p2p", "want %q: platform.bar1 (%s) is smaller than platform.vram (%s), so a static BAR1 cannot map all of VRAM, got %q",
			P2PDynamicBAR1, r.Platform.BAR1, r.Platform.VRAM, r.Driver.P2P)
	}
	c.gpuDriver(&r.Platform, &r.Driver)
	c.userspace(&r.Userspace)
	c.compat(r)
	c.installer(&r.Userspace.Installer, r.Driver.Version, r.Userspace.Packages)
	if len(r.Userspace.Packages) > 0 && len(r.Repos) == 0 {
		c.add("userspace.packages", "packages need at least one [[repo]] to resolve from")
	}
	c.selftest(&r.Selftest)
	c.oneOf("boot.on_pass", r.Boot.OnPass, bootproto.ActionNames()...)
	c.oneOf("boot.on_fail", r.Boot.OnFail, bootproto.ActionNames()...)
	if r.Boot.ReportURL != "" {
		c.httpURL("boot.report_url", r.Boot.ReportURL)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		if !envKeyRe.MatchString(k) {
			c.add("env."+k, "want an environment variable name like NCCL_P2P_LEVEL")
		}
		if strings.ContainsAny(r.Env[k], "\n\r\x00") {
			c.add("env."+k, "want a one-line value")
		}
	}
	if len(r.Outputs.Formats) == 0 {
		c.add("outputs.formats", "want at least one of uki, disk, pxe, iso")
	}
	for i, f := range r.Outputs.Formats {
		c.oneOf(fmt.Sprintf("outputs.formats[%d]", i), string(f), output.KindNames()...)
	}
	unique(c, "outputs.formats", r.Outputs.Formats)
	c.sizeRange("outputs.disk_size", r.Outputs.DiskSize, 64<<20, 64<<30)
	c.source("outputs.efi_stub", r.Outputs.EFIStub, len(r.Repos) > 0)
	for _, k := range []struct{ key, v string }{
		{"sign.db_key", r.Sign.DBKey}, {"sign.db_cert", r.Sign.DBCert},
		{"sign.module_key", r.Sign.ModuleKey}, {"sign.module_cert", r.Sign.ModuleCert},
		{"sign.artifact_key", r.Sign.ArtifactKey}, {"sign.pcr_key", r.Sign.PCRKey},
	} {
		if k.v != "" && !keyRefRe.MatchString(k.v) {
			c.add(k.key, `want "file:PATH" or "env:VARIABLE", got %q`, k.v)
		}
	}
	c.ociRepo("cache.from", r.Cache.From)
	c.ociRepo("cache.to", r.Cache.To)
	for i, k := range r.Cache.Keys {
		if !keyRefRe.MatchString(k) {
			c.add(fmt.Sprintf("cache.keys[%d]", i), `want "file:PATH" or "env:VARIABLE", got %q`, k)
		}
	}
	if r.Sign.ModuleKey != "" && r.Sign.ModuleCert == "" {
		c.add("sign.module_key", "needs sign.module_cert too: the kernel is built to trust that certificate, and it names the signer")
	}
	return c.errs
}

func (c *checker) platform(p *Platform) {
	c.oneOf("platform.cpu_vendor", p.CPUVendor, "intel", "amd", "any")
	c.intRange("platform.sockets", p.Sockets, 1, maxSockets)
	c.intRange("platform.gpus", p.GPUs, 0, maxGPUs)
	c.intRange("platform.numa_nodes", p.NUMANodes, 1, maxNUMA)
	if p.GPUs > 0 {
		if p.GPUModel == "" {
			c.add("platform.gpu_model", "required when platform.gpus > 0")
		}
		c.sizeRange("platform.vram", p.VRAM, 1<<30, maxVRAM)
		c.sizeRange("platform.bar1", p.BAR1, 256<<20, maxBAR1)
	} else if p.BAR1 > maxBAR1 {
		c.sizeRange("platform.bar1", p.BAR1, 0, maxBAR1)
	}
	if p.BAR1 > 0 && p.BAR1&(p.BAR1-1) != 0 {
		// A resizable BAR's size is encoded as a power of two; anything else is a typo.
		c.add("platform.bar1", "want a power of two (a PCIe BAR is 2^n bytes: 256MiB, 32GiB), got %s", p.BAR1)
	}
	if len(p.GPUNUMA) > 0 && len(p.GPUNUMA) != p.GPUs {
		c.add("platform.gpu_numa", "want one NUMA node per GPU (%d), got %d", p.GPUs, len(p.GPUNUMA))
	}
	for i, n := range p.GPUNUMA {
		if n < 0 || n >= p.NUMANodes {
			c.add(fmt.Sprintf("platform.gpu_numa[%d]", i), "want a node in 0..%d (platform.numa_nodes = %d), got %d", p.NUMANodes-1, p.NUMANodes, n)
		}
	}
}

// gpuDriver refuses a driver branch that cannot drive the platform's GPUs
// the way the recipe says: peerboot's 550.163.01 P2P series patches AD102
// only (its 0002 binds the BAR1 P2P HAL for AD102; GA102 is in the 580 and
// 595 series), and GB202 (RTX 5090) is not supported by NVIDIA's drivers
// before 570.
func (c *checker) gpuDriver(p *Platform, d *Driver) {
	chip := GPUChip(p.GPUModel)
	if p.GPUs == 0 || chip == "" || d.Version == "" {
		return
	}
	majorText, _, _ := strings.Cut(d.Version, ".")
	major, err := strconv.Atoi(majorText)
	if err != nil {
		return // driver.version's own check reports it
	}
	switch {
	case chip == "GB202" && major < 570:
		c.add("platform.gpu_model", "%s is a GB202, which NVIDIA drivers support from 570 on: use driver 580.142 or 595.45.04 (recipes/drivers/595.45.04-p2p.toml), got driver.version %q", p.GPUModel, d.Version)
	case chip == "GA102" && major == 550 && d.P2P != "" && d.P2P != P2POff:
		c.add("platform.gpu_model", "%s is a GA102, and peerboot's 550 P2P series patches AD102 only (no P2P on GA102): use driver 580.142 or 595.45.04 (recipes/drivers/580.142-p2p.toml), or driver.p2p = %q, got driver.version %q with driver.p2p %q", p.GPUModel, P2POff, d.Version, d.P2P)
	}
}

func (c *checker) repos(repos []Repo) {
	names := make([]string, len(repos))
	for i, r := range repos {
		key := fmt.Sprintf("repo[%d]", i)
		names[i] = r.Name
		flat := r.Suite == "/" // apt's "deb URI /": no dists/, no components (NVIDIA's CUDA repository)
		switch {
		case flat && r.Name == "/":
			c.add(key+".name", "a flat repository (suite \"/\") needs a name, e.g. \"cuda\"")
		case !nameRe.MatchString(r.Name):
			c.add(key+".name", "want lower-case letters, digits, '.', '_', '-', got %q", r.Name)
		}
		if !flat && !nameRe.MatchString(r.Suite) {
			c.add(key+".suite", "want a suite like \"bookworm\" (or \"/\" for a flat repository), got %q", r.Suite)
		}
		if flat && len(r.Components) > 0 {
			c.add(key+".components", "a flat repository (suite \"/\") has no components, got %q", r.Components)
		}
		if flat && r.Mirror != "" {
			c.add(key+".mirror", "a flat repository (suite \"/\") is not a Debian mirror: give its url")
		}
		if !flat && len(r.Components) == 0 {
			c.add(key+".components", "want at least one component, e.g. [\"main\"]")
		}
		for j, comp := range r.Components {
			if !nameRe.MatchString(comp) {
				c.add(fmt.Sprintf("%s.components[%d]", key, j), "want a component like \"non-free\", got %q", comp)
			}
		}
		unique(c, key+".components", r.Components)
		for j, name := range r.Only {
			if !debNameRe.MatchString(name) {
				c.add(fmt.Sprintf("%s.only[%d]", key, j), "want a Debian package name, got %q", name)
			}
		}
		unique(c, key+".only", r.Only)
		c.oneOf(key+".architecture", r.Architecture, "amd64")
		if r.Keyring == "" {
			c.add(key+".keyring", "required: the OpenPGP keyring that signs this repository's InRelease")
		}
		switch {
		case r.Mirror != "" && r.URL != "":
			c.add(key+".url", "give either mirror or url, not both")
		case r.Mirror == "" && r.URL == "":
			c.add(key+".mirror", `want "system" (this machine's apt sources) or a url`)
		case r.Mirror != "":
			c.oneOf(key+".mirror", r.Mirror, "system")
		default:
			c.archiveURL(key+".url", r.URL)
		}
	}
	unique(c, "repo", names)
}

func (c *checker) source(key string, s Source, haveRepos bool) {
	set := []string{}
	for _, f := range []struct{ name, v string }{{"deb", s.Deb}, {"url", s.URL}, {"git", s.Git}} {
		if f.v != "" {
			set = append(set, f.name)
		}
	}
	if len(set) != 1 {
		if len(set) == 0 {
			c.add(key, "missing: want exactly one of deb, url, git")
		} else {
			c.add(key, "want exactly one of deb, url, git; got %s", strings.Join(set, " and "))
		}
		return
	}
	switch set[0] {
	case "deb":
		if !debNameRe.MatchString(s.Deb) {
			c.add(key+".deb", "want a Debian package name, got %q", s.Deb)
		}
		if s.Version != "" && !debVerRe.MatchString(s.Version) {
			c.add(key+".version", "want a Debian version like 535.261.03-1, got %q", s.Version)
		}
		if !haveRepos {
			c.add(key+".deb", "a Debian package source needs at least one [[repo]]")
		}
		if s.SHA256 != "" || s.Commit != "" {
			c.add(key, "a deb source is pinned by the lock file; remove sha256/commit")
		}
	case "url":
		c.archiveURL(key+".url", s.URL)
		if !hex64.MatchString(s.SHA256) {
			c.add(key+".sha256", "missing pin: want 64 lower-case hex digits, got %q", s.SHA256)
		}
	case "git":
		if !hex40.MatchString(s.Commit) {
			c.add(key+".commit", "want 40 hex digits, got %q", s.Commit)
		}
	}
	if s.Version != "" && s.Deb == "" {
		c.add(key+".version", "only a deb source takes a version")
	}
}

func (c *checker) archiveURL(key, raw string) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "file") || (u.Scheme != "file" && u.Host == "") {
		c.add(key, "want an https://, http:// or file:// URL, got %q", raw)
	}
}

func (c *checker) httpURL(key, raw string) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		c.add(key, "want an http:// or https:// URL, got %q", raw)
	}
}

// ociRepoRe is a registry repository as the distribution spec names one: a
// host (with a port) and lower-case path components, no tag or digest.
var ociRepoRe = regexp.MustCompile(`^(oci://)?[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)+$`)

// ociRepo checks a remote stage cache's repository ("" is none).
func (c *checker) ociRepo(key, v string) {
	if v != "" && !ociRepoRe.MatchString(v) {
		c.add(key, `want a registry repository "oci://REGISTRY/REPO" (lower case, no tag or digest: the stage key is the tag), got %q`, v)
	}
}

// fileList checks names of data files: a bare name found beside the stage, or ./path.
func (c *checker) fileList(key string, list []string, required bool) {
	if required && len(list) == 0 {
		c.add(key, "want at least one file")
	}
	for i, f := range list {
		if f == "" || strings.HasPrefix(f, "/") || (strings.Contains(f, "/") && !strings.HasPrefix(f, "./") && !strings.HasPrefix(f, "../")) {
			c.add(fmt.Sprintf("%s[%d]", key, i), `want a file name (from the stage's data directory) or a "./relative/path", got %q`, f)
		}
	}
	unique(c, key, list)
}

func (c *checker) driver(d *Driver, haveRepos bool) {
	if !driverVerRe.MatchString(d.Version) {
		c.add("driver.version", "want an NVIDIA version like 535.261.03, got %q", d.Version)
	}
	c.source("driver.source", d.Source, haveRepos)
	c.fileList("driver.patches", d.Patches, false)
	c.oneOf("driver.p2p", d.P2P, P2POff, P2PStaticBAR1, P2PDynamicBAR1)
	if len(d.Modules) == 0 {
		c.add("driver.modules", "want at least \"nvidia\"")
	}
	for i, m := range d.Modules {
		c.oneOf(fmt.Sprintf("driver.modules[%d]", i), m, KnownModules...)
	}
	unique(c, "driver.modules", d.Modules)
	if len(d.Modules) > 0 && d.Modules[0] != "nvidia" {
		c.add("driver.modules[0]", "want \"nvidia\" first: the other modules depend on it, got %q", d.Modules[0])
	}
	for _, m := range slices.Sorted(maps.Keys(d.Params)) {
		if !contains(d.Modules, m) {
			c.add("driver.params."+m, "parameters for a module not in driver.modules (%s)", strings.Join(d.Modules, ", "))
		}
		for _, p := range slices.Sorted(maps.Keys(d.Params[m])) {
			key := "driver.params." + m + "." + p
			if !paramRe.MatchString(p) {
				c.add(key, "want a module parameter name like NVreg_EnableResizableBar")
			}
			if v := d.Params[m][p]; v == "" || strings.ContainsAny(v, " \t\n\r\"'") {
				c.add(key, "want a value without spaces or quotes, got %q", v)
			}
		}
	}
}

func (c *checker) userspace(u *Userspace) {
	names := make([]string, len(u.Packages))
	for i, p := range u.Packages {
		key := fmt.Sprintf("userspace.packages[%d]", i)
		req, err := apt.ParseRequest(p)
		names[i] = req.Name
		switch {
		case err != nil:
			names[i] = p
			c.add(key, "want \"name\", \"name=version\" or \"name >= version\" (also <=, >>, <<): %v", err)
		case !debNameRe.MatchString(req.Name):
			c.add(key, "want \"name\" or \"name=version\", got %q", p)
		case req.Version != "" && !debVerRe.MatchString(req.Version):
			c.add(key, "want a Debian version after %q, got %q", cmp.Or(req.Op, "="), req.Version)
		}
	}
	unique(c, "userspace.packages", names)
	for i, e := range u.Exclude {
		key := fmt.Sprintf("userspace.exclude[%d]", i)
		if !debNameRe.MatchString(e.Package) {
			c.add(key+".package", "want a Debian package name, got %q", e.Package)
		}
		if strings.TrimSpace(e.Reason) == "" {
			c.add(key+".reason", "say why %q is left out of the image", e.Package)
		}
		if contains(names, e.Package) {
			c.add(key+".package", "%q is both requested in userspace.packages and excluded", e.Package)
		}
	}
}

// installerOwned are the Debian packages whose files the installer provides; a
// recipe takes them from one place or the other, never both.
var installerOwned = []string{"libcuda1", "libnvidia-ml1", "nvidia-smi", "firmware-nvidia-gsp", "libnvidia-ptxjitcompiler1"}

func (c *checker) installer(in *Installer, driverVersion string, packages []string) {
	if *in == (Installer{}) {
		return
	}
	c.archiveURL("userspace.installer.url", in.URL)
	if want := "NVIDIA-Linux-x86_64-" + driverVersion + ".run"; path.Base(in.URL) != want {
		c.add("userspace.installer.url", "want NVIDIA's installer of driver.version (a URL ending in %s), got %q", want, in.URL)
	}
	if !hex64.MatchString(in.SHA256) {
		c.add("userspace.installer.sha256", "missing pin: want 64 lower-case hex digits, got %q", in.SHA256)
	}
	if in.Size < 0 || in.Size > 4<<30 {
		c.add("userspace.installer.size", "want the file's size in bytes (0..4GiB), got %d", in.Size)
	}
	for i, p := range packages {
		req, _ := apt.ParseRequest(p)
		if name := req.Name; contains(installerOwned, name) {
			c.add(fmt.Sprintf("userspace.packages[%d]", i), "%q ships files the installer provides (userspace.installer); take them from one of the two", name)
		}
	}
}

func (c *checker) selftest(s *Selftest) {
	c.sizeRange("selftest.copy_size", s.CopySize, 1<<20, 16<<30)
	c.sizeRange("selftest.nccl_min", s.NCCLMin, 4, 16<<30)
	c.sizeRange("selftest.nccl_max", s.NCCLMax, 4, 16<<30)
	if s.NCCLMin > s.NCCLMax {
		c.add("selftest.nccl_min", "want at most selftest.nccl_max (%s), got %s", s.NCCLMax, s.NCCLMin)
	}
	if !(s.MinBusbwGBps >= 0 && s.MinBusbwGBps <= 10000) { // NaN fails too
		c.add("selftest.min_busbw_gbps", "want 0..10000, got %g", s.MinBusbwGBps)
	}
	d := s.Deadlines
	if d.Total <= 0 {
		c.add("selftest.deadlines.total", "want a positive duration, got %s", d.Total.Std())
	}
	for _, ph := range []struct {
		key string
		v   Duration
	}{{"precheck", d.Precheck}, {"driver", d.Driver}, {"cuda", d.CUDA}, {"nccl", d.NCCL}} {
		key := "selftest.deadlines." + ph.key
		if ph.v <= 0 {
			c.add(key, "want a positive duration, got %s", ph.v.Std())
		} else if ph.v > d.Total {
			c.add(key, "want at most selftest.deadlines.total (%s), got %s", d.Total.Std(), ph.v.Std())
		}
	}
	for _, class := range slices.Sorted(maps.Keys(s.Thresholds)) {
		key := "selftest.thresholds." + class
		c.oneOf(key, class, TopologyClasses...)
		t := s.Thresholds[class]
		if !(t.UnidirGBps >= 0 && t.UnidirGBps <= 1000) {
			c.add(key+".min_unidir_gbps", "want 0..1000 GB/s, got %g", t.UnidirGBps)
		}
		if !(t.BidirGBps >= 0 && t.BidirGBps <= 2000) {
			c.add(key+".min_bidir_gbps", "want 0..2000 GB/s, got %g", t.BidirGBps)
		}
		if !(t.MaxLatencyUS >= 0 && t.MaxLatencyUS <= 1000) {
			c.add(key+".max_latency_us", "want 0..1000 µs, got %g", t.MaxLatencyUS)
		}
	}
	c.soak(&s.Soak)
}

func (c *checker) soak(s *Soak) {
	for _, d := range []struct {
		key string
		v   Duration
	}{{"selftest.soak.duration", s.Duration}, {"selftest.soak.menu", s.Menu}} {
		// The bound of peerboot.soak=: a typo such as 800h should not hold a box for a month.
		if d.v < 0 || d.v.Std() > bootproto.MaxSoakHours*time.Hour {
			c.add(d.key, "want 0s..%dh, got %s", bootproto.MaxSoakHours, d.v.Std())
		}
	}
	c.intRange("selftest.soak.rounds", s.Rounds, 0, 1000000)
	if !(s.MaxDriftPct >= 0 && s.MaxDriftPct < 100) { // NaN fails too
		c.add("selftest.soak.max_drift_pct", "want at least 0 and below 100 percent, got %g", s.MaxDriftPct)
	}
	c.intRange("selftest.soak.max_aer_correctable", s.MaxAERCorrectable, 0, 1000000)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// knownKeys lists every key path the Recipe type accepts, for "did you mean".
func knownKeys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("toml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			path := join(prefix, name)
			out = append(out, path)
			ft := f.Type
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft, path)
			}
		}
	}
	walk(reflect.TypeOf(Recipe{}), "")
	return out
}

// suggestion names a known key one or two edits away from an unknown one.
func suggestion(path string) string {
	if best := nearestKey(path); best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return ""
}

// nearestKey is the known key one or two edits away from an unknown one, or "".
func nearestKey(path string) string {
	best, bestDist := "", 3
	for _, k := range knownKeys() {
		if parent(k) != parent(path) {
			continue
		}
		if d := editDistance(k, path); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
