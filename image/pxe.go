package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/output"
)

// PXE is the input of WritePXE.
type PXE struct {
	Kernel, Initrd []byte
	Cmdline        string
	// KernelSHA256 and InitrdSHA256, when set, are the sums boot.ipxe names
	// (a builder that already knows them: the store's MANIFEST); otherwise
	// IPXEScript hashes Kernel and Initrd.
	KernelSHA256, InitrdSHA256 string
	// BurnIn > 0 makes boot.ipxe a menu: the normal boot (the default, after a few
	// seconds) and a "burn-in" entry that adds peerboot.soak= of this length
	// (bootproto.BootEntries; the recipe's selftest.soak.menu).
	BurnIn time.Duration
}

// PXE bundle file names; boot.ipxe refers to them relative to its own URL.
const (
	pxeKernel = output.PXEKernel
	pxeInitrd = output.InitrdFile
	pxeScript = output.PXEScript
)

// IPXEScript renders boot.ipxe. The digests are comments, there for humans
// and for checking a served bundle against the build; iPXE itself ignores
// them.
func IPXEScript(p PXE) (string, error) {
	// A newline would end the kernel line and let the rest run as iPXE
	// commands.
	if strings.ContainsAny(p.Cmdline, "\r\n") {
		return "", errors.New("pxe: cmdline contains a line break")
	}
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	b.WriteString("# peerboot PXE bundle\n")
	sum := func(known string, b []byte) string {
		if known != "" {
			return known
		}
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	fmt.Fprintf(&b, "# sha256 %s  %s\n", sum(p.KernelSHA256, p.Kernel), pxeKernel)
	fmt.Fprintf(&b, "# sha256 %s  %s\n", sum(p.InitrdSHA256, p.Initrd), pxeInitrd)
	entries := bootproto.BootEntries(p.BurnIn)
	if len(entries) > 1 {
		b.WriteString(bootproto.IPXEMenu(entries))
	}
	for i, e := range entries {
		if len(entries) > 1 {
			fmt.Fprintf(&b, ":%s\n", e.Name)
		}
		line := "kernel " + pxeKernel
		for _, w := range []string{p.Cmdline, e.Args} {
			if w != "" {
				line += " " + w
			}
		}
		b.WriteString(line + "\n")
		b.WriteString("initrd " + pxeInitrd + "\n")
		b.WriteString("boot\n")
		if i < len(entries)-1 {
			b.WriteString("\n")
		}
	}
	return b.String(), nil
}

// WritePXE writes vmlinuz, initrd.img and boot.ipxe into dir (created if
// missing). Each file is written to a temporary name and renamed, so a
// server pointed at dir never hands out a half-written file.
func WritePXE(dir string, p PXE) error {
	if len(p.Kernel) == 0 {
		return errors.New("pxe: kernel is empty")
	}
	if len(p.Initrd) == 0 {
		return errors.New("pxe: initrd is empty")
	}
	script, err := IPXEScript(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pxe: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{pxeKernel, p.Kernel}, {pxeInitrd, p.Initrd}, {pxeScript, []byte(script)}} {
		if err := writeFileAtomic(filepath.Join(dir, f.name), bytes.NewReader(f.data)); err != nil {
			return fmt.Errorf("pxe: %w", err)
		}
	}
	return nil
}

// LinkPXE is WritePXE for a builder whose kernel and initrd already lie in
// immutable files (the store's stage outputs): boot.ipxe is written from p
// (whose sums it takes, when set, rather than hashing),
// vmlinuz and initrd.img are hard links to kernelFile and initrdFile (copies
// where a link cannot be made), so the bundle costs no second write of them.
func LinkPXE(dir string, p PXE, kernelFile, initrdFile string) error {
	script, err := IPXEScript(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pxe: %w", err)
	}
	for _, f := range []struct{ name, src string }{{pxeKernel, kernelFile}, {pxeInitrd, initrdFile}} {
		dst := filepath.Join(dir, f.name)
		if err := os.Link(f.src, dst); err != nil {
			// Streamed: the initrd carries the whole userspace, never held in memory.
			src, rerr := os.Open(f.src)
			if rerr != nil {
				return fmt.Errorf("pxe: %w", rerr)
			}
			err := writeFileAtomic(dst, src)
			src.Close()
			if err != nil {
				return fmt.Errorf("pxe: %w", err)
			}
		}
	}
	return writeFileAtomic(filepath.Join(dir, pxeScript), strings.NewReader(script))
}

func writeFileAtomic(path string, r io.Reader) error {
	return fsutil.WriteAtomic(path, 0o644, func(f *os.File) error {
		_, err := io.Copy(f, r)
		return err
	})
}
