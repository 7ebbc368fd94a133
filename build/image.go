package build

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/peerboot/peerboot/debfile"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
)

// Stage output layouts read by later stages.
const (
	initrdFile    = "initrd.img"
	ukiFile       = "peerboot.efi"
	diskFile      = "disk.img"
	isoFile       = "peerboot.iso"
	pxeDir        = "pxe"
	stubPath      = "usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	imageRecipeAt = "etc/peerboot/recipe.toml"
)

// initrdLayers are the layer stages whose segments make the initrd, in the
// order the kernel unpacks them (a later file replaces an earlier one).
var initrdLayers = []string{"userspace", "modules", "config"}

// 6. Initramfs: the layers' segments, concatenated. The kernel unpacks
// concatenated compressed cpio archives in turn (Documentation/driver-api/
// early-userspace/buffer-format.rst), so each segment is packed once, by its
// layer, and an overlay edit re-packs only the config segment.
func initramfsStage() *stage {
	return &stage{
		Name: "initramfs", Version: 2, // 2: one segment per layer
		Deps: initrdLayers,
		Run: func(ctx context.Context, sr *stageRun) error {
			out, err := os.Create(filepath.Join(sr.Out, initrdFile))
			if err != nil {
				return err
			}
			var total int64
			for _, l := range initrdLayers {
				f, err := os.Open(filepath.Join(sr.Dep(l), layerSegment))
				if err != nil {
					out.Close()
					return err
				}
				n, err := io.Copy(out, f)
				f.Close()
				if err != nil {
					out.Close()
					return err
				}
				total += n
			}
			fmt.Fprintf(sr.Log, "initramfs: %d segments, %.1f MiB\n", len(initrdLayers), float64(total)/(1<<20))
			return out.Close()
		},
	}
}

// 7. Image: UKI, GPT disk, ISO and PXE bundle, as the recipe's outputs ask.
// It sees the whole recipe: the disk's GUIDs and the FAT volume ids derive
// from the recipe digest.
func imageStage() *stage {
	return &stage{
		Name: "image", Version: 3, // 2: layout from image.StandardDisk; 3: the iso format
		Deps:   []string{"kernel", "initramfs"},
		Roles:  []string{lock.RoleEFIStub},
		Fields: []string{wholeRecipe},
		Clock:  clockAll,
		Run: func(ctx context.Context, sr *stageRun) error {
			r := sr.Recipe
			kernelImg, err := os.ReadFile(filepath.Join(sr.Dep("kernel"), kernel.ImageFile))
			if err != nil {
				return err
			}
			initrd, err := os.ReadFile(filepath.Join(sr.Dep("initramfs"), initrdFile))
			if err != nil {
				return err
			}
			stub, err := efiStub(sr)
			if err != nil {
				return err
			}
			var uki bytes.Buffer
			osRelease := generatedFiles(r)["etc/os-release"]
			if err := image.WriteUKI(&uki, image.UKI{Stub: stub, Kernel: kernelImg, Initrd: initrd, Cmdline: r.Kernel.Cmdline, OSRelease: string(osRelease)}); err != nil {
				return fmt.Errorf("UKI: %w", err)
			}
			want := map[string]bool{}
			for _, f := range r.Outputs.Formats {
				want[f] = true
			}
			if want["uki"] {
				if err := os.WriteFile(filepath.Join(sr.Out, ukiFile), uki.Bytes(), 0o644); err != nil {
					return err
				}
			}
			if want["disk"] {
				d, err := image.StandardDisk(r.Digest, int64(r.Outputs.DiskSize), sr.Epoch, uki.Bytes())
				if err != nil {
					return fmt.Errorf("outputs.disk_size %s: %w", r.Outputs.DiskSize, err)
				}
				f, err := os.Create(filepath.Join(sr.Out, diskFile))
				if err != nil {
					return err
				}
				err = image.WriteDisk(f, d)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("disk: %w", err)
				}
			}
			if want["iso"] {
				f, err := os.Create(filepath.Join(sr.Out, isoFile))
				if err != nil {
					return err
				}
				err = image.WriteISO(f, image.StandardISO(r.Digest, sr.Epoch, uki.Bytes()))
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("ISO: %w", err)
				}
			}
			if want["pxe"] {
				err := image.LinkPXE(filepath.Join(sr.Out, pxeDir), image.PXE{Kernel: kernelImg, Initrd: initrd, Cmdline: r.Kernel.Cmdline},
					filepath.Join(sr.Dep("kernel"), kernel.ImageFile), filepath.Join(sr.Dep("initramfs"), initrdFile))
				if err != nil {
					return fmt.Errorf("PXE bundle: %w", err)
				}
			}
			return nil
		},
	}
}

// efiStub reads systemd's EFI stub out of the pinned systemd-boot-efi package.
func efiStub(sr *stageRun) ([]byte, error) {
	for _, in := range sr.Inputs {
		if in.Role != lock.RoleEFIStub {
			continue
		}
		f, err := os.Open(sr.Store.BlobPath(in.SHA256))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		stub, err := debfile.DataFile(f, stubPath)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in.Name, err)
		}
		return stub, nil
	}
	return nil, fmt.Errorf("no pinned EFI stub (outputs.efi_stub)")
}

// generatedFiles are the image files written from the recipe.
func generatedFiles(r *recipe.Resolved) map[string][]byte {
	files := map[string][]byte{imageRecipeAt: r.Canonical()}
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
	return files
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Tools are peerboot's own binaries that go into the image.
type Tools struct {
	Init     string // static PID 1 (cmd/peerboot-init)
	P2PCheck string // the self-test (cmd/p2pcheck)
}

// ToolsBeside finds the image binaries next to the running peerboot (make builds
// all three into bin/).
func ToolsBeside(exe string) Tools {
	dir := filepath.Dir(exe)
	return Tools{Init: filepath.Join(dir, "peerboot-init"), P2PCheck: filepath.Join(dir, "p2pcheck")}
}
