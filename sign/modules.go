package sign

import (
	"context"
	"crypto/x509"
	"debug/pe"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/initramfs"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/sign/modsign"
)

// verifyModules checks, inside every initramfs the output lists (pxe/initrd.img
// and each UKI's .initrd section), that every kernel module carries a signature
// that verifies against cert: what the kernel checks at load time with
// module.sig_enforce=1.
func verifyModules(ctx context.Context, dir string, sums []output.Sum, cert *x509.Certificate, log io.Writer, fail func(string, string, ...any)) {
	n := 0
	for _, s := range sums {
		var open func() (io.ReadCloser, error)
		label := s.Path
		switch {
		case path.Base(s.Path) == output.InitrdFile:
			open = func() (io.ReadCloser, error) { return os.Open(filepath.Join(dir, s.Path)) }
		case strings.HasSuffix(s.Path, ".efi"):
			label = s.Path + " (.initrd section)"
			open = func() (io.ReadCloser, error) { return ukiInitrd(filepath.Join(dir, s.Path)) }
		default:
			continue
		}
		if err := ctx.Err(); err != nil {
			fail(s.Path, "%v", err)
			return
		}
		n++
		rc, err := open()
		if errors.Is(err, errNoInitrd) {
			fmt.Fprintf(log, "verify: %s: no .initrd section, no modules to check\n", s.Path)
			n--
			continue
		}
		if err != nil {
			fail(s.Path, "cannot read its initramfs to check module signatures: %v", err)
			continue
		}
		mods, bad := 0, 0
		// Modules failing for the same reason make one problem, not one line each.
		var reasons []string
		byReason := map[string][]string{}
		badModule := func(name, reason string) {
			bad++
			if _, ok := byReason[reason]; !ok {
				reasons = append(reasons, reason)
			}
			byReason[reason] = append(byReason[reason], "/"+name)
		}
		err = initramfs.ReadFiles(rc, isModule, func(name string, data []byte) error {
			mods++
			if strings.HasSuffix(name, ".ko") {
				if _, err := modsign.Verify(data, []*x509.Certificate{cert}); err != nil {
					badModule(name, err.Error())
				}
				return nil
			}
			badModule(name, "compressed: its signature cannot be checked")
			return nil
		})
		rc.Close()
		for _, reason := range reasons {
			names := byReason[reason]
			if len(names) == 1 {
				fail(s.Path, "module %s: %s", names[0], reason)
				continue
			}
			shown := names
			if len(shown) > 3 {
				shown = append(shown[:3:3], fmt.Sprintf("and %d more", len(names)-3))
			}
			fail(s.Path, "%d of %d modules: %s (%s)", len(names), mods, reason, strings.Join(shown, ", "))
		}
		switch {
		case err != nil:
			fail(s.Path, "initramfs: %v", err)
		case mods == 0:
			fail(s.Path, "its initramfs holds no kernel modules to check")
		case bad == 0:
			fmt.Fprintf(log, "verify: %s: %d module signatures OK (%s)\n", label, mods, certName(cert))
		}
	}
	if n == 0 && sums != nil {
		fail(output.SumsFile, "lists no initrd.img, and no UKI with an .initrd section, whose modules could be checked against the module certificate")
	}
}

func isModule(name string) bool {
	return strings.HasSuffix(name, ".ko") || compressedModule(name)
}

func compressedModule(name string) bool {
	for _, ext := range []string{".ko.xz", ".ko.gz", ".ko.zst"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

var errNoInitrd = errors.New("the UKI has no .initrd section")

// ukiInitrd opens a UKI's .initrd section (its VirtualSize is the exact size).
func ukiInitrd(file string) (io.ReadCloser, error) {
	f, err := pe.Open(file)
	if err != nil {
		return nil, err
	}
	s := f.Section(".initrd")
	if s == nil {
		f.Close()
		return nil, errNoInitrd
	}
	size := int64(min(s.VirtualSize, s.Size))
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(s.Open(), size), f}, nil
}
