// Package rootfs is the rootfs stage: it lays the image's file tree out of the
// pinned userspace .debs (no maintainer scripts), the kernel and driver modules,
// the overlay, generated configuration, and peerboot's own init and self-test.
package rootfs

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/nvrun"
	"github.com/peerboot/peerboot/sign/modsign"
)

// Version is the version of the three rootfs layers' code: bump it when this
// code changes what a layer writes.
const Version = 3 // 2: three layers (userspace, modules, config); 3: newc framing by cavaliergopher/cpio (upper-case hex)

// NVIDIALibDir is where Debian's NVIDIA packages put their libraries; the
// alternatives that maintainer scripts would set up are replaced by a linker path
// and soname links in the multiarch directory.
const NVIDIALibDir = "usr/lib/x86_64-linux-gnu/nvidia/current"

// The image's tree is three layers, each its own stage output and its own
// initramfs segment, so an edit re-lays only its layer: the userspace from the
// .debs (large, changes with the lock), the modules (changes with the kernel
// and the driver), and the small configuration layer (overlay, files generated
// from the recipe, init and self-test). The kernel unpacks the segments in that
// order, a later file replacing an earlier one, so a layer's paths must be real
// directories all the way down (no path through the usr-merge links).

// UserspaceOptions is what the userspace layer reads.
type UserspaceOptions struct {
	Debs          []string // userspace .deb files, in lock order
	DriverVersion string   // libcuda must be this exact version; "" = not checked
	// Installer is NVIDIA's .run installer (a store blob, already checked against
	// its pin); "" = none. Its files are laid after the packages; a path both
	// provide is an error.
	Installer       string
	InstallerSHA256 string // its pin, checked again as it is read ("" = not checked)
	Scratch         string // where the installer's files are staged; "" = the system's temporary directory
}

// Userspace lays out the base directories and usr-merge links, the packages (no
// maintainer scripts), the NVIDIA library links and the linker cache into root,
// which must be empty.
func Userspace(ctx context.Context, opt UserspaceOptions, root string) error {
	// 1. usr-merge: /bin, /sbin, /lib, /lib64 are links into /usr, as on Debian today.
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "proc", "sys", "dev", "run", "tmp", "root", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil {
			return err
		}
	}
	// 2. Packages, in lock order.
	for _, deb := range opt.Debs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := extractDeb(deb, root); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(deb), err)
		}
	}
	// 3. NVIDIA's installer, for a driver branch Debian does not ship.
	if opt.Installer != "" {
		if err := layInstaller(ctx, opt, root); err != nil {
			return err
		}
	}
	// 4. The NVIDIA libraries reach the linker without alternatives.
	if err := linkNVIDIA(root); err != nil {
		return err
	}
	if opt.DriverVersion != "" {
		if err := checkLibcudaVersion(root, opt.DriverVersion); err != nil {
			return err
		}
	}
	// 5. The dynamic linker cache, built by the host's ldconfig against the tree
	// (only this layer holds libraries).
	if err := writeFile(root, "etc/ld.so.conf", []byte("include /etc/ld.so.conf.d/*.conf\n"), 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "ldconfig", "-r", root, "-X").CombinedOutput(); err != nil {
		return fmt.Errorf("ldconfig: %w: %s", err, out)
	}
	return CheckResolves(root, "libcuda.so.1", "libnvidia-ml.so.1")
}

// layInstaller lays the installer's files where Debian's packages of the same
// files put them: the libraries and their soname links in NVIDIALibDir (linked
// into the multiarch directory by linkNVIDIA, as for Debian's), nvidia-smi in
// /usr/bin, the GSP firmware in /lib/firmware/nvidia/<version>/. Every
// destination is checked free before the first is written.
func layInstaller(ctx context.Context, opt UserspaceOptions, root string) error {
	u, err := nvrun.Unpack(ctx, opt.Installer, nvrun.Options{SHA256: opt.InstallerSHA256, Version: opt.DriverVersion, Scratch: opt.Scratch})
	if err != nil {
		return err
	}
	defer u.Close()
	dest := func(f nvrun.File) string {
		switch f.Kind {
		case nvrun.KindBinary:
			return path.Join("usr/bin", f.Name)
		case nvrun.KindFirmware:
			return path.Join("usr/lib/firmware/nvidia", u.Version, f.Name)
		}
		return path.Join(NVIDIALibDir, f.Name)
	}
	for _, f := range u.Files {
		if _, err := os.Lstat(filepath.Join(root, dest(f))); err == nil {
			return fmt.Errorf("/%s comes from a userspace package and from NVIDIA's installer %s: drop the package (the installer provides it)", dest(f), filepath.Base(opt.Installer))
		}
	}
	for _, f := range u.Files {
		if f.Kind == nvrun.KindLink {
			if err := writeSymlink(root, dest(f), f.Link); err != nil {
				return err
			}
			continue
		}
		// Streamed from nvrun's staging: a GSP image or libcuda is ~100 MB,
		// never held in memory whole.
		src, err := os.Open(f.Src)
		if err != nil {
			return err
		}
		err = writeFrom(root, dest(f), src, f.Mode)
		src.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// ModulesOptions is what the modules layer reads.
type ModulesOptions struct {
	KernelModules string   // the kernel stage's lib/modules/<release> directory
	Release       string   // kernel release
	DriverModules []string // nvidia .ko files
	// ModuleKey, when set, signs every module (in-tree and driver); ModuleCert
	// is its certificate, which the kernel trusts.
	ModuleKey  crypto.Signer
	ModuleCert *x509.Certificate
}

// ModulesDir is where the modules layer puts a release's modules.
func ModulesDir(release string) string { return filepath.Join("usr/lib/modules", release) }

// Modules lays the kernel's module tree plus the driver's modules, signed when
// a key is given, with depmod's indexes, at usr/lib/modules/<release> in root.
func Modules(ctx context.Context, opt ModulesOptions, root string) error {
	modDir := filepath.Join(root, ModulesDir(opt.Release))
	if err := os.MkdirAll(modDir, 0o755); err != nil {
		return err
	}
	if opt.KernelModules != "" {
		if err := fsutil.CopyTree(opt.KernelModules, modDir, nil); err != nil {
			return fmt.Errorf("kernel modules: %w", err)
		}
	}
	for _, ko := range opt.DriverModules {
		if err := fsutil.CopyFile(ko, filepath.Join(modDir, "updates", "dkms", filepath.Base(ko)), 0o644); err != nil {
			return fmt.Errorf("driver modules: %w", err)
		}
	}
	if opt.ModuleKey != nil {
		n, err := SignModules(ctx, modDir, opt.ModuleKey, opt.ModuleCert)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("module signing: no .ko files under %s", modDir)
		}
	}
	// bookworm's depmod looks under BASE/lib/modules: a link for its run only,
	// never part of the layer (the userspace layer has the real one).
	link := filepath.Join(root, "lib")
	if err := os.Symlink("usr/lib", link); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "depmod", "-b", root, opt.Release).CombinedOutput()
	if rerr := os.Remove(link); err == nil && rerr != nil {
		return rerr
	}
	if err != nil {
		return fmt.Errorf("depmod: %w: %s", err, out)
	}
	return nil
}

// ConfigOptions is what the configuration layer reads.
type ConfigOptions struct {
	Overlay     map[string][]byte // static files (image path -> bytes)
	Files       map[string][]byte // generated files (image path -> bytes), laid over the overlay
	Executables map[string][]byte // image path -> bytes (init, p2pcheck), mode 0755
}

// Config lays the overlay, the generated files and the executables into root.
func Config(ctx context.Context, opt ConfigOptions, root string) error {
	for _, p := range slices.Sorted(maps.Keys(opt.Overlay)) {
		if err := writeFile(root, p, opt.Overlay[p], 0o644); err != nil {
			return fmt.Errorf("overlay: %w", err)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(opt.Files)) {
		if err := writeFile(root, p, opt.Files[p], 0o644); err != nil {
			return err
		}
	}
	for _, p := range slices.Sorted(maps.Keys(opt.Executables)) {
		if err := writeFile(root, p, opt.Executables[p], 0o755); err != nil {
			return err
		}
	}
	return ctx.Err()
}

var compressedKo = regexp.MustCompile(`\.ko\.(xz|gz|zst)$`)

// SignModules signs every .ko under dir in place with key (see package
// modsign), in path order, then checks that each one ends with the signature
// magic. A compressed module is an error: it would have to be signed before
// compression. It returns how many modules it signed.
func SignModules(ctx context.Context, dir string, key crypto.Signer, cert *x509.Certificate) (int, error) {
	if cert == nil {
		return 0, errors.New("module signing: a key without its certificate")
	}
	if err := modsign.CheckPair(key, cert); err != nil {
		return 0, fmt.Errorf("module signing: %w", err)
	}
	var kos []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		switch {
		case strings.HasSuffix(p, ".ko"):
			kos = append(kos, p)
		case compressedKo.MatchString(p):
			return fmt.Errorf("%s: a compressed module cannot be signed here; build modules uncompressed", p)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("module signing: %w", err)
	}
	for _, p := range kos { // WalkDir visits in lexical order
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		info, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, fmt.Errorf("module signing: %w", err)
		}
		signed, err := modsign.Sign(b, key, cert)
		if err != nil {
			return 0, fmt.Errorf("module signing: %s: %w", p, err)
		}
		if err := os.WriteFile(p, signed, info.Mode().Perm()); err != nil {
			return 0, fmt.Errorf("module signing: %w", err)
		}
	}
	// The stage's promise, checked on what is on disk: no module goes unsigned.
	var unsigned []string
	for _, p := range kos {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, fmt.Errorf("module signing: %w", err)
		}
		if !modsign.Signed(b) {
			unsigned = append(unsigned, p)
		}
	}
	if len(unsigned) > 0 {
		return 0, fmt.Errorf("module signing: %d modules lack %q: %s", len(unsigned), strings.TrimSpace(modsign.Magic), strings.Join(unsigned, ", "))
	}
	return len(kos), nil
}

var libVersionRe = regexp.MustCompile(`^libcuda\.so\.(\d+\.\d+(\.\d+)?)$`)

func linkNVIDIA(root string) error {
	dir := filepath.Join(root, NVIDIALibDir)
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil // an image without NVIDIA userspace
	}
	if err != nil {
		return err
	}
	if err := writeFile(root, "etc/ld.so.conf.d/00-nvidia.conf", []byte("/"+NVIDIALibDir+"\n"), 0o644); err != nil {
		return err
	}
	for _, e := range entries {
		// soname links (libcuda.so.1 -> nvidia/current/libcuda.so.1), as the alternatives would.
		if e.Type()&fs.ModeSymlink == 0 || !regexp.MustCompile(`\.so\.\d+$`).MatchString(e.Name()) {
			continue
		}
		// Through the tree's own writer: a package may have made the directory a link.
		if err := writeSymlink(root, "usr/lib/x86_64-linux-gnu/"+e.Name(), "nvidia/current/"+e.Name()); err != nil {
			return err
		}
	}
	return nil
}

// checkLibcudaVersion refuses an image whose libcuda differs from the kernel
// driver: the two talk over a private ABI and must be the same release.
func checkLibcudaVersion(root, want string) error {
	entries, _ := os.ReadDir(filepath.Join(root, NVIDIALibDir))
	for _, e := range entries {
		if m := libVersionRe.FindStringSubmatch(e.Name()); m != nil {
			if m[1] != want {
				return fmt.Errorf("libcuda is %s but the driver is %s: the driver won't talk to it; pin libcuda1 to the driver's version", m[1], want)
			}
			return nil
		}
	}
	return fmt.Errorf("no libcuda.so.<version> in /%s: add libcuda1 to userspace.packages", NVIDIALibDir)
}

// CheckResolves proves each soname is in the image's linker cache and that its
// link chain ends at a regular file inside the tree.
func CheckResolves(root string, sonames ...string) error {
	cache, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil {
		return fmt.Errorf("no linker cache: %w", err)
	}
	for _, so := range sonames {
		if _, err := os.Stat(filepath.Join(root, NVIDIALibDir)); os.IsNotExist(err) {
			return nil
		}
		if !bytes.Contains(cache, []byte(so+"\x00")) {
			return fmt.Errorf("%s is not in the image's linker cache", so)
		}
		p := filepath.Join("usr/lib/x86_64-linux-gnu", so)
		for i := 0; ; i++ {
			full := filepath.Join(root, p)
			info, err := os.Lstat(full)
			if err != nil {
				return fmt.Errorf("%s does not resolve inside the image: %s is missing", so, "/"+p)
			}
			if info.Mode().IsRegular() {
				break
			}
			if i > 16 {
				return fmt.Errorf("%s: symlink loop", so)
			}
			t, _ := os.Readlink(full)
			if path.IsAbs(t) {
				p = strings.TrimPrefix(t, "/")
			} else {
				p = path.Join(path.Dir(p), t)
			}
		}
	}
	return nil
}
