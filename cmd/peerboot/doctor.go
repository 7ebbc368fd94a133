package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/store"
)

// hostNeed is one host tool and the Debian package that provides it.
type hostNeed struct {
	what    string
	stage   string
	pkg     string
	command string   // found on PATH, or
	files   []string // any one of these exists
	use     use
}

// use says who needs a host tool: building (`make image` installs these, and a
// missing one fails doctor), or only signing, booting in QEMU and the tests
// (`make test` installs those too).
type use string

const (
	useBuild use = "build"
	useSign  use = "sign"
	useRun   use = "run"
	useTest  use = "test"
)

// hostNeeds is the single list of host requirements; `make deps` and `make
// test-deps` install from it.
var hostNeeds = []hostNeed{
	{what: "C compiler", stage: "kernel, driver", pkg: "build-essential", command: "gcc", use: useBuild},
	{what: "make", stage: "kernel, driver", pkg: "make", command: "make", use: useBuild},
	{what: "bc", stage: "kernel", pkg: "bc", command: "bc", use: useBuild},
	{what: "flex", stage: "kernel", pkg: "flex", command: "flex", use: useBuild},
	{what: "bison", stage: "kernel", pkg: "bison", command: "bison", use: useBuild},
	{what: "libelf headers", stage: "kernel", pkg: "libelf-dev", files: []string{"/usr/include/libelf.h", "/usr/include/gelf.h"}, use: useBuild},
	{what: "OpenSSL headers", stage: "kernel", pkg: "libssl-dev", files: []string{"/usr/include/openssl/opensslv.h"}, use: useBuild},
	{what: "openssl", stage: "kernel, sign", pkg: "openssl", command: "openssl", use: useBuild},
	{what: "xz", stage: "kernel", pkg: "xz-utils", command: "xz", use: useBuild},
	{what: "cpio", stage: "kernel", pkg: "cpio", command: "cpio", use: useBuild},
	{what: "rsync", stage: "kernel", pkg: "rsync", command: "rsync", use: useBuild},
	{what: "perl", stage: "kernel", pkg: "perl", command: "perl", use: useBuild},
	{what: "binutils (objcopy, objdump)", stage: "kernel, image checks", pkg: "binutils", command: "objcopy", use: useBuild},
	{what: "kmod (depmod, modinfo)", stage: "driver, modules", pkg: "kmod", command: "depmod", use: useBuild},
	{what: "zstd", stage: "initramfs", pkg: "zstd", command: "zstd", use: useBuild},
	{what: "git", stage: "fetch", pkg: "git", command: "git", use: useBuild},
	{what: "iPXE EFI binary", stage: "image (PXE)", pkg: "ipxe", files: []string{"/usr/lib/ipxe/ipxe.efi"}, use: useBuild},
	{what: "Debian archive keyring", stage: "lock", pkg: "debian-archive-keyring", files: []string{"/usr/share/keyrings/debian-archive-keyring.gpg"}, use: useBuild},
	{what: "jq", stage: "make stage-keys (CI)", pkg: "jq", command: "jq", use: useBuild},
	{what: "sbsigntool", stage: "sign, verify --db-cert", pkg: "sbsigntool", command: "sbsign", use: useSign},
	{what: "QEMU x86_64", stage: "run", pkg: "qemu-system-x86", command: "qemu-system-x86_64", use: useRun},
	{what: "OVMF UEFI firmware", stage: "run", pkg: "ovmf", files: []string{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_CODE.fd"}, use: useRun},
	{what: "iPXE ROMs", stage: "run --pxe", pkg: "ipxe-qemu", files: []string{"/usr/lib/ipxe/qemu/efi-virtio.rom"}, use: useRun},
	{what: "swtpm TPM 2.0 emulator", stage: "run --tpm; TPM quote and attested-report tests", pkg: "swtpm", command: "swtpm", use: useRun},
	{what: "swtpm tools", stage: "run --tpm (swtpm_setup: EK certificates)", pkg: "swtpm-tools", command: "swtpm_setup", use: useRun},
	// What the tests' cross-checks and fixtures run: under CI=true a test that
	// finds one missing fails (internal/testguard), so `make test` installs them.
	{what: "FAT tools", stage: "image cross-check", pkg: "dosfstools", command: "fsck.vfat", use: useTest},
	{what: "mtools", stage: "image cross-check", pkg: "mtools", command: "mcopy", use: useTest},
	{what: "sgdisk", stage: "image cross-check", pkg: "gdisk", command: "sgdisk", use: useTest},
	{what: "lspci", stage: "self-test checks", pkg: "pciutils", command: "lspci", use: useTest},
	{what: "fdisk", stage: "disk cross-check", pkg: "fdisk", command: "fdisk", use: useTest},
	{what: "xorriso", stage: "ISO cross-check", pkg: "xorriso", command: "xorriso", use: useTest},
	{what: "mkfs.ext4", stage: "flash tests", pkg: "e2fsprogs", command: "mkfs.ext4", use: useTest},
	{what: "losetup", stage: "flash tests", pkg: "mount", command: "losetup", use: useTest},
	{what: "mkfs.xfs", stage: "reflink tests (an XFS loop mount: the image stage's clones)", pkg: "xfsprogs", command: "mkfs.xfs", use: useTest},
	{what: "ip (netns)", stage: "DHCP, TFTP, ProxyDHCP tests", pkg: "iproute2", command: "ip", use: useTest},
	{what: "docker-registry", stage: "OCI publish tests", pkg: "docker-registry", command: "docker-registry", use: useTest},
	{what: "PostgreSQL 15", stage: "report store tests", pkg: "postgresql", files: []string{"/usr/lib/postgresql/15/bin/postgres"}, use: useTest},
	{what: "chromium", stage: "fleet page test", pkg: "chromium", command: "chromium", use: useTest},
	// systemd-measure sign (the .pcrsig cross-check) computes its policy digests in a
	// TPM trial session: it dlopens these and talks to swtpm through the swtpm TCTI.
	{what: "TPM2 TSS ESAPI", stage: "systemd-measure sign cross-check", pkg: "libtss2-esys-3.0.2-0", files: []string{"/usr/lib/x86_64-linux-gnu/libtss2-esys.so.0"}, use: useTest},
	{what: "TPM2 TSS return codes", stage: "systemd-measure sign cross-check", pkg: "libtss2-rc0", files: []string{"/usr/lib/x86_64-linux-gnu/libtss2-rc.so.0"}, use: useTest},
	{what: "TPM2 TSS swtpm TCTI", stage: "systemd-measure sign cross-check", pkg: "libtss2-tcti-swtpm0", files: []string{"/usr/lib/x86_64-linux-gnu/libtss2-tcti-swtpm.so.0"}, use: useTest},
}

func (n hostNeed) present() bool {
	if n.command != "" {
		_, err := exec.LookPath(n.command)
		return err == nil
	}
	for _, f := range n.files {
		if _, err := os.Stat(f); err == nil {
			return true
		}
	}
	return false
}

// packagesFor lists the Debian packages of the needs of the given uses.
func packagesFor(uses ...use) []string {
	var out []string
	for _, n := range hostNeeds {
		if slices.Contains(uses, n.use) {
			out = append(out, n.pkg)
		}
	}
	return uniqueSorted(out)
}

// doctorJSON is `peerboot doctor --json`.
type doctorJSON struct {
	OK      bool       `json:"ok"` // every need of the uses checked is present
	Needs   []needJSON `json:"needs"`
	Missing []string   `json:"missing"` // packages to install for the uses checked
	Install string     `json:"install"` // the apt-get line for them; "" when none
	For     []use      `json:"for"`     // the uses checked (--for, --all)
	Store   storeJSON  `json:"store"`
}

// storeJSON says where the store lives and whether its filesystem clones
// files: informational, it never fails doctor.
type storeJSON struct {
	Path       string `json:"path"`
	Filesystem string `json:"filesystem"` // of Path, or of its nearest existing parent
	Clones     bool   `json:"clones"`
	Why        string `json:"why,omitempty"` // why not, when it does not
}

// storeCheck probes root (the store, or where it will be made).
func storeCheck(root string) storeJSON {
	j := storeJSON{Path: root}
	dir := root
	for { // the nearest existing directory: the store may not be made yet
		if info, err := os.Stat(dir); err == nil && info.IsDir() {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	fs, err := fsutil.FSType(dir)
	if err != nil {
		j.Why = err.Error()
		return j
	}
	j.Filesystem = fs
	if err := fsutil.CanClone(dir); err != nil {
		j.Why = err.Error()
		return j
	}
	j.Clones = true
	return j
}

// storeLines words the store check for the terminal.
func storeLines(j storeJSON) string {
	fs := j.Filesystem
	if fs == "" {
		fs = "unknown filesystem"
	}
	if j.Clones {
		return fmt.Sprintf("store    %s (%s, clones files: a rebuild writes only what changed)\n", j.Path, fs)
	}
	return fmt.Sprintf("store    %s (%s, no clones: %s)\n"+
		"         an image rebuild writes its files whole (the default recipe's ~330 MiB); on XFS\n"+
		"         (mkfs.xfs -m reflink=1) or btrfs it clones the previous build and writes only\n"+
		"         what changed: point PEERBOOT_CACHE there (docs/figures.md, the inner loop)\n", j.Path, fs, j.Why)
}

// useList words the uses checked for messages: "build", "build and run".
func useList(uses []use) string {
	names := make([]string, len(uses))
	for i, u := range uses {
		names[i] = string(u)
		if u == useBuild {
			names[i] = "building"
		}
	}
	if len(names) == 0 {
		return "nothing"
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

type needJSON struct {
	What    string `json:"what"`
	Package string `json:"package"`
	For     string `json:"for"`
	Use     string `json:"use"` // build, sign, run or test
	Present bool   `json:"present"`
}

func doctorCmd(g *globals) *cobra.Command {
	var packages, all, asJSON bool
	var forUses []string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the host tools every stage needs and print the apt-get line for what is missing",
		Long: `doctor checks the host tools building needs and prints the exact apt-get line for
what is missing (exit 7). --for run checks what ` + "`peerboot run`" + ` needs (QEMU, OVMF) instead,
--for build,sign both, --all everything (signing, QEMU and the tests too); tools of a
use not asked for are listed as "absent" and never fail it.

--packages prints the Debian packages of those uses on one line instead (building's
by default: what ` + "`make image`" + ` installs; --all: what ` + "`make test`" + ` installs).
--json prints the check, or with --packages the list, as JSON.`,
		Args: maxArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if all && cmd.Flags().Changed("for") {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("doctor: --all checks every use: leave out --for %s, or --all", strings.Join(forUses, ",")))
			}
			uses := []use{}
			for _, f := range forUses {
				u := use(f)
				if u != useBuild && u != useSign && u != useRun && u != useTest {
					return exitcode.Tag(exitcode.Usage, fmt.Errorf("--for: want build, sign, run or test, got %q", f))
				}
				uses = append(uses, u)
			}
			if all {
				uses = []use{useBuild, useSign, useRun, useTest}
			}
			if packages { // for scripts (`make deps`, `make sign-deps`, `make test-deps`)
				list := packagesFor(uses...)
				if asJSON {
					return writeJSON(out, struct {
						Packages []string `json:"packages"`
						For      []use    `json:"for"`
					}{append([]string{}, list...), uses})
				}
				fmt.Fprintln(out, strings.Join(list, " "))
				return nil
			}
			root := g.cache
			if root == "" {
				root = store.DefaultRoot()
			}
			j := doctorJSON{Needs: []needJSON{}, Missing: []string{}, For: uses, Store: storeCheck(root)}
			for _, n := range hostNeeds {
				ok := n.present()
				j.Needs = append(j.Needs, needJSON{What: n.what, Package: n.pkg, For: n.stage, Use: string(n.use), Present: ok})
				if !ok && slices.Contains(uses, n.use) {
					j.Missing = append(j.Missing, n.pkg)
				}
			}
			j.Missing = append([]string{}, uniqueSorted(j.Missing)...)
			j.OK = len(j.Missing) == 0
			if !j.OK {
				j.Install = "apt-get install -y --no-install-recommends " + strings.Join(j.Missing, " ")
			}
			var err error
			if !j.OK {
				err = exitcode.Tag(exitcode.HostTools, fmt.Errorf("%d host tools missing for %s: %s", len(j.Missing), useList(uses), j.Install))
			}
			if asJSON {
				if werr := writeJSON(out, j); werr != nil {
					return werr
				}
				return err
			}
			// Columns as wide as their longest entry: a fixed width let a long
			// name ("binutils (objcopy, objdump)") push its row out of line.
			whatW, pkgW := 0, 0
			for _, n := range j.Needs {
				whatW, pkgW = max(whatW, len(n.What)), max(pkgW, len(n.Package))
			}
			for _, n := range j.Needs {
				state := "ok"
				switch {
				case n.Present:
				case !slices.Contains(uses, use(n.Use)):
					state = "absent" // not asked for: --for or --all check it
				default:
					state = "MISSING"
				}
				fmt.Fprintf(out, "%-8s %-*s %-*s (%s: %s)\n", state, whatW, n.What, pkgW, n.Package, n.Use, n.For)
			}
			fmt.Fprint(out, storeLines(j.Store))
			if j.OK {
				fmt.Fprintf(out, "\nall host tools %s needs are present\n", useList(uses))
				return nil
			}
			fmt.Fprintf(out, "\ninstall what is missing with:\n  %s\n", j.Install)
			return err
		},
	}
	cmd.Flags().BoolVar(&packages, "packages", false, "print the Debian packages building needs, on one line")
	cmd.Flags().BoolVar(&all, "all", false, "check (or with --packages, list) what signing, peerboot run and the tests need too")
	cmd.Flags().StringSliceVar(&forUses, "for", []string{"build"}, "whose needs to check or list: build, sign, run, test (comma-separated)")
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func uniqueSorted(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
