package build

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/debfile"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/clonewrite"
	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/sign/keyref"
)

// Stage output layouts read by later stages.
const (
	initrdFile = output.InitrdFile
	ukiFile    = output.UKIFile
	diskFile   = output.DiskFile
	isoFile    = output.ISOFile
	pxeDir     = output.PXEDir
	stubPath   = "usr/lib/systemd/boot/efi/linuxx64.efi.stub"
)

// initrdLayers are the layer stages whose segments make the initrd, in the
// order the kernel unpacks them (a later file replaces an earlier one). The
// config segment, what an overlay edit changes, is last: the initrd's head
// stays as it was, and so does the UKI's up to the initrd's tail.
var initrdLayers = []StageName{StageUserspace, StageModules, StageTools, StageConfig}

// 7. Initramfs: the layers' segments, concatenated. The kernel unpacks
// concatenated compressed cpio archives in turn (Documentation/driver-api/
// early-userspace/buffer-format.rst), so each segment is packed once, by its
// layer, and an overlay edit re-packs only the config segment.
func initramfsStage() *stage {
	return &stage{
		Name: StageInitramfs, Version: 6, // 2: one segment per layer; 3: initrd.img read-only; 4: the tools segment before config; 5: NUL-padded to whole MiB; 6: segments.json
		Deps: initrdLayers,
		Run: func(ctx context.Context, sr *stageRun) error {
			// A clone of the previous initrd, into which only the segments
			// that changed are written (an overlay edit: config, last); the
			// others are carried unread where segments.json says the previous
			// one held the same segment at the same offset.
			var base string
			if sr.Base != "" {
				base = filepath.Join(sr.Base, initrdFile)
			}
			out, err := clonewrite.Create(filepath.Join(sr.Out, initrdFile), base, 0o644)
			if err != nil {
				return err
			}
			segs, err := writeInitrd(sr, out)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			b, err := json.Marshal(segs)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(sr.Out, segmentsFile), append(b, '\n'), readOnly); err != nil {
				return err
			}
			// Read-only: published out/ files are hard links to it (pxe/initrd.img).
			return os.Chmod(filepath.Join(sr.Out, initrdFile), readOnly)
		},
	}
}

// writeInitrd writes the layers' segments into out, one after the other,
// carrying those the previous initrd (sr.Base) held alike, and pads it.
func writeInitrd(sr *stageRun, out *clonewrite.File) ([]segment, error) {
	prev := readSegments(sr.Base)
	var segs []segment
	var total int64
	carried := 0
	for i, l := range initrdLayers {
		path := filepath.Join(sr.Dep(l), layerSegment)
		info, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		seg := segment{Layer: string(l), SHA256: sr.depSum(l, layerSegment), At: total, Size: info.Size()}
		ok, err := writeSegment(out, path, seg, i < len(prev) && seg.SHA256 != "" && prev[i] == seg)
		if err != nil {
			return nil, err
		}
		if ok {
			carried++
		}
		segs = append(segs, seg)
		total += seg.Size
	}
	// Padded with NULs to whole MiB (a hole: it reads as zeros), which the
	// kernel skips after the last archive (init/initramfs.c, unpack_to_rootfs,
	// lines 530-535 of linux-source-6.1: `if (!*buf) { buf++; len--;
	// this_header++; continue; }`). So an edit that keeps the initrd within its
	// MiB keeps its size, and the UKI's .initrd VirtualSize (what the stub
	// measures) with it: the UKI's and the ISO's headers stay as they were,
	// and their hashes resume at the initrd's tail.
	padded := (total + image.InitrdRawAlign - 1) / image.InitrdRawAlign * image.InitrdRawAlign
	if err := out.Truncate(padded); err != nil {
		return nil, err
	}
	var note string
	if carried > 0 {
		note = fmt.Sprintf(" (%d carried from the previous build)", carried)
	}
	fmt.Fprintf(sr.Log, "initramfs: %d segments, %.1f MiB, padded to %d MiB%s\n", len(initrdLayers), float64(total)/(1<<20), padded>>20, note)
	return segs, nil
}

// segmentsFile lists, in the initramfs output, the layer segments initrd.img
// is made of (JSON: layer, sha256, offset, size), for the next build to carry
// the unchanged ones and for the image stage to know how much of two initrds
// is the same.
const segmentsFile = "segments.json"

type segment struct {
	Layer  string `json:"layer"`
	SHA256 string `json:"sha256"`
	At     int64  `json:"at"`
	Size   int64  `json:"size"`
}

// readSegments is dir's segments.json; nil when dir is "" or has none to trust.
func readSegments(dir string) []segment {
	if dir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, segmentsFile))
	if err != nil {
		return nil
	}
	var segs []segment
	if json.Unmarshal(b, &segs) != nil {
		return nil
	}
	return segs
}

// sameSegments is how many bytes from the start two segment lists share:
// the segments both list alike, from the first on.
func sameSegments(a, b []segment) int64 {
	var n int64
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] || a[i].SHA256 == "" {
			break
		}
		n = a[i].At + a[i].Size
	}
	return n
}

// writeSegment writes the segment file at path into out at seg.At; carried,
// it takes the clone's bytes there as they are (the previous initrd held this
// segment there).
func writeSegment(out *clonewrite.File, path string, seg segment, carry bool) (carried bool, err error) {
	if carry {
		if written, err := out.Assume(seg.At, seg.At+seg.Size); err == nil && len(written) == 0 {
			return true, nil
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return false, out.CopyFrom(f, seg.At)
}

// 8. Image: UKI, GPT disk, ISO and PXE bundle, as the recipe's outputs ask.
// It sees the whole recipe: the disk's GUIDs and the FAT volume ids derive
// from the recipe digest.
func imageStage() *stage {
	return &stage{
		Name: StageImage, Version: 7, // 2: layout from image.StandardDisk; 3: the iso format; 4: files read-only; 5: .initrd padded to whole MiB, FAT files from the top; 6: UKI CheckSum 0; 7: uki-placement.json
		Deps:       []StageName{StageKernel, StageInitramfs},
		Reads:      map[StageName][]string{StageKernel: {kernel.ImageFile}},
		Roles:      []string{lock.RoleEFIStub},
		Fields:     []string{wholeRecipe},
		DataFields: []string{"sign.pcr_key"},
		Clock:      clockAll,
		Data: func(pc *planContext) ([]Datum, []string, error) {
			b, err := pcrKey(pc.Recipe)
			if err != nil || b == nil {
				return nil, nil, err
			}
			return []Datum{{Name: pcrKeyDatum, Bytes: b}}, nil, nil
		},
		Run: func(ctx context.Context, sr *stageRun) error {
			r := sr.Recipe
			// The kernel and the initrd are immutable store files: mapped, not
			// read into memory (the initrd carries the whole userspace).
			kernelPath, initrdPath := filepath.Join(sr.Dep(StageKernel), kernel.ImageFile), filepath.Join(sr.Dep(StageInitramfs), initrdFile)
			kernelImg, unmapK, err := mapFile(kernelPath)
			if err != nil {
				return err
			}
			defer unmapK()
			initrd, unmapI, err := mapFile(initrdPath)
			if err != nil {
				return err
			}
			defer unmapI()
			stub, err := efiStub(sr)
			if err != nil {
				return err
			}
			osRelease := generatedFiles(r)["etc/os-release"]
			u := image.UKI{Stub: stub, Kernel: kernelImg, Initrd: initrd, Cmdline: r.Kernel.Cmdline, OSRelease: string(osRelease)}
			var key crypto.Signer
			if kb, ok := sr.Datum(pcrKeyDatum); ok {
				if key, err = pcrSigner(kb); err != nil {
					return err
				}
			}
			want := func(k output.Kind) bool { return slices.Contains(r.Outputs.Formats, k) }
			// The UKI is written straight to its file (beside the output when
			// the recipe does not ask for it), then mapped for the disk and ISO.
			ukiPath := filepath.Join(sr.Out, ukiFile)
			if !want(output.KindUKI) {
				ukiPath = filepath.Join(sr.Scratch, ukiFile)
			}
			// The sums the store recorded for the kernel and the initrd: the
			// record's identities, PCR 11's .initrd digest, boot.ipxe's sums.
			kernelSum, initrdSum := sr.depSum(StageKernel, kernel.ImageFile), sr.depSum(StageInitramfs, initrdFile)
			var known measure.Known // the .initrd's digest, from the store
			if sum, err := hex.DecodeString(initrdSum); err == nil && len(sum) == sha256.Size {
				known = knownInitrd(initrd, [32]byte(sum))
			}
			ow := &outWriter{base: sr.Base, log: sr.Log, initrdSegs: readSegments(sr.Dep(StageInitramfs)), kernelSum: kernelSum, initrdSum: initrdSum}
			if err := writeMeasuredUKI(ukiPath, u, key, known, ow); err != nil {
				return err
			}
			uki, unmapU, err := mapFile(ukiPath)
			if err != nil {
				return err
			}
			defer unmapU()
			// Where the disk and the ISO cannot clone, the kernel copies the UKI
			// into them from this file (copy_file_range), not through the map.
			if ow.ukiFile, err = os.Open(ukiPath); err != nil {
				return err
			}
			defer ow.ukiFile.Close()
			if want(output.KindDisk) {
				d, err := image.StandardDisk(r.Digest, int64(r.Outputs.DiskSize), sr.Epoch, uki)
				if err != nil {
					return fmt.Errorf("outputs.disk_size %s: %w", r.Outputs.DiskSize, err)
				}
				if err := ow.write(filepath.Join(sr.Out, diskFile), diskFile, func(f *clonewrite.File) error { return image.WriteDisk(ow.carry(f, diskFile, uki), d) }); err != nil {
					return fmt.Errorf("disk: %w", err)
				}
			}
			if want(output.KindISO) {
				iso := image.StandardISO(r.Digest, sr.Epoch, uki)
				if err := ow.write(filepath.Join(sr.Out, isoFile), isoFile, func(f *clonewrite.File) error { return image.WriteISO(ow.carry(f, isoFile, uki), iso) }); err != nil {
					return fmt.Errorf("ISO: %w", err)
				}
			}
			if want(output.KindPXE) {
				// boot.ipxe names the sums the store recorded: no second hash.
				px := image.PXE{Kernel: kernelImg, Initrd: initrd, Cmdline: r.Kernel.Cmdline, BurnIn: r.Selftest.Soak.Menu.Std()}
				px.KernelSHA256, px.InitrdSHA256 = kernelSum, initrdSum
				if err := image.LinkPXE(filepath.Join(sr.Out, pxeDir), px, kernelPath, initrdPath); err != nil {
					return fmt.Errorf("PXE bundle: %w", err)
				}
			}
			// What it wrote is read-only: publish hard-links it into out/, and a
			// tool pointed there must not write through into the store. (The PXE
			// kernel and initrd are the deps' own inodes: not touched.)
			if err := ow.writePlacement(filepath.Join(sr.Out, placementFile), len(uki)); err != nil {
				return err
			}
			for _, p := range []string{ukiFile, diskFile, isoFile, placementFile, filepath.Join(pxeDir, output.PXEScript)} {
				if err := os.Chmod(filepath.Join(sr.Out, p), readOnly); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
			return nil
		},
	}
}

// depSum is the sha256 the store recorded for file of dep's output; "" when
// it has none to give (the caller then hashes).
func (sr *stageRun) depSum(dep StageName, file string) string {
	sum, err := sr.Store.OutputSum(filepath.Base(sr.Dep(dep)), file)
	if err != nil {
		return ""
	}
	return sum
}

// mapFile maps path read-only; unmap releases it. An empty file is nil.
func mapFile(path string) (b []byte, unmap func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if info.Size() == 0 {
		return nil, func() {}, nil
	}
	b, err = unix.Mmap(int(f.Fd()), 0, int(info.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	return b, func() { unix.Munmap(b) }, nil
}

const pcrKeyDatum = "PCR policy signing key"

// readOnly is the mode of the files the initramfs and image stages write.
const readOnly = 0o444

// pcrKey reads sign.pcr_key (a relative path from the recipe's directory);
// nil when the recipe has none.
func pcrKey(r *recipe.Resolved) ([]byte, error) {
	if r.Sign.PCRKey == "" {
		return nil, nil
	}
	b, _, err := keyref.Read(keyref.Resolve(r.Sign.PCRKey, filepath.Dir(r.Path)))
	if err != nil {
		return nil, exitcode.Tag(exitcode.Recipe, r.ErrorAt("sign.pcr_key", "%v", err))
	}
	if _, err := pcrSigner(b); err != nil {
		return nil, exitcode.Tag(exitcode.Recipe, r.ErrorAt("sign.pcr_key", "%v", err))
	}
	return b, nil
}

func pcrSigner(b []byte) (crypto.Signer, error) {
	key, err := keyref.ParsePrivateKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("sign.pcr_key: %w", err)
	}
	if _, err := measure.SignerKey(key); err != nil {
		return nil, fmt.Errorf("sign.pcr_key: %w", err)
	}
	return key, nil
}

// writeMeasuredUKI writes the UKI to path; with a PCR key it adds .pcrpkey,
// predicts PCR 11 from the UKI so written (the stub never measures .pcrsig,
// so adding it changes no measured byte), and writes it again with the signed
// predictions as .pcrsig. RSA PKCS#1 v1.5 signing is deterministic: the output
// stays reproducible. known (may be nil) gives section digests the
// predictions need not hash (knownInitrd). ow (nil: a fresh file) writes it.
func writeMeasuredUKI(path string, u image.UKI, key crypto.Signer, known measure.Known, ow *outWriter) error {
	// write writes the UKI and returns what measure may take as known: the
	// loaded digests of the sections the image stage placed (the kernel's
	// and the initrd's), else known.
	write := func() (measure.Known, error) {
		err := ow.write(path, ukiFile, func(f *clonewrite.File) error {
			w := ow.sectionWriter(f, u)
			if err := image.WriteUKI(w, u); err != nil {
				return err
			}
			return w.flush()
		})
		if err != nil {
			return nil, fmt.Errorf("UKI: %w", err)
		}
		b, unmap, err := mapFile(path)
		if err != nil {
			return nil, err
		}
		defer unmap()
		if err := ow.measureSections(b, u); err != nil {
			return nil, err
		}
		return eitherKnown(ow.placedKnown(), known), nil
	}
	if key == nil {
		_, err := write()
		return err
	}
	pk, err := measure.PublicKeyPEM(key.Public().(*rsa.PublicKey))
	if err != nil {
		return fmt.Errorf("sign.pcr_key: %w", err)
	}
	u.PCRPKey = pk
	k, err := write()
	if err != nil {
		return err
	}
	b, unmap, err := mapFile(path)
	if err != nil {
		return err
	}
	p, err := measure.PredictKnown(b, k)
	unmap()
	if err != nil {
		return fmt.Errorf("UKI: predicting PCR 11: %w", err)
	}
	if u.PCRSig, err = measure.Sign(p, key); err != nil {
		return fmt.Errorf("UKI: %w", err)
	}
	if k, err = write(); err != nil {
		return err
	}
	if b, unmap, err = mapFile(path); err != nil {
		return err
	}
	defer unmap()
	if _, err := measure.CheckKnown(b, k); err != nil {
		return fmt.Errorf("UKI: the signed PCR 11 policies do not check: %w", err)
	}
	return nil
}

// eitherKnown asks a, then b (either may be nil).
func eitherKnown(a, b measure.Known) measure.Known {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	return func(name string, s measure.PESection, file []byte) ([32]byte, bool) {
		if sum, ok := a(name, s, file); ok {
			return sum, true
		}
		return b(name, s, file)
	}
}

// outWriter writes the image stage's files. Each starts as a reflink clone of
// the same file in base (the stage's previous output; "" for none), so only
// the blocks that changed are written and later fsynced: a one-line overlay
// edit changes a few MiB of the UKI, disk and ISO. Where the store's
// filesystem cannot clone (ext4), the file is written whole, said once.
type outWriter struct {
	base string
	log  io.Writer
	said bool

	ukiChanged []clonewrite.Span // where the UKI may differ from base's; nil: unknown

	// What the UKI's .linux and .initrd are (store sums, the initrd's
	// segments), for sectionWriter; sections is where it put them.
	kernelSum, initrdSum string
	initrdSegs           []segment
	sections             map[string]sectionPlace
	sectionsCarried      int64
	placed               map[string]int64 // where each file holds the UKI (carried.at)
	carried              []*carried
	ukiFile              *os.File // the UKI the disk and ISO hold, for carried.src

	prev     *placement // base's record, read once (previous)
	prevRead bool
}

// previous is base's placement record, read on first use; nil for none.
func (o *outWriter) previous() *placement {
	if !o.prevRead {
		o.prev, o.prevRead = readPlacement(o.base), true
	}
	return o.prev
}

// write creates path (rel in the output) and has fill write it.
func (o *outWriter) write(path, rel string, fill func(*clonewrite.File) error) error {
	var base string
	if o != nil && o.base != "" {
		base = filepath.Join(o.base, rel)
	}
	f, err := clonewrite.Create(path, base, 0o644)
	if err != nil {
		return err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rel == ukiFile && o != nil {
		o.ukiChanged = nil
		if changed, ok := f.Changed(); ok && err == nil {
			o.ukiChanged = append([]clonewrite.Span{}, changed...) // non-nil: known
		}
	}
	var carriedBytes int64
	for _, c := range o.carriedBy(f) {
		if c.at >= 0 && err == nil {
			o.placed[rel] = c.at
		}
		carriedBytes += c.carriedBytes
	}
	if err != nil || o == nil || o.log == nil || base == "" {
		return err
	}
	switch {
	case f.Cloned():
		carried := ""
		if rel == ukiFile && o.sectionsCarried > 0 {
			carried = fmt.Sprintf(" (%s of the kernel and initrd carried unread)", sizeText(o.sectionsCarried))
		}
		if carriedBytes > 0 {
			carried = fmt.Sprintf(" (the UKI's other %s carried unread)", sizeText(carriedBytes))
		}
		fmt.Fprintf(o.log, "image: %s cloned from the previous build, %s of %.1f MiB written%s\n", rel, sizeText(f.Written()), float64(f.Size())/(1<<20), carried)
	case !o.said:
		o.said = true
		fmt.Fprintf(o.log, "image: writing whole files: %s (a store on XFS or btrfs clones the previous build and writes only what changed)\n", f.Reason())
	}
	return nil
}

// placementFile records where the image stage's disk and ISO hold the UKI,
// byte for byte (JSON: the UKI's size, and the offset in each file): the next
// build, finding the UKI at the same offset, writes only the UKI's changed
// bytes there and never reads the rest (carried).
const placementFile = "uki-placement.json"

type placement struct {
	UKISize  int64                   `json:"uki_size"`
	Placed   map[string]int64        `json:"placed"`
	Sections map[string]sectionPlace `json:"sections,omitempty"` // the UKI's big sections, by name
}

// sectionPlace is where the UKI holds a section's bytes (At, Size) and what
// they are: a store file's sha256, and for the initrd, its segments.
type sectionPlace struct {
	At       int64     `json:"at"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	Segments []segment `json:"segments,omitempty"`
	// The section's VirtualSize and the sha256 of its loaded bytes (the data
	// zero-filled to VirtualSize): what the stub measures into PCR 11.
	VirtualSize int64  `json:"virtual_size,omitempty"`
	Loaded      string `json:"loaded_sha256,omitempty"`
}

// measureSections completes o.sections from the written UKI's headers: each
// section's VirtualSize and the sha256 of its loaded bytes. The .initrd's is
// the initrd file's own sum (the section is exactly the file); the .linux's
// is the kernel zero-filled to its VirtualSize, taken from base's record for
// the same kernel or hashed from the kernel (not from the fresh UKI).
func (o *outWriter) measureSections(uki []byte, u image.UKI) error {
	if o == nil || len(o.sections) == 0 {
		return nil
	}
	img, err := measure.ParsePE(uki)
	if err != nil {
		return fmt.Errorf("UKI: %w", err)
	}
	var prev map[string]sectionPlace
	if p := o.previous(); p != nil {
		prev = p.Sections
	}
	for name, sp := range o.sections {
		var s measure.PESection
		for _, c := range img.Sections {
			if c.NameString() == name {
				s = c
			}
		}
		if int64(s.PointerToRaw) != sp.At || int64(s.VirtualSize) < sp.Size || sp.SHA256 == "" {
			delete(o.sections, name) // not the bytes sectionWriter saw there: left to be hashed
			continue
		}
		sp.VirtualSize = int64(s.VirtualSize)
		old, ok := prev[name]
		switch {
		case sp.VirtualSize == sp.Size:
			sp.Loaded = sp.SHA256
		case ok && old.SHA256 == sp.SHA256 && old.Size == sp.Size && old.VirtualSize == sp.VirtualSize && old.Loaded != "":
			sp.Loaded = old.Loaded
		case name == ".linux":
			sum := measure.LoadedSum(u.Kernel, s.VirtualSize)
			sp.Loaded = hex.EncodeToString(sum[:])
		}
		o.sections[name] = sp
	}
	return nil
}

// placedKnown is placedKnown of the sections o placed; nil without.
func (o *outWriter) placedKnown() measure.Known {
	if o == nil {
		return nil
	}
	return placedKnown(&placement{Sections: o.sections})
}

// placedKnown answers measure with the loaded digests of p's sections, for a
// section header that places the section where p says: the image stage wrote
// those bytes there, and the record is in the same output as the UKI.
func placedKnown(p *placement) measure.Known {
	if p == nil || len(p.Sections) == 0 {
		return nil
	}
	return func(name string, s measure.PESection, _ []byte) ([32]byte, bool) {
		sp, ok := p.Sections[name]
		if !ok || sp.Loaded == "" || int64(s.PointerToRaw) != sp.At || int64(s.VirtualSize) != sp.VirtualSize {
			return [32]byte{}, false
		}
		b, err := hex.DecodeString(sp.Loaded)
		if err != nil || len(b) != sha256.Size {
			return [32]byte{}, false
		}
		return [32]byte(b), true
	}
}

// readPlacement is base's placement record; nil when there is none to trust.
func readPlacement(base string) *placement {
	if base == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(base, placementFile))
	if err != nil {
		return nil
	}
	var p placement
	if json.Unmarshal(b, &p) != nil || p.UKISize <= 0 {
		return nil
	}
	return &p
}

func (o *outWriter) writePlacement(path string, ukiSize int) error {
	p := placement{UKISize: int64(ukiSize), Placed: o.placed, Sections: o.sections}
	if p.Placed == nil {
		p.Placed = map[string]int64{}
	}
	b, err := json.Marshal(p) // map keys sorted: the same bytes for the same placement
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// carry wraps f (rel in the output, a file that holds uki) so that the UKI's
// bytes, written at the offset where base's file held base's UKI, are taken
// from the clone except where the UKI changed (outWriter.ukiChanged).
func (o *outWriter) carry(f *clonewrite.File, rel string, uki []byte) image.Target {
	c := &carried{File: f, uki: uki, baseAt: -1, at: -1}
	if o == nil {
		return c
	}
	c.src = o.ukiFile
	if o.placed == nil {
		o.placed = map[string]int64{}
	}
	o.carried = append(o.carried, c)
	if p := o.previous(); p != nil && o.ukiChanged != nil && f.Cloned() && p.UKISize == int64(len(uki)) {
		if at, ok := p.Placed[rel]; ok {
			c.baseAt, c.changed = at, o.ukiChanged
		}
	}
	return c
}

func (o *outWriter) carriedBy(f *clonewrite.File) []*carried {
	var out []*carried
	if o == nil {
		return nil
	}
	for _, c := range o.carried {
		if c.File == f {
			out = append(out, c)
		}
	}
	return out
}

// sectionWriter is the writer WriteUKI writes u into f through: the
// headers and paddings, written apart, are buffered; the kernel's and the
// initrd's bytes (the very slices u holds) go to f as they are, and where
// the previous UKI (base's record) held the same bytes at the same offset
// they are carried: the kernel whole when it is the same, the initrd up to
// the end of the segments both share (an overlay edit: all but config).
func (o *outWriter) sectionWriter(f *clonewrite.File, u image.UKI) *sectionWriter {
	w := &sectionWriter{f: f, u: u, o: o}
	if o != nil {
		o.sections, o.sectionsCarried = map[string]sectionPlace{}, 0
		if p := o.previous(); p != nil && f.Cloned() {
			w.prev = p.Sections
		}
	}
	return w
}

type sectionWriter struct {
	f    *clonewrite.File
	u    image.UKI
	o    *outWriter
	prev map[string]sectionPlace
	off  int64  // where the next byte goes
	buf  []byte // pending bytes, ending at off
}

func (w *sectionWriter) Write(p []byte) (int, error) {
	name, place := w.section(p)
	if name == "" {
		if len(w.buf)+len(p) > 1<<20 {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
		w.buf = append(w.buf, p...)
		w.off += int64(len(p))
		return len(p), nil
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	place.At, place.Size = w.off, int64(len(p))
	w.o.sections[name] = place
	// Carried: the bytes both UKIs hold alike, from the section's start.
	var same int64
	if prev, ok := w.prev[name]; ok && prev.At == place.At && prev.Size == place.Size && place.SHA256 != "" {
		if prev.SHA256 == place.SHA256 {
			same = place.Size
		} else if name == ".initrd" {
			same = min(sameSegments(prev.Segments, place.Segments), place.Size)
		}
	}
	if same > 0 {
		written, err := w.f.Assume(w.off, w.off+same)
		if err != nil {
			same = 0
		} else {
			w.o.sectionsCarried += same
		}
		for _, s := range written {
			if _, err := w.f.WriteAt(p[s.From-w.off:s.To-w.off], s.From); err != nil {
				return 0, err
			}
			w.o.sectionsCarried -= s.To - s.From
		}
	}
	if _, err := w.f.WriteAt(p[same:], w.off+same); err != nil {
		return 0, err
	}
	w.off += int64(len(p))
	return len(p), nil
}

// section names the UKI section whose bytes p is (the slice itself, as
// WriteUKI hands it over) and what the record says of it; "" for any other.
func (w *sectionWriter) section(p []byte) (string, sectionPlace) {
	if w.o == nil || len(p) == 0 {
		return "", sectionPlace{}
	}
	switch {
	case len(p) == len(w.u.Kernel) && &p[0] == &w.u.Kernel[0]:
		return ".linux", sectionPlace{SHA256: w.o.kernelSum}
	case len(p) == len(w.u.Initrd) && &p[0] == &w.u.Initrd[0]:
		return ".initrd", sectionPlace{SHA256: w.o.initrdSum, Segments: w.o.initrdSegs}
	}
	return "", sectionPlace{}
}

func (w *sectionWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.f.WriteAt(w.buf, w.off-int64(len(w.buf)))
	w.buf = w.buf[:0]
	return err
}

// carried is a clonewrite.File that recognises the write of the UKI (the very
// slice it was given: the FAT writer hands each file's bytes over whole) and
// records where it went. When that is where base's file held base's UKI, it
// takes the clone's bytes there as they are, writing only the ranges in
// which the UKI differs from base's: the disk and the ISO never read the
// ~83 MiB of a freshly cloned UKI that did not change.
type carried struct {
	*clonewrite.File
	uki     []byte
	changed []clonewrite.Span // where the UKI may differ from base's; used only with baseAt
	baseAt  int64             // where base's file held base's UKI; -1: not known
	at      int64             // where this one got it; -1: not written whole
	src     *os.File          // the UKI's file, copied from when f is not a clone; nil: written

	carriedBytes int64 // the UKI's bytes taken from the clone unread
}

func (c *carried) WriteAt(p []byte, off int64) (int, error) {
	if len(p) == 0 || len(p) != len(c.uki) || &p[0] != &c.uki[0] {
		return c.File.WriteAt(p, off)
	}
	c.at = off
	if !c.File.Cloned() && c.src != nil {
		if err := c.File.CopyFrom(c.src, off); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if c.baseAt != off {
		return c.File.WriteAt(p, off)
	}
	written, err := c.File.Assume(off, off+int64(len(p)))
	if err != nil {
		return c.File.WriteAt(p, off)
	}
	// Written over already (the FAT's last byte, which sizes the volume):
	// those bytes are the UKI's to write again.
	c.carriedBytes = int64(len(p))
	for _, w := range written {
		if _, err := c.File.WriteAt(p[w.From-off:w.To-off], w.From); err != nil {
			return 0, err
		}
		c.carriedBytes -= w.To - w.From
	}
	for _, s := range c.changed {
		from, to := s.From, min(s.To, int64(len(p)))
		if from >= to {
			continue
		}
		if _, err := c.File.WriteAt(p[from:to], off+from); err != nil {
			return 0, err
		}
		c.carriedBytes -= to - from
	}
	return len(p), nil
}

// sizeText is n in bytes below a KiB, in KiB below a MiB (an overlay edit
// rewrites KiBs), else in MiB.
func sizeText(n int64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// efiStub reads systemd's EFI stub out of the pinned systemd-boot-efi package.
// The stub is kept in a store hint named by the package's digest (the stub's
// own sha256 first, so a damaged hint is read as none): unpacking it from the
// .deb's xz data was a tenth of an overlay edit's image stage.
func efiStub(sr *stageRun) ([]byte, error) {
	for _, in := range sr.Inputs {
		if in.Role != lock.RoleEFIStub {
			continue
		}
		hint := sr.Store.HintPath("efi-stub-" + in.SHA256)
		if stub, ok := readStubHint(hint); ok {
			return stub, nil
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
		sum := sha256.Sum256(stub)
		// A hint: a store that cannot take it unpacks the stub next time too.
		_ = os.MkdirAll(filepath.Dir(hint), 0o755)
		_ = fsutil.WriteAtomic(hint, 0o644, func(f *os.File) error {
			if _, err := fmt.Fprintf(f, "%x\n", sum); err != nil {
				return err
			}
			_, err := f.Write(stub)
			return err
		})
		return stub, nil
	}
	return nil, fmt.Errorf("no pinned EFI stub (outputs.efi_stub)")
}

// readStubHint reads efiStub's hint: the stub, if its first line is the
// sha256 of the rest.
func readStubHint(path string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	head, stub, ok := bytes.Cut(b, []byte("\n"))
	sum := sha256.Sum256(stub)
	return stub, ok && len(stub) > 0 && string(head) == hex.EncodeToString(sum[:])
}

// generatedFiles are the image files written from the recipe.
func generatedFiles(r *recipe.Resolved) map[string][]byte {
	files := map[string][]byte{bootproto.InImage(bootproto.RecipePath): r.Canonical()}
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
