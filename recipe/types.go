// Package recipe defines the TOML recipe that describes one GPU node image, loads it
// (with includes), fills defaults, validates it strictly and gives it a stable digest.
package recipe

// Recipe is one platform's image description. Field docs are the recipe reference;
// README.md's "Recipe reference" mirrors them.
type Recipe struct {
	Name            string   `toml:"name"`              // image name; default: the file name without .toml
	Description     string   `toml:"description"`       // free text
	Include         []string `toml:"include"`           // files merged underneath this one, relative to it
	SourceDateEpoch int64    `toml:"source_date_epoch"` // the build clock; 0: derived from the newest input

	Platform  Platform          `toml:"platform"`
	Repos     []Repo            `toml:"repo"`
	Kernel    Kernel            `toml:"kernel"`
	Driver    Driver            `toml:"driver"`
	Userspace Userspace         `toml:"userspace"`
	Selftest  Selftest          `toml:"selftest"`
	Boot      Boot              `toml:"boot"`
	Env       map[string]string `toml:"env"`
	Outputs   Outputs           `toml:"outputs"`
	Sign      Sign              `toml:"sign"`
}

// Platform states the hardware the image is for; the self-test checks the box against it.
type Platform struct {
	CPUVendor string `toml:"cpu_vendor"` // "intel", "amd" or "any"
	Sockets   int    `toml:"sockets"`    // CPU sockets, 1..8
	GPUs      int    `toml:"gpus"`       // NVIDIA GPUs expected; 0 for a VM or a GPU-less bench box
	GPUModel  string `toml:"gpu_model"`  // e.g. "RTX 4090"; required when gpus > 0
	VRAM      Size   `toml:"vram"`       // per GPU, binary units, e.g. "49140MiB"
	BAR1      Size   `toml:"bar1"`       // per GPU, e.g. "32GiB"; BAR1 < VRAM needs the dynamic-BAR1 driver
	NUMANodes int    `toml:"numa_nodes"` // NUMA nodes of the box
	GPUNUMA   []int  `toml:"gpu_numa"`   // NUMA node of each GPU by index; empty: not checked
}

// Repo is an apt repository that userspace and source packages are resolved from.
type Repo struct {
	Name         string   `toml:"name"`         // unique; default: the suite
	Suite        string   `toml:"suite"`        // e.g. "bookworm-security"
	Components   []string `toml:"components"`   // e.g. ["main", "contrib"]
	Architecture string   `toml:"architecture"` // default "amd64"
	Keyring      string   `toml:"keyring"`      // OpenPGP keyring that signs InRelease
	Mirror       string   `toml:"mirror"`       // "system": the archive from this machine's apt sources
	URL          string   `toml:"url"`          // archive root; exclusive with mirror
}

// Source is where a stage's source comes from: exactly one of a Debian package (pinned
// by the lock), a URL with its sha256, or a git repository at a full commit id.
type Source struct {
	Deb     string `toml:"deb"`     // Debian package name
	Version string `toml:"version"` // Debian version of Deb; "" = newest in the repos
	URL     string `toml:"url"`     // https:// or file:// tarball
	SHA256  string `toml:"sha256"`  // of the URL's bytes
	Git     string `toml:"git"`     // clone URL (a local mirror may stand in: PEERBOOT_GIT_MIRRORS)
	Commit  string `toml:"commit"`  // 40 hex digits
}

// Kernel is the kernel stage's recipe.
type Kernel struct {
	Source    Source   `toml:"source"`
	Base      string   `toml:"base"`      // "tinyconfig" or "x86_64_defconfig"
	Fragments []string `toml:"fragments"` // kernel/configs/NAME, or ./path relative to the recipe
	Patches   []string `toml:"patches"`   // kernel/patches/NAME, or ./path
	Cmdline   string   `toml:"cmdline"`   // kernel command line baked into the UKI
}

// Driver is the nvidia-open stage's recipe.
type Driver struct {
	Version string                       `toml:"version"` // NVIDIA version, e.g. "535.261.03"
	Source  Source                       `toml:"source"`
	Patches []string                     `toml:"patches"` // driver/patches/<version>/NAME, or ./path
	Modules []string                     `toml:"modules"` // built and loaded, in load order
	Params  map[string]map[string]string `toml:"params"`  // module -> parameter -> value
	// P2P says which peer-to-peer path the patched driver carries: "off" (stock: NVML
	// reports CNS on consumer cards), "static-bar1" (peer access through a BAR1 that maps
	// all of VRAM) or "dynamic-bar1" (per-allocation BAR1 windows, for cards whose BAR1
	// is smaller than VRAM). The self-test judges the box against it.
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
	Packages []string  `toml:"packages"` // "name" or "name=version"
	Exclude  []Exclude `toml:"exclude"`  // dropped from the closure, with a reason
	// Installer is NVIDIA's NVIDIA-Linux-x86_64-<driver.version>.run, unpacked in
	// Go (never run) for libcuda, libnvidia-ml, the PTX JIT compiler, nvidia-smi and
	// the GSP firmware, of exactly driver.version.
	Installer Installer `toml:"installer,omitempty"`
}

// Installer pins NVIDIA's .run installer by URL and sha256.
type Installer struct {
	URL    string `toml:"url"`            // https:// (or file://) .run file
	SHA256 string `toml:"sha256"`         // of the file's bytes
	Size   int64  `toml:"size,omitempty"` // bytes; 0 = unknown (a download is then not cut off early)
}

// Exclude drops one package (and what only it pulls in) from the userspace closure.
type Exclude struct {
	Package string `toml:"package"`
	Reason  string `toml:"reason"`
}

// Selftest sets what the boot-time P2P self-test measures and what counts as a pass.
type Selftest struct {
	Verify       bool                 `toml:"verify"`         // check copied data on the GPU
	CopySize     Size                 `toml:"copy_size"`      // bytes per timed peer copy
	NCCLMin      Size                 `toml:"nccl_min"`       // smallest all-reduce size
	NCCLMax      Size                 `toml:"nccl_max"`       // largest all-reduce size
	MinBusbwGBps float64              `toml:"min_busbw_gbps"` // NCCL bus bandwidth at nccl_max
	RequireP2P   bool                 `toml:"require_p2p"`    // NCCL must use the P2P transport
	Deadlines    Deadlines            `toml:"deadlines"`
	Thresholds   map[string]Threshold `toml:"thresholds"` // by topology class: PIX PXB PHB NODE SYS
}

// Deadlines bound every self-test phase so a hang becomes a verdict, not a frozen box.
type Deadlines struct {
	Total    Duration `toml:"total"`
	Precheck Duration `toml:"precheck"`
	Driver   Duration `toml:"driver"`
	CUDA     Duration `toml:"cuda"`
	NCCL     Duration `toml:"nccl"`
}

// Threshold is the minimum peer-copy bandwidth, and the maximum small-write latency,
// for pairs of one topology class; 0 leaves a figure unchecked.
type Threshold struct {
	UnidirGBps float64 `toml:"min_unidir_gbps"`
	BidirGBps  float64 `toml:"min_bidir_gbps"`
	// MaxLatencyUS bounds a 16-byte peer write, timed the way p2pBandwidthLatencyTest
	// does, in microseconds: direct P2P takes about 0.5, a write staged through host
	// memory about 14.
	MaxLatencyUS float64 `toml:"max_latency_us"`
}

// Boot says what the appliance does after the self-test.
type Boot struct {
	OnPass    string `toml:"on_pass"`    // shell, poweroff, reboot, halt
	OnFail    string `toml:"on_fail"`    // shell, poweroff, reboot, halt
	ReportURL string `toml:"report_url"` // where reports are POSTed; "" = none
}

// Outputs selects the artifacts a build writes.
type Outputs struct {
	Formats  []string `toml:"formats"`   // any of "uki", "disk", "pxe", "iso"
	DiskSize Size     `toml:"disk_size"` // GPT disk image size
	EFIStub  Source   `toml:"efi_stub"`  // the systemd EFI stub package for the UKI
}

// Sign names keys: "file:PATH" or "env:VAR". Keys are inputs, never generated by a build.
type Sign struct {
	DBKey       string `toml:"db_key"`
	DBCert      string `toml:"db_cert"`
	ModuleKey   string `toml:"module_key"`
	ModuleCert  string `toml:"module_cert"`
	ArtifactKey string `toml:"artifact_key"`
	// PCRKey signs the UKI's predicted PCR 11 policies (.pcrsig, .pcrpkey): RSA,
	// as systemd 252 accepts. omitempty keeps recipes without it at the digest
	// they had before the field existed.
	PCRKey string `toml:"pcr_key,omitempty"`
}
