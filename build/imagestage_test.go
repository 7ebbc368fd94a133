package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/debfile/debtest"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

// The image stage writes what the recipe's formats ask, each byte for byte
// what a fresh write of the UKI, disk and ISO makes from the store's kernel
// and initrd and the pinned stub; the PXE bundle links the deps' own files;
// the UKI is left out of the output when not asked for (the disk still holds
// it); everything written is read-only, and uki-placement.json records the
// UKI's size, where the disk and ISO hold it, and its sections' store sums.
func TestImageStageWritesWhatTheRecipeAsks(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	commit := func(key string, files map[string][]byte) string {
		t.Helper()
		dir, _ := st.NewScratch("t")
		for name, b := range files {
			os.WriteFile(filepath.Join(dir, name), b, 0o444)
		}
		if err := st.CommitOutput(key, dir); err != nil {
			t.Fatal(err)
		}
		return st.OutputDir(key)
	}
	kernelImg := append(tinyStub(t), []byte("kernel code")...)
	initrd := bytes.Repeat([]byte("an initrd\n"), 5000)
	kdir := commit("kernel-"+strings.Repeat("1", 64), map[string][]byte{kernel.ImageFile: kernelImg})
	idir := commit("initramfs-"+strings.Repeat("2", 64), map[string][]byte{initrdFile: initrd})
	stub := tinyStub(t)
	deb := debtest.Build("systemd-boot-efi", []debtest.Entry{{Name: "./" + stubPath, Body: string(stub)}})
	sum := sha256.Sum256(deb)
	in := lock.Input{Name: "systemd-boot-efi", Role: lock.RoleEFIStub, SHA256: hex.EncodeToString(sum[:])}
	if err := st.Put(context.Background(), bytes.NewReader(deb), in.SHA256); err != nil {
		t.Fatal(err)
	}
	// Deps outside the store (no MANIFEST: no sums to give) are hashed
	// instead, to the same files; the record then names no sections.
	plain := t.TempDir()
	os.CopyFS(filepath.Join(plain, "kernel"), os.DirFS(kdir))
	os.CopyFS(filepath.Join(plain, "initramfs"), os.DirFS(idir))
	for _, c := range []struct {
		formats []output.Kind
		deps    map[StageName]string
	}{
		{[]output.Kind{output.KindUKI, output.KindDisk, output.KindISO, output.KindPXE}, map[StageName]string{StageKernel: kdir, StageInitramfs: idir}},
		{[]output.Kind{output.KindDisk}, map[StageName]string{StageKernel: kdir, StageInitramfs: idir}},
		{[]output.Kind{output.KindUKI, output.KindDisk}, map[StageName]string{StageKernel: filepath.Join(plain, "kernel"), StageInitramfs: filepath.Join(plain, "initramfs")}},
	} {
		formats, inStore := c.formats, c.deps[StageKernel] == kdir
		t.Run(fmt.Sprint(formats, inStore), func(t *testing.T) {
			r := &recipe.Resolved{Recipe: recipe.Recipe{Name: "t", Kernel: recipe.Kernel{Cmdline: "console=ttyS0"},
				Outputs: recipe.Outputs{Formats: formats, DiskSize: 128 << 20}}, Digest: "sha256:" + strings.Repeat("d", 64)}
			out := filepath.Join(t.TempDir(), "out")
			os.MkdirAll(out, 0o755)
			var log bytes.Buffer
			sr := &stageRun{Name: StageImage, Recipe: r, Inputs: []lock.Input{in}, Deps: c.deps,
				Epoch: 1700000000, Store: st, Scratch: t.TempDir(), Out: out, Log: &log}
			if err := imageStage().Run(context.Background(), sr); err != nil {
				t.Fatal(err)
			}
			want := func(k output.Kind) bool { return slices.Contains(formats, k) }
			// The fresh files.
			u := image.UKI{Stub: stub, Kernel: kernelImg, Initrd: initrd, Cmdline: "console=ttyS0", OSRelease: string(generatedFiles(r)["etc/os-release"])}
			var uki bytes.Buffer
			if err := image.WriteUKI(&uki, u); err != nil {
				t.Fatal(err)
			}
			fresh := t.TempDir()
			d, err := image.StandardDisk(r.Digest, 128<<20, sr.Epoch, uki.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			writeFresh := func(name string, write func(*os.File) error) []byte {
				f, _ := os.Create(filepath.Join(fresh, name))
				defer f.Close()
				if err := write(f); err != nil {
					t.Fatal(err)
				}
				b, _ := os.ReadFile(f.Name())
				return b
			}
			files := map[string][]byte{
				ukiFile:  uki.Bytes(),
				diskFile: writeFresh(diskFile, func(f *os.File) error { return image.WriteDisk(f, d) }),
				isoFile:  writeFresh(isoFile, func(f *os.File) error { return image.WriteISO(f, image.StandardISO(r.Digest, sr.Epoch, uki.Bytes())) }),
			}
			for name, kind := range map[string]output.Kind{ukiFile: output.KindUKI, diskFile: output.KindDisk, isoFile: output.KindISO} {
				got, err := os.ReadFile(filepath.Join(out, name))
				switch {
				case !want(kind) && err == nil:
					t.Errorf("%s written, not asked for", name)
				case want(kind) && !bytes.Equal(got, files[name]):
					t.Errorf("%s: %d bytes (%v), not the %d of a fresh write", name, len(got), err, len(files[name]))
				}
			}
			for _, name := range []string{ukiFile, diskFile, isoFile, placementFile, filepath.Join(pxeDir, output.PXEScript)} {
				if info, err := os.Stat(filepath.Join(out, name)); err == nil && info.Mode().Perm() != readOnly {
					t.Errorf("%s: mode %v, want read-only", name, info.Mode())
				}
			}
			// PXE: the deps' own kernel and initrd, and a script naming their sums.
			script, err := os.ReadFile(filepath.Join(out, pxeDir, output.PXEScript))
			if want(output.KindPXE) != (err == nil) {
				t.Fatalf("boot.ipxe: %v, asked for: %v", err, want(output.KindPXE))
			}
			if want(output.KindPXE) {
				for _, sum := range []string{sha256Hex(kernelImg), sha256Hex(initrd)} {
					if !bytes.Contains(script, []byte(sum)) {
						t.Errorf("boot.ipxe does not name %s:\n%s", sum, script)
					}
				}
				for dep, name := range map[string]string{filepath.Join(kdir, kernel.ImageFile): output.PXEKernel, filepath.Join(idir, initrdFile): initrdFile} {
					var a, b unix.Stat_t
					if unix.Stat(dep, &a) != nil || unix.Stat(filepath.Join(out, pxeDir, name), &b) != nil || a.Ino != b.Ino {
						t.Errorf("pxe/%s is not the dep's own file %s", name, dep)
					}
				}
			}
			p := readPlacement(out)
			if p == nil || p.UKISize != int64(uki.Len()) {
				t.Fatalf("placement record %+v, want the UKI's size %d", p, uki.Len())
			}
			if at, ok := p.Placed[diskFile]; !ok || !bytes.Equal(files[diskFile][at:at+int64(uki.Len())], uki.Bytes()) {
				t.Errorf("the record places the disk's UKI at %d (%v): not the UKI's bytes", at, ok)
			}
			if at, ok := p.Placed[isoFile]; ok != want(output.KindISO) || (ok && !bytes.Equal(files[isoFile][at:at+int64(uki.Len())], uki.Bytes())) {
				t.Errorf("the record places the ISO's UKI at %d (%v): not the UKI's bytes, or no ISO", at, ok)
			}
			if inStore && (p.Sections[".linux"].SHA256 != sha256Hex(kernelImg) || p.Sections[".initrd"].SHA256 != sha256Hex(initrd)) {
				t.Errorf("sections %+v: want the store's sums of the kernel and the initrd", p.Sections)
			}
			if !inStore && len(p.Sections) != 0 {
				t.Errorf("sections %+v recorded without the store's sums", p.Sections)
			}
		})
	}
}

// The files the config layer writes from the recipe: os-release naming the
// recipe, its digest's first 12 hex digits and the driver; the recipe's env
// as shell exports, sorted, a value quoted unless it is plain (so a shell
// reads back exactly the value); driver.params as modprobe options, sorted,
// the module's dashes as underscores.
func TestGeneratedFiles(t *testing.T) {
	r := &recipe.Resolved{Recipe: recipe.Recipe{Name: "gpu",
		Driver: recipe.Driver{Version: "550.54.15", Params: map[string]map[string]string{
			"nvidia-drm": {"modeset": "1", "fbdev": "1"}, "nvidia": {"NVreg_EnableGpuFirmware": "0"}}},
		Env: map[string]string{"NCCL_P2P_LEVEL": "NVL", "QUOTED": "a b'c", "EMPTY": "", "PATHS": "/a:/b,c=d.e_f-g"}},
		Digest: "sha256:0123456789abcdef" + strings.Repeat("0", 48)}
	files := generatedFiles(r)
	for name, want := range map[string]string{
		"etc/os-release": "NAME=\"peerboot\"\nID=peerboot\nPRETTY_NAME=\"peerboot gpu (nvidia-open 550.54.15)\"\nIMAGE_ID=gpu\nIMAGE_VERSION=0123456789ab\nVERSION_ID=550.54.15\n",
		"etc/profile.d/peerboot-env.sh": "# From the recipe's [env]: NCCL and friends for every shell and the self-test.\n" +
			"export EMPTY=''\nexport NCCL_P2P_LEVEL=NVL\nexport PATHS=/a:/b,c=d.e_f-g\nexport QUOTED='a b'\\''c'\n",
		"etc/modprobe.d/peerboot.conf": "# From the recipe's [driver.params].\noptions nvidia NVreg_EnableGpuFirmware=0\noptions nvidia_drm fbdev=1 modeset=1\n",
	} {
		if got := string(files[name]); got != want {
			t.Errorf("%s:\n%s\nwant:\n%s", name, got, want)
		}
	}
	if len(files) != 4 {
		t.Errorf("%d files, want os-release, the env, modprobe.d and the recipe", len(files))
	}
}

// mapFile maps an empty file as nil (mmap refuses a length of 0): an
// initrd or kernel file of no bytes is read as empty, not an error.
func TestMapFileEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(path, nil, 0o644)
	b, unmap, err := mapFile(path)
	if err != nil || b != nil {
		t.Fatalf("mapFile of an empty file: %d bytes, %v", len(b), err)
	}
	unmap()
}

// A stub hint holding no stub, with the sum of nothing as its first line, is
// no stub: efiStub unpacks the package instead of giving an empty stub.
func TestEmptyStubHintIsNone(t *testing.T) {
	hint := filepath.Join(t.TempDir(), "hint")
	empty := sha256.Sum256(nil)
	os.WriteFile(hint, []byte(hex.EncodeToString(empty[:])+"\n"), 0o644)
	if b, ok := readStubHint(hint); ok {
		t.Fatalf("an empty hint read as a stub of %d bytes", len(b))
	}
}

// With sign.pcr_key the image stage signs the UKI's PCR 11 policies: the
// UKI it writes checks as signed, and the disk holds that UKI.
func TestImageStageSignsPCR11(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	commit := func(key string, name string, b []byte) string {
		t.Helper()
		dir, _ := st.NewScratch("t")
		os.WriteFile(filepath.Join(dir, name), b, 0o444)
		if err := st.CommitOutput(key, dir); err != nil {
			t.Fatal(err)
		}
		return st.OutputDir(key)
	}
	kdir := commit("kernel-"+strings.Repeat("1", 64), kernel.ImageFile, append(tinyStub(t), []byte("kernel code")...))
	idir := commit("initramfs-"+strings.Repeat("2", 64), initrdFile, bytes.Repeat([]byte("an initrd\n"), 5000))
	deb := debtest.Build("systemd-boot-efi", []debtest.Entry{{Name: "./" + stubPath, Body: string(tinyStub(t))}})
	sum := sha256.Sum256(deb)
	in := lock.Input{Name: "systemd-boot-efi", Role: lock.RoleEFIStub, SHA256: hex.EncodeToString(sum[:])}
	if err := st.Put(context.Background(), bytes.NewReader(deb), in.SHA256); err != nil {
		t.Fatal(err)
	}
	r := &recipe.Resolved{Recipe: recipe.Recipe{Name: "t", Kernel: recipe.Kernel{Cmdline: "console=ttyS0"},
		Outputs: recipe.Outputs{Formats: []output.Kind{output.KindUKI, output.KindDisk}, DiskSize: 128 << 20}}, Digest: "sha256:" + strings.Repeat("d", 64)}
	out := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(out, 0o755)
	sr := &stageRun{Name: StageImage, Recipe: r, Inputs: []lock.Input{in}, Deps: map[StageName]string{StageKernel: kdir, StageInitramfs: idir},
		Data: []Datum{{Name: pcrKeyDatum, Bytes: []byte(testRSAKey(t))}}, Epoch: 1700000000, Store: st, Scratch: t.TempDir(), Out: out, Log: io.Discard}
	if err := imageStage().Run(context.Background(), sr); err != nil {
		t.Fatal(err)
	}
	uki, err := os.ReadFile(filepath.Join(out, ukiFile))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := measure.Check(uki); err != nil || !res.Signed {
		t.Fatalf("the UKI's PCR 11 policies: %+v, %v; want signed", res, err)
	}
	disk, _ := os.ReadFile(filepath.Join(out, diskFile))
	if p := readPlacement(out); p == nil || !bytes.Equal(disk[p.Placed[diskFile]:p.Placed[diskFile]+int64(len(uki))], uki) {
		t.Fatal("the disk does not hold the signed UKI where the record says")
	}
}
