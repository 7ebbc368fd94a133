// Package recipe defines the TOML recipe that describes one GPU node image, loads it
// (with includes), fills defaults, validates it strictly and gives it a stable digest.
package recipe

import "github.com/peerboot/peerboot/output"

// Recipe is one platform's image description. The field comments of this file are the
// recipe reference: `peerboot docs` renders them into docs/recipe-reference.md.
type Recipe struct {
	Name            string   `toml:"name"`              // image name: lower-case letters, digits, ".", "_", "-"; default: the file name without .toml
	Description     string   `toml:"description"`       // free text
	Include         []string `toml:"include"`           // files merged underneath this one, relative to it or absolute, depth first in list order; a list value replaces the included one whole, never appends (a dropped item of kernel.cmdline or kernel.fragments is warned about) (docs/recipes.md)
	SourceDateEpoch int64    `toml:"source_date_epoch"` // the build clock, seconds since 1970; 0: derived from the newest input each stage reads

	Platform  Platform          `toml:"platform"`
	Repos     []Repo            `toml:"repo"`
	Kernel    Kernel            `toml:"kernel"`
	Driver    Driver            `toml:"driver"`
	Userspace Userspace         `toml:"userspace"`
	Selftest  Selftest          `toml:"selftest"`
	Boot      Boot              `toml:"boot"`
	Env       map[string]string `toml:"env"` // environment written into the image, e.g. NCCL_P2P_LEVEL; one-line values
	Outputs   Outputs           `toml:"outputs"`
	Sign      Sign              `toml:"sign"`
	// Cache is how a build shares stage outputs through a registry; it is left
	// out of the recipe's digest and of the image (Canonical), so setting it
	// changes no key and no byte.
	Cache Cache `toml:"cache,omitempty"`
}

// Platform states the hardware the image is for; the self-test checks the box against it.
type Platform struct {
	CPUVendor string `toml:"cpu_vendor"` // "intel", "amd" or "any"
	Sockets   int    `toml:"sockets"`    // CPU sockets, 1..8
	GPUs      int    `toml:"gpus"`       // NVIDIA GPUs expected, 0..16; 0 for a VM or a GPU-less bench box
	GPUModel  string `toml:"gpu_model"`  // e.g. "RTX 4090"; required when gpus > 0
	VRAM      Size   `toml:"vram"`       // VRAM per GPU, e.g. "49140MiB"; 1GiB..1TiB when gpus > 0
	BAR1      Size   `toml:"bar1"`       // BAR1 per GPU, a power of two, 256MiB..2TiB when gpus > 0, e.g. "32GiB"; BAR1 < VRAM needs driver.p2p = "dynamic-bar1"
	NUMANodes int    `toml:"numa_nodes"` // NUMA nodes of the box, 1..64
	GPUNUMA   []int  `toml:"gpu_numa"`   // NUMA node of each GPU in sysfs bus order, one per GPU; empty: not checked
}

// Repo is an apt repository that userspace and source packages are resolved from.
type Repo struct {
	Name         string   `toml:"name"`         // unique among the repos; default: the suite
	Suite        string   `toml:"suite"`        // e.g. "bookworm-security"; "/" for a flat repository (InRelease and Packages at url itself, no components)
	Components   []string `toml:"components"`   // at least one, e.g. ["main", "contrib", "non-free", "non-free-firmware"]
	Architecture string   `toml:"architecture"` // "amd64" (the default)
	Keyring      string   `toml:"keyring"`      // required: the OpenPGP keyring that signs InRelease
	Mirror       string   `toml:"mirror"`       // "system": the archive of the building machine's apt sources (no host is written in a recipe)
	URL          string   `toml:"url"`          // archive root (https://, http:// or file://); exclusive with mirror
	// CheckValidUntil is apt's Check-Valid-Until (default true): false reads this
	// repository's InRelease after its Valid-Until date (sid and experimental carry
	// one a week ahead, and a mirror that stopped syncing serves it expired); the
	// signature is still verified, lock warns with the date and records it, and fetch
	// and build never read the index.
	CheckValidUntil *bool `toml:"check_valid_until,omitempty"`
	// Only lists the packages taken from this repository; any other package in it is
	// ignored (apt pinning every other package of the suite to -1). It lets one
	// library come from a newer suite while its dependencies stay on the base one.
	// Empty: every package.
	Only []string `toml:"only,omitempty"`
}

// ValidUntilChecked says whether an expired InRelease of this repository is refused.
// CheckValidUntil is a pointer for its true default, and omitempty keeps recipes
// that do not set it at the digest they had before the key existed.
func (r Repo) ValidUntilChecked() bool { return r.CheckValidUntil == nil || *r.CheckValidUntil }

// Source is where a stage's source comes from: exactly one of a Debian package (pinned
// by the lock), a URL with its sha256, or a git repository at a full commit id.
// A higher layer replaces a source table whole: a URL source never inherits a deb key.
type Source struct {
	Deb     string `toml:"deb"`     // Debian source package name, pinned by the lock
	Version string `toml:"version"` // Debian version of the deb package; "" = newest in the repos
	URL     string `toml:"url"`     // https://, http:// or file:// tarball; needs sha256
	SHA256  string `toml:"sha256"`  // of the URL's bytes, 64 lower-case hex digits
	Git     string `toml:"git"`     // clone URL (a local mirror may stand in: PEERBOOT_GIT_MIRRORS)
	Commit  string `toml:"commit"`  // the full commit id, 40 hex digits
}

// Kernel is the kernel stage's recipe.
type Kernel struct {
	Source    Source   `toml:"source"`
	Base      string   `toml:"base"`      // "tinyconfig" or "x86_64_defconfig"
	Fragments []string `toml:"fragments"` // config fragments merged over base: kernel/configs/NAME, or ./path relative to the recipe
	Patches   []string `toml:"patches"`   // patches applied to the kernel source: kernel/patches/NAME, or ./path; a file that cannot be read is an error at its line
	Cmdline   string   `toml:"cmdline"`   // kernel command line baked into the UKI (and the PXE script); one line, the serial console last
}

// Driver is the nvidia-open stage's recipe.
type Driver struct {
	Version string                       `toml:"version"` // NVIDIA version, e.g. "535.261.03"; the userspace must be exactly this version
	Source  Source                       `toml:"source"`
	Patches []string                     `toml:"patches"` // driver/patches/<version>/NAME, or ./path, in series order; applied exactly: a hunk not at its recorded line is an error
	Modules []string                     `toml:"modules"` // built and loaded, in load order: "nvidia" first, then any of nvidia-uvm, nvidia-modeset, nvidia-drm, nvidia-peermem
	Params  map[string]map[string]string `toml:"params"`  // module parameters written to modprobe.d, for modules in driver.modules
	// P2P is the peer-to-peer path the patched driver carries: "off" (stock: NVML
	// reports CNS on consumer cards), "static-bar1" (peer access through a BAR1 that maps
	// all of VRAM) or "dynamic-bar1" (per-allocation BAR1 windows, for cards whose BAR1
	// is smaller than VRAM; required when platform.bar1 < platform.vram). The self-test
	// judges the box against it.
	P2P string `toml:"p2p"`
}

// Driver P2P modes.
const (
	P2POff         = "off"
	P2PStaticBAR1  = "static-bar1"
	P2PDynamicBAR1 = "dynamic-bar1"
)

// Userspace lists the Debian packages laid into the image (their dependency closure)
// and, for driver branches Debian does not ship, NVIDIA's installer to take the
// driver's own userspace from.
type Userspace struct {
	Packages []string  `toml:"packages"` // "name", "name=version" or "name >= version" (also <=, >>, <<: the newest version meeting it across the repos, or the lock's pin while it still meets it); their dependency closure goes into the image; needs a [[repo]]
	Exclude  []Exclude `toml:"exclude"`  // packages dropped from the closure
	// Installer is NVIDIA's NVIDIA-Linux-x86_64-<driver.version>.run, unpacked in
	// Go (never run) for libcuda, libnvidia-ml, the PTX JIT compiler, nvidia-smi and
	// the GSP firmware, of exactly driver.version. userspace.packages may then not name
	// libcuda1, libnvidia-ml1, nvidia-smi, firmware-nvidia-gsp or
	// libnvidia-ptxjitcompiler1: the files come from one place. Replaced whole by a
	// higher layer, like the source tables.
	Installer Installer `toml:"installer,omitempty"`
}

// Installer pins NVIDIA's .run installer by URL and sha256.
type Installer struct {
	URL    string `toml:"url"`            // https:// (or file://) URL ending in NVIDIA-Linux-x86_64-<driver.version>.run
	SHA256 string `toml:"sha256"`         // of the file's bytes, 64 lower-case hex digits
	Size   int64  `toml:"size,omitempty"` // bytes, 0..4GiB; a download is cut off past it; 0 = unknown
}

// Exclude drops one package (and what only it pulls in) from the userspace closure.
type Exclude struct {
	Package string `toml:"package"` // a Debian package name, not also in userspace.packages
	Reason  string `toml:"reason"`  // required: why it is left out of the image
}

// Selftest sets what the boot-time P2P self-test measures and what counts as a pass.
type Selftest struct {
	Verify       bool                 `toml:"verify"`         // check copied data on the GPU; false makes every copy an unverified warning
	CopySize     Size                 `toml:"copy_size"`      // bytes per timed peer copy (1MiB..16GiB)
	NCCLMin      Size                 `toml:"nccl_min"`       // smallest all-reduce size of the sweep (4B..16GiB), at most nccl_max
	NCCLMax      Size                 `toml:"nccl_max"`       // largest all-reduce size of the sweep (4B..16GiB)
	MinBusbwGBps float64              `toml:"min_busbw_gbps"` // NCCL bus bandwidth needed at nccl_max, GB/s (0..10000); 0: not checked
	RequireP2P   bool                 `toml:"require_p2p"`    // NCCL must use the P2P transport between every pair
	Deadlines    Deadlines            `toml:"deadlines"`      // per phase; a phase past its deadline is a verdict, not a hang
	Thresholds   map[string]Threshold `toml:"thresholds"`     // per topology class of a GPU pair: PIX, PXB, PHB, NODE or SYS
	Soak         Soak                 `toml:"soak"`           // the burn-in after the self-test (docs/burn-in.md)
}

// Soak is the burn-in: after the self-test, rounds of verified copies, all-reduces and
// NVML, PCIe AER and ECC readings, judged over time (p2pcheck --soak, docs/burn-in.md).
// The thresholds here are the over-time limits; the bandwidth floors stay those of
// selftest.thresholds.
type Soak struct {
	// Duration makes every boot of the image a burn-in of this length after the
	// self-test (0s..168h); 0s: only a boot that asks soaks (the boot menu's burn-in
	// entry, or peerboot.soak= on the kernel command line, which wins over this).
	Duration Duration `toml:"duration"`
	// Menu is the length of the "burn-in" entry that the PXE menus offer beside the
	// normal boot, and that the init offers on the console of a USB stick or ISO
	// boot ("press b then Enter", 5 s) when nothing chose (0s..168h); 0s: no burn-in
	// entry and no prompt, the boot goes straight on.
	Menu              Duration `toml:"menu"`
	Rounds            int      `toml:"rounds"`              // stop after this many rounds at the latest (0..1000000); 0: only the duration bounds the soak
	MaxDriftPct       float64  `toml:"max_drift_pct"`       // warn (soak.drift) when a copy's bandwidth ends more than this many percent below its start (at least 0, below 100); 0: not checked
	MaxAERCorrectable int      `toml:"max_aer_correctable"` // correctable PCIe AER errors a device may gain over the soak before soak.aer warns (0..1000000); 0: any gain warns
}

// Deadlines bound every self-test phase so a hang becomes a verdict, not a frozen box.
type Deadlines struct {
	Total    Duration `toml:"total"`    // the whole self-test; every phase's deadline is at most this
	Precheck Duration `toml:"precheck"` // sysfs checks before the driver
	Driver   Duration `toml:"driver"`   // loading the driver and NVML
	CUDA     Duration `toml:"cuda"`     // the timed, verified copies and the peer-memory checks (peermem phase)
	NCCL     Duration `toml:"nccl"`     // the all-reduce sweep
}

// Threshold is the minimum peer-copy bandwidth, and the maximum small-write latency,
// for pairs of one topology class; 0 leaves a figure unchecked.
type Threshold struct {
	UnidirGBps float64 `toml:"min_unidir_gbps"` // peer-copy floor, one direction (write or read), GB/s (0..1000)
	BidirGBps  float64 `toml:"min_bidir_gbps"`  // peer-copy floor, both directions at once, GB/s (0..2000)
	// MaxLatencyUS bounds a 16-byte peer write, timed the way p2pBandwidthLatencyTest
	// does, in microseconds (0..1000; over it: a warning): direct P2P takes about 0.5, a
	// write staged through host memory about 14.
	MaxLatencyUS float64 `toml:"max_latency_us"`
}

// Boot says what the appliance does after the self-test.
type Boot struct {
	OnPass    string `toml:"on_pass"`    // after a PASS: shell, poweroff, reboot or halt
	OnFail    string `toml:"on_fail"`    // after a FAIL: shell, poweroff, reboot or halt
	ReportURL string `toml:"report_url"` // http(s) URL the node POSTs its report to; "" = none; a peerboot.report_url= on the kernel command line (as peerboot serve's script adds) wins
}

// Outputs selects the artifacts a build writes.
type Outputs struct {
	Formats  []output.Kind `toml:"formats"`   // at least one of "uki", "disk", "pxe", "iso"
	DiskSize Size          `toml:"disk_size"` // GPT disk image size (64MiB..64GiB)
	EFIStub  Source        `toml:"efi_stub"`  // the UKI's systemd EFI stub, a source like kernel.source
}

// Sign names keys as "file:PATH" (relative to the recipe's directory) or "env:VAR". Keys
// are inputs, never generated by a build.
type Sign struct {
	DBKey       string `toml:"db_key"`       // Secure Boot db signing key for the UKI
	DBCert      string `toml:"db_cert"`      // its certificate
	ModuleKey   string `toml:"module_key"`   // RSA key the modules stage signs every .ko with; needs module_cert
	ModuleCert  string `toml:"module_cert"`  // certificate compiled into the kernel's trusted keyring
	ArtifactKey string `toml:"artifact_key"` // signs SHA256SUMS and the provenance (peerboot sign)
	// omitempty keeps recipes without pcr_key at the digest they had before the field
	// existed.

	// PCRKey signs the UKI's predicted PCR 11 policies (.pcrsig, .pcrpkey): RSA
	// (2048 bits or more), as systemd 252 accepts.
	PCRKey string `toml:"pcr_key,omitempty"`
}

// Cache names a remote stage cache: an OCI registry repository holding stage outputs,
// each tagged by its action key and signed with the artifact key (docs/remote-cache.md).
// It says where a build looks for stage outputs and sends them, never what it makes.
type Cache struct {
	From string   `toml:"from,omitempty"` // repository a stage missing from the store is fetched from before it is built, "oci://REGISTRY/REPO" (no tag: the stage key is the tag); $PEERBOOT_CACHE_FROM and --cache-from win
	To   string   `toml:"to,omitempty"`   // repository every stage the store holds after the build is pushed to, signed with sign.artifact_key; $PEERBOOT_CACHE_TO and --cache-to win
	Keys []string `toml:"keys,omitempty"` // public keys a fetched stage may be signed with, "file:PATH" (relative to the recipe) or "env:VAR" (PEM), besides sign.artifact_key's own
}
