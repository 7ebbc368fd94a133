// Package bootproto is the contract between the machine that builds and serves an
// image and the node that boots it: the kernel arguments serve adds and the init
// reads, the paths the image stage writes and the init runs, the actions a boot can
// end in, and where the init leaves its reports. The builder (build, netboot, recipe
// validation) and the node (cmd/peerboot-init) both take them from here, so neither
// side can rename one alone. It imports nothing of the module: the init links it.
package bootproto

import (
	"fmt"
	"strings"
	"time"
)

// Kernel command-line keys the init reads, each as key=value.
const (
	// ArgReportURL is where the init POSTs its report; it overrides the recipe's
	// boot.report_url (serve adds its collector's URL for the node).
	ArgReportURL = "peerboot.report_url"
	// ArgToken is the report collector's bearer token, per node and build (only on
	// the command line: no recipe can hold it).
	ArgToken = "peerboot.token"
	// ArgNonce is the collector's one-time attestation nonce for this boot.
	ArgNonce = "peerboot.nonce"
	// ArgOnPass and ArgOnFail override the recipe's boot.on_pass and boot.on_fail.
	ArgOnPass = "peerboot.on_pass"
	ArgOnFail = "peerboot.on_fail"
	// ArgSoak turns the boot into a burn-in: after the self-test, p2pcheck --soak for
	// this long (a Go duration, e.g. 8h; docs/burn-in.md).
	ArgSoak = "peerboot.soak"
	// ArgEntry names the boot-menu entry that booted (BootEntries: "normal",
	// "burnin"): a menu already chose, so the init asks nothing at the console.
	ArgEntry = "peerboot.entry"
	// ArgInitrdSHA256 is the sha256 of the initrd the boot script fetched from a
	// mirror (serve --files-url): the init hashes InitrdSysfs against it.
	ArgInitrdSHA256 = "peerboot.initrd_sha256"
	// RetainInitrd is the kernel's own argument that keeps the initrd's bytes
	// after unpacking them, readable at InitrdSysfs.
	RetainInitrd = "retain_initrd"
)

// ArgSoakProgress is how often the init POSTs a burn-in's progress to serve (a Go
// duration; default DefaultSoakProgressEvery). Tests boot with a short one.
const ArgSoakProgress = "peerboot.soak_progress"

// DefaultSoakProgressEvery is the init's progress interval without ArgSoakProgress:
// a rack of nodes posting every few minutes is nothing for serve, and a person
// watching the fleet page sees a stalled burn-in within minutes.
const DefaultSoakProgressEvery = 3 * time.Minute

// ProgressPath is serve's burn-in progress endpoint beside ReportsPath: the init
// turns its report URL into the progress URL with ProgressURL.
const (
	ReportsPath  = "/reports"
	ProgressPath = "/progress"
)

// ProgressAnswer is serve's answer to a progress POST. Stop is an operator's request
// (peerboot rollout burn-in-stop) that the burn-in end now: the init ends p2pcheck's soak as
// Ctrl-C does, and the report says who asked (StopBy, the operator write's address),
// when and why.
type ProgressAnswer struct {
	Node       string    `json:"node"`
	State      string    `json:"state"`
	Rounds     int       `json:"rounds"`
	Stop       bool      `json:"stop,omitempty"`
	StopAt     time.Time `json:"stop_requested_at,omitzero"`
	StopBy     string    `json:"stop_by,omitempty"`
	StopReason string    `json:"stop_reason,omitempty"`
}

// MaxProgressAnswerBytes bounds what the init reads of a progress answer.
const MaxProgressAnswerBytes = 4096

// ProgressURL is the progress endpoint beside a report URL: the path's last element
// (…/reports) becomes progress, the query (?node=) stays. A URL that does not end in
// /reports gets /progress added to its path.
func ProgressURL(reportURL string) string {
	base, query, _ := strings.Cut(reportURL, "?")
	base = strings.TrimSuffix(strings.TrimSuffix(base, "/"), ReportsPath) + ProgressPath
	if query != "" {
		return base + "?" + query
	}
	return base
}

// InitrdSysfs is where the kernel shows the initrd it was handed, under RetainInitrd.
const InitrdSysfs = "/sys/firmware/initrd"

// MaxSoakHours bounds peerboot.soak=: a typo such as 800h should not hold a box for a month.
const MaxSoakHours = 7 * 24

// BootEntry is one entry of a boot menu: what it is called and the kernel
// arguments it adds to the image's command line.
type BootEntry struct {
	Name  string // a menu label: letters, digits and "-"
	Title string // what the menu shows
	Args  string // added to the kernel command line; "" none
}

// BootEntries are the entries a boot menu offers: the normal boot (first, the
// default) and, when burnIn > 0 (the recipe's selftest.soak.menu), a burn-in of
// that length: "burn-in (8 h)", which adds peerboot.soak=. With a burn-in, each
// entry also names itself (ArgEntry), so the init knows the menu chose and does
// not offer the burn-in again at the console; without one there is no menu.
func BootEntries(burnIn time.Duration) []BootEntry {
	if burnIn <= 0 {
		return []BootEntry{{Name: "normal", Title: "boot and self-test"}}
	}
	return []BootEntry{
		{Name: "normal", Title: "boot and self-test", Args: Arg(ArgEntry, "normal")},
		{Name: "burnin", Title: fmt.Sprintf("burn-in (%s): self-test, then soak", soakLabel(burnIn)), Args: Arg(ArgEntry, "burnin") + " " + Arg(ArgSoak, burnIn.String())},
	}
}

// MenuTimeout is how long a boot menu waits before its first entry: the PXE
// menu (IPXEMenu) and the init's console prompt on a stick or ISO boot, one wait
// for the person at the box whichever way it booted.
const MenuTimeout = 5 * time.Second

// ConsoleBurnIn is the answer to the init's console prompt that chooses the
// burn-in (typed, then Enter); anything else, or nothing within MenuTimeout, boots
// normally.
const ConsoleBurnIn = "b"

// IPXEMenu is an iPXE menu of entries whose choice jumps to the label of the entry's
// name; the first entry is the default after MenuTimeout. An iPXE built without the
// menu commands falls through to the first entry: the script goes on with that
// entry's label.
func IPXEMenu(entries []BootEntry) string {
	var b strings.Builder
	first := entries[0].Name
	fmt.Fprintf(&b, "menu peerboot || goto %s\n", first)
	for _, e := range entries {
		fmt.Fprintf(&b, "item %s %s || goto %s\n", e.Name, e.Title, first)
	}
	fmt.Fprintf(&b, "choose --default %s --timeout %d entry || goto %s\n", first, MenuTimeout.Milliseconds(), first)
	b.WriteString("goto ${entry}\n")
	return b.String()
}

// soakLabel writes a soak length for a menu: whole hours as "8 h", else the
// duration ("90m0s").
func soakLabel(d time.Duration) string {
	if d >= time.Hour && d%time.Hour == 0 {
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return d.String()
}

// Arg is the command-line word key=value.
func Arg(key, value string) string { return key + "=" + value }

// Paths inside the image, as the node sees them.
const (
	// InitPath is the init's binary in the initramfs (the kernel runs /init).
	InitPath = "/init"
	// RecipePath is the resolved recipe the rootfs stage writes and the init loads.
	RecipePath = "/etc/peerboot/recipe.toml"
	// P2PCheckPath is the self-test binary the init runs.
	P2PCheckPath = "/usr/bin/p2pcheck"
	// ReportsMount is where the init mounts the report partition.
	ReportsMount = "/run/peerboot/reports"
	// InitRecord is the init's record for p2pcheck (modules loaded, findings).
	InitRecord = "/run/peerboot/init.json"
	// SoakProgressFile is where p2pcheck --soak-progress writes a burn-in's progress
	// for the init to POST.
	SoakProgressFile = "/run/peerboot/soak-progress.json"
)

// InImage is p (one of the paths above) relative to the image's root, as the
// stages that write the image's trees name it.
func InImage(p string) string { return strings.TrimPrefix(p, "/") }

// Action is what the node does after the self-test.
type Action string

// The actions boot.on_pass, boot.on_fail and their kernel arguments take.
const (
	Shell    Action = "shell"
	Poweroff Action = "poweroff"
	Reboot   Action = "reboot"
	Halt     Action = "halt"
)

// Actions are all the actions, in the order messages list them.
func Actions() []Action { return []Action{Shell, Poweroff, Reboot, Halt} }

// ActionNames are the actions as strings, for validation messages.
func ActionNames() []string {
	var out []string
	for _, a := range Actions() {
		out = append(out, string(a))
	}
	return out
}

// Valid says whether a is one of Actions.
func (a Action) Valid() bool {
	switch a {
	case Shell, Poweroff, Reboot, Halt:
		return true
	}
	return false
}

// Where the reports go on the node's disk.
const (
	// ReportsLabel names the report partition (GPT name and FAT label): the init
	// finds it by this label (in any case: a stick formatted FAT elsewhere may
	// say "peerboot"), and so do `reports` and `flash`.
	ReportsLabel = "PEERBOOT"
	// ReportsDir is the report partition's directory the init writes reports
	// into; the image stage creates it. Images before it existed wrote to the
	// partition's root, which the host-side reader still reads.
	ReportsDir = "reports"
)
