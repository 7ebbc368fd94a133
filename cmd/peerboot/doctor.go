package main

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
)

// hostNeed is one host tool a stage needs and the Debian package that provides it.
type hostNeed struct {
	what    string
	stage   string
	pkg     string
	command string   // found on PATH, or
	files   []string // any one of these exists
	test    bool     // only `make test` needs it: listed by --packages, never a doctor failure
}

// hostNeeds is the single list of host requirements; `make deps` installs from it too.
var hostNeeds = []hostNeed{
	{what: "C compiler", stage: "kernel, driver", pkg: "build-essential", command: "gcc"},
	{what: "make", stage: "kernel, driver", pkg: "make", command: "make"},
	{what: "bc", stage: "kernel", pkg: "bc", command: "bc"},
	{what: "flex", stage: "kernel", pkg: "flex", command: "flex"},
	{what: "bison", stage: "kernel", pkg: "bison", command: "bison"},
	{what: "libelf headers", stage: "kernel", pkg: "libelf-dev", files: []string{"/usr/include/libelf.h", "/usr/include/gelf.h"}},
	{what: "OpenSSL headers", stage: "kernel", pkg: "libssl-dev", files: []string{"/usr/include/openssl/opensslv.h"}},
	{what: "openssl", stage: "sign", pkg: "openssl", command: "openssl"},
	{what: "xz", stage: "kernel", pkg: "xz-utils", command: "xz"},
	{what: "cpio", stage: "kernel", pkg: "cpio", command: "cpio"},
	{what: "rsync", stage: "kernel", pkg: "rsync", command: "rsync"},
	{what: "perl", stage: "kernel", pkg: "perl", command: "perl"},
	{what: "kmod (depmod, modinfo)", stage: "driver, rootfs", pkg: "kmod", command: "depmod"},
	{what: "zstd", stage: "initramfs", pkg: "zstd", command: "zstd"},
	{what: "git", stage: "fetch", pkg: "git", command: "git"},
	{what: "QEMU x86_64", stage: "run", pkg: "qemu-system-x86", command: "qemu-system-x86_64"},
	{what: "OVMF UEFI firmware", stage: "run", pkg: "ovmf", files: []string{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_CODE.fd"}},
	{what: "iPXE ROMs", stage: "run (PXE)", pkg: "ipxe-qemu", files: []string{"/usr/lib/ipxe/qemu/efi-virtio.rom"}},
	{what: "iPXE EFI binary", stage: "image (PXE)", pkg: "ipxe", files: []string{"/usr/lib/ipxe/ipxe.efi"}},
	{what: "sbsigntool", stage: "sign", pkg: "sbsigntool", command: "sbsign"},
	{what: "FAT tools", stage: "image checks", pkg: "dosfstools", command: "fsck.vfat"},
	{what: "mtools", stage: "image checks", pkg: "mtools", command: "mcopy"},
	{what: "sgdisk", stage: "image checks", pkg: "gdisk", command: "sgdisk"},
	{what: "lspci", stage: "self-test checks", pkg: "pciutils", command: "lspci"},
	{what: "binutils (objcopy, objdump)", stage: "kernel, image checks", pkg: "binutils", command: "objcopy"},
	{what: "Debian archive keyring", stage: "lock", pkg: "debian-archive-keyring", files: []string{"/usr/share/keyrings/debian-archive-keyring.gpg"}},
	// What the tests' cross-checks and fixtures run: under CI=true a test that
	// finds one missing fails (internal/testguard), so `make deps` installs them.
	{what: "fdisk", stage: "disk cross-check", pkg: "fdisk", command: "fdisk", test: true},
	{what: "mkfs.ext4", stage: "flash tests", pkg: "e2fsprogs", command: "mkfs.ext4", test: true},
	{what: "losetup", stage: "flash tests", pkg: "mount", command: "losetup", test: true},
	{what: "ip (netns)", stage: "DHCP, TFTP, ProxyDHCP tests", pkg: "iproute2", command: "ip", test: true},
	{what: "docker-registry", stage: "OCI publish tests", pkg: "docker-registry", command: "docker-registry", test: true},
	{what: "PostgreSQL 15", stage: "report store tests", pkg: "postgresql", files: []string{"/usr/lib/postgresql/15/bin/postgres"}, test: true},
	{what: "chromium", stage: "fleet page test", pkg: "chromium", command: "chromium", test: true},
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

func doctorCmd() *cobra.Command {
	var packages bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the host tools every stage needs and print the apt-get line for what is missing",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if packages { // the Debian packages of every need, for scripts (`make deps`)
				var all []string
				for _, n := range hostNeeds {
					all = append(all, n.pkg)
				}
				fmt.Fprintln(out, strings.Join(uniqueSorted(all), " "))
				return nil
			}
			var missing []string
			for _, n := range hostNeeds {
				state := "ok"
				switch {
				case n.present():
				case n.test:
					state = "absent" // make deps installs it for make test
				default:
					state = "MISSING"
					missing = append(missing, n.pkg)
				}
				fmt.Fprintf(out, "%-8s %-26s %-22s (for %s)\n", state, n.what, n.pkg, n.stage)
			}
			if len(missing) == 0 {
				fmt.Fprintln(out, "\nall host tools present")
				return nil
			}
			fmt.Fprintf(out, "\ninstall what is missing with:\n  apt-get install -y --no-install-recommends %s\n", strings.Join(uniqueSorted(missing), " "))
			return exitcode.Tag(exitcode.HostTools, fmt.Errorf("%d host tools missing", len(missing)))
		},
	}
	cmd.Flags().BoolVar(&packages, "packages", false, "print every Debian package peerboot and its tests need, on one line")
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
