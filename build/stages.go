package build

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/peerboot/peerboot/debfile"
	"github.com/peerboot/peerboot/driver"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/initramfs"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/overlay"
	"github.com/peerboot/peerboot/rootfs"
	"github.com/peerboot/peerboot/sign/keyref"
)

// Stage output layouts read by later stages.
const (
	rootfsTree    = "root"
	initrdFile    = "initrd.img"
	ukiFile       = "peerboot.efi"
	diskFile      = "disk.img"
	pxeDir        = "pxe"
	stubPath      = "usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	reportsSize   = 32 << 20
	diskOverhead  = 2 << 20 // GPT, alignment and the backup table
	imageRecipeAt = "etc/peerboot/recipe.toml"
)

// 2. Driver: unpack the pinned driver source, apply the series, build against the kernel.
func (b *runner) driver(ctx context.Context, scratch, out string) error {
	r := b.plan.Recipe
	src, err := b.unpack(ctx, lock.RoleDriverSource, filepath.Join(scratch, "src"))
	if err != nil {
		return err
	}
	var patches []driver.Patch
	for _, p := range r.Driver.Patches {
		data, _, err := r.ReadData(p, driver.Patches, driver.PatchDir(r.Driver.Version))
		if err != nil {
			return err
		}
		patches = append(patches, driver.Patch{Name: p, Data: data})
	}
	epoch, err := b.epoch(ctx)
	if err != nil {
		return err
	}
	res, err := driver.Build(ctx, driver.Options{
		Source: src, KernelOut: b.outputDir("kernel"), Patches: patches, Modules: r.Driver.Modules,
		Epoch: epoch, Jobs: b.opt.Jobs, Log: b.opt.Log, LogFile: filepath.Join(scratch, "driver.log"),
	}, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(b.opt.Log, "driver: %d modules for %s\n", len(res.Modules), res.Release)
	return nil
}

// 3. Rootfs: packages, modules, overlay, generated configuration, init and self-test.
func (b *runner) rootfs(ctx context.Context, scratch, out string) error {
	r := b.plan.Recipe
	kout := b.outputDir("kernel")
	rel, err := readRelease(kout)
	if err != nil {
		return err
	}
	var debs []string
	for _, in := range b.opt.Inputs {
		if in.Role == lock.RoleUserspace {
			debs = append(debs, b.opt.Store.BlobPath(in.SHA256))
		}
	}
	kos, err := filepath.Glob(filepath.Join(b.outputDir("driver"), driver.ModulesDir, "lib", "modules", rel, "updates", "dkms", "*.ko"))
	if err != nil {
		return err
	}
	sort.Strings(kos)
	files, err := generatedFiles(b.plan)
	if err != nil {
		return err
	}
	var modKey crypto.Signer
	var modCert *x509.Certificate
	if ms := b.plan.ModSign; ms != nil && ms.KeyRef != "" {
		if modKey, err = keyref.LoadSigner(ms.KeyRef); err != nil {
			return fmt.Errorf("sign.module_key: %w", err)
		}
		if modCert, err = keyref.ParseCert(ms.CertPEM); err != nil {
			return fmt.Errorf("sign.module_cert: %w", err)
		}
	}
	return rootfs.Build(ctx, rootfs.Options{
		ModuleKey: modKey, ModuleCert: modCert,
		Debs: debs, Release: rel, DriverVersion: r.Driver.Version,
		KernelModules: filepath.Join(kout, kernel.ModulesDir, "lib", "modules", rel),
		DriverModules: kos, Overlay: overlay.FS(), Files: files,
		Executables: map[string]string{"init": b.plan.Tools.Init, "usr/bin/p2pcheck": b.plan.Tools.P2PCheck},
	}, filepath.Join(out, rootfsTree))
}

// generatedFiles are the image files written from the recipe.
func generatedFiles(p *Plan) (map[string][]byte, error) {
	r := p.Recipe
	files := map[string][]byte{imageRecipeAt: p.Recipe.Canonical()}
	short := strings.TrimPrefix(r.Digest, "sha256:")[:12]
	files["etc/os-release"] = []byte(fmt.Sprintf(
		"NAME=\"peerboot\"\nID=peerboot\nPRETTY_NAME=\"peerboot %s (nvidia-open %s)\"\nIMAGE_ID=%s\nIMAGE_VERSION=%s\nVERSION_ID=%s\n",
		r.Name, r.Driver.Version, r.Name, short, r.Driver.Version))
	var env bytes.Buffer
	env.WriteString("# From the recipe's [env]: NCCL and friends for every shell and the self-test.\n")
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		fmt.Fprintf(&env, "export %s=%s\n", k, shellQuote(r.Env[k]))
	}
	files["etc/profile.d/peerboot-env.sh"] = env.Bytes()
	var mp bytes.Buffer
	mp.WriteString("# From the recipe's [driver.params].\n")
	for _, m := range slices.Sorted(maps.Keys(r.Driver.Params)) {
		var opts []string
		for _, k := range slices.Sorted(maps.Keys(r.Driver.Params[m])) {
			opts = append(opts, k+"="+r.Driver.Params[m][k])
		}
		fmt.Fprintf(&mp, "options %s %s\n", strings.ReplaceAll(m, "-", "_"), strings.Join(opts, " "))
	}
	files["etc/modprobe.d/peerboot.conf"] = mp.Bytes()
	return files, nil
}

// 4. Initramfs: the rootfs tree as a deterministic zstd newc cpio.
func (b *runner) initramfs(ctx context.Context, scratch, out string) error {
	epoch, err := b.epoch(ctx)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(out, initrdFile))
	if err != nil {
		return err
	}
	st, err := initramfs.Pack(ctx, filepath.Join(b.outputDir("rootfs"), rootfsTree), epoch, f)
	if err != nil {
		f.Close()
		return err
	}
	fmt.Fprintf(b.opt.Log, "initramfs: %d files, %d dirs, %d symlinks, %.1f MiB uncompressed\n", st.Files, st.Dirs, st.Symlinks, float64(st.Bytes)/(1<<20))
	return f.Close()
}

// 5. Image: UKI, GPT disk and PXE bundle, as the recipe's outputs ask.
func (b *runner) image(ctx context.Context, scratch, out string) error {
	r := b.plan.Recipe
	epoch, err := b.epoch(ctx)
	if err != nil {
		return err
	}
	kernelImg, err := os.ReadFile(filepath.Join(b.outputDir("kernel"), kernel.ImageFile))
	if err != nil {
		return err
	}
	initrd, err := os.ReadFile(filepath.Join(b.outputDir("initramfs"), initrdFile))
	if err != nil {
		return err
	}
	stub, err := b.efiStub()
	if err != nil {
		return err
	}
	files, _ := generatedFiles(b.plan)
	var uki bytes.Buffer
	if err := image.WriteUKI(&uki, image.UKI{Stub: stub, Kernel: kernelImg, Initrd: initrd, Cmdline: r.Kernel.Cmdline, OSRelease: string(files["etc/os-release"])}); err != nil {
		return fmt.Errorf("UKI: %w", err)
	}
	want := map[string]bool{}
	for _, f := range r.Outputs.Formats {
		want[f] = true
	}
	if want["uki"] {
		if err := os.WriteFile(filepath.Join(out, ukiFile), uki.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if want["disk"] {
		size := int64(r.Outputs.DiskSize)
		espSize := size - reportsSize - diskOverhead
		if int64(uki.Len()) > espSize-(8<<20) {
			return fmt.Errorf("outputs.disk_size %s is too small for a %.0f MiB UKI plus the %d MiB report partition", r.Outputs.DiskSize, float64(uki.Len())/(1<<20), reportsSize>>20)
		}
		seed := r.Digest
		f, err := os.Create(filepath.Join(out, diskFile))
		if err != nil {
			return err
		}
		err = image.WriteDisk(f, image.Disk{
			Size: size, DiskGUID: image.DeriveGUID(seed, "disk"), Epoch: epoch,
			ESP: image.Partition{Size: espSize, GUID: image.DeriveGUID(seed, "esp"), Label: "ESP",
				VolumeID: image.DeriveVolumeID(seed, "esp"), Files: map[string][]byte{"EFI/BOOT/BOOTX64.EFI": uki.Bytes()}},
			Reports: image.Partition{Size: reportsSize, GUID: image.DeriveGUID(seed, "reports"), Label: "PEERBOOT",
				VolumeID: image.DeriveVolumeID(seed, "reports"), Files: map[string][]byte{"reports/": nil}},
		})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("disk: %w", err)
		}
	}
	if want["pxe"] {
		if err := image.WritePXE(filepath.Join(out, pxeDir), image.PXE{Kernel: kernelImg, Initrd: initrd, Cmdline: r.Kernel.Cmdline}); err != nil {
			return fmt.Errorf("PXE bundle: %w", err)
		}
	}
	return nil
}

// efiStub reads systemd's EFI stub out of the pinned systemd-boot-efi package.
func (b *runner) efiStub() ([]byte, error) {
	for _, in := range b.opt.Inputs {
		if in.Role != lock.RoleEFIStub {
			continue
		}
		f, err := os.Open(b.opt.Store.BlobPath(in.SHA256))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		var stub []byte
		err = debfile.Data(f, func(h *tar.Header, body io.Reader) error {
			if strings.TrimPrefix(h.Name, "./") == stubPath {
				var err error
				stub, err = io.ReadAll(body)
				return err
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in.Name, err)
		}
		if stub == nil {
			return nil, fmt.Errorf("%s has no /%s", in.Name, stubPath)
		}
		return stub, nil
	}
	return nil, fmt.Errorf("no pinned EFI stub (outputs.efi_stub)")
}

func readRelease(kernelOut string) (string, error) {
	b, err := os.ReadFile(filepath.Join(kernelOut, kernel.ReleaseFile))
	if err != nil {
		return "", fmt.Errorf("kernel stage output: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (b *runner) outputDir(stage string) string {
	return b.opt.Store.OutputDir(b.plan.Stage(stage).Key)
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
