package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/store"
)

// Publish puts the image stage's output at outRoot/<recipe>/ with manifest.json
// and SHA256SUMS. The output files are hard links to the store's (the store's
// outputs are immutable and out/ shares their inodes), a copy only
// where out/ lies on another filesystem; only what publish writes (the two
// lists, any copy, the directories) is fsynced: a linked file is already on
// disk, the store synced it at commit. The directory is replaced atomically
// (renameat2 RENAME_EXCHANGE), so a failed or killed build leaves the previous
// good output whole.
func Publish(ctx context.Context, p *Plan, st *store.Store, ins []lock.Input, epoch int64, outRoot string) (string, error) {
	img := p.Stage(StageImage)
	if img == nil || !st.HasOutput(img.Key) {
		return "", errors.New("publish: the image stage has no output in the store")
	}
	if err := os.MkdirAll(outRoot, 0o755); err != nil {
		return "", err
	}
	final := filepath.Join(outRoot, p.Recipe.Name)
	src := st.OutputDir(img.Key)
	// The store's MANIFEST already holds every output's sha256: no re-hashing.
	files, err := st.OutputFiles(img.Key)
	if err != nil {
		return "", fmt.Errorf("publish: %w", err)
	}
	var outputs []output.ManifestOutput
	for _, f := range files {
		if f.Path == placementFile {
			continue // the image stage's note to its next run, not an output
		}
		outputs = append(outputs, output.ManifestOutput{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
	}
	m := output.Manifest{Recipe: p.Recipe.Name, RecipeDigest: p.Recipe.Digest, SourceDateEpoch: epoch, Outputs: outputs}
	for _, in := range ins {
		m.Inputs = append(m.Inputs, output.ManifestInput{Role: in.Role, Name: in.Name, Digest: in.Digest()})
	}
	for _, s := range p.Stages { // every stage the image came from, by key
		m.Stages = append(m.Stages, output.ManifestStage{Name: string(s.Name), Key: s.Key})
	}
	if upToDate(final, src, m) {
		return final, nil // a no-op rebuild touches nothing (and reads no UKI)
	}
	// The image stage's record gives the big sections' digests (the UKI is
	// then read for its headers and small sections alone); without one, the
	// initramfs output's sum is checked against the .initrd's bytes.
	known, release := initrdKnown(st, p.Stage(StageInitramfs))
	m.PCR11, err = predictPCR11(filepath.Join(src, ukiFile), eitherKnown(placedKnown(readPlacement(src)), known))
	release()
	if err != nil {
		return "", fmt.Errorf("publish: %w", err)
	}
	mj, _ := json.MarshalIndent(m, "", "  ")
	mj = append(mj, '\n')
	tmp, err := os.MkdirTemp(outRoot, "."+p.Recipe.Name+".new-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	dirs := map[string]bool{tmp: true}
	for _, o := range outputs {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		dst := filepath.Join(tmp, o.Path)
		dirs[filepath.Dir(dst)] = true
		if err := linkOrCopy(filepath.Join(src, o.Path), dst); err != nil {
			return "", fmt.Errorf("publish: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, output.ManifestFile), mj, 0o644); err != nil {
		return "", err
	}
	msum := sha256.Sum256(mj)
	sums := []output.Sum{{Path: output.ManifestFile, SHA256: hex.EncodeToString(msum[:])}}
	for _, o := range outputs {
		sums = append(sums, output.Sum{Path: o.Path, SHA256: o.SHA256})
	}
	if err := os.WriteFile(filepath.Join(tmp, output.SumsFile), output.FormatSums(sums), 0o644); err != nil {
		return "", err
	}
	written := []string{filepath.Join(tmp, output.ManifestFile), filepath.Join(tmp, output.SumsFile)}
	for d := range dirs {
		written = append(written, d)
	}
	if err := syncAll(written); err != nil {
		return "", fmt.Errorf("publish: %w", err)
	}
	if _, err := os.Stat(final); err == nil {
		if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE); err != nil {
			return "", fmt.Errorf("publish: swapping in %s: %w", final, err)
		}
		// tmp now holds the previous output; the deferred RemoveAll drops it.
	} else if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	// outRoot is not fsynced: after a crash the journal shows the swap done or
	// not done, either a whole output.
	return final, nil
}

// linkOrCopy hard-links the store's file src at dst (the image stage wrote
// its files read-only, so a tool pointed at out/ cannot write through into the
// store; `store verify` catches a file that was written anyway); where no link
// can be made (another filesystem) it copies, sparse and synced.
func linkOrCopy(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	_, err := copySparse(src, dst)
	return err
}

// syncAll fsyncs paths together: concurrent fsyncs share a journal commit,
// one after another each waits for its own.
func syncAll(paths []string) error {
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = syncPath(p)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	return nil
}

// predictPCR11 predicts PCR 11 for the UKI at path, taking section digests
// from known (nil: hashing every section); nil when there is no UKI (or the
// file is no PE image: nothing a stub boots).
func predictPCR11(path string, known measure.Known) (*output.ManifestPCR11, error) {
	// Mapped, not read: the UKI is the store's immutable file.
	b, unmap, err := mapFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unmap()
	if len(b) < 2 || string(b[:2]) != "MZ" {
		return nil, nil
	}
	pred, err := measure.PredictKnown(b, known)
	if err != nil {
		return nil, fmt.Errorf("%s: predicting PCR 11: %w", ukiFile, err)
	}
	out := &output.ManifestPCR11{Bank: "sha256", Sections: pred.Sections}
	for _, ph := range pred.Phases {
		out.Phases = append(out.Phases, output.ManifestPhase{Phase: ph.Name, Value: hex.EncodeToString(ph.PCR11[:])})
	}
	return out, nil
}

// initrdKnown gives measure the digest the store recorded for the initramfs
// output's file (stage ini, the image stage's dep), for a UKI whose .initrd
// section holds exactly those bytes: the .initrd is nearly all of the UKI,
// and a byte compare with the mapped file costs about a seventh of hashing it
// (BenchmarkPredict). release unmaps the file. Without that output in the
// store (an image taken from a remote cache alone) known is nil: all hashed.
func initrdKnown(st *store.Store, ini *Stage) (known measure.Known, release func()) {
	release = func() {}
	if ini == nil {
		return nil, release
	}
	files, err := st.OutputFiles(ini.Key)
	if err != nil {
		return nil, release
	}
	for _, f := range files {
		if f.Path != initrdFile {
			continue
		}
		sum, err := hex.DecodeString(f.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, release
		}
		b, unmap, err := mapFile(filepath.Join(st.OutputDir(ini.Key), initrdFile))
		if err != nil || int64(len(b)) != f.Size {
			if err == nil {
				unmap()
			}
			return nil, release
		}
		return knownInitrd(b, [32]byte(sum)), unmap
	}
	return nil, release
}

// knownInitrd answers measure for the .initrd section when its loaded bytes
// are initrd's, whose sha256 is sum: the section's file data equals initrd
// and nothing is zero-filled past it.
func knownInitrd(initrd []byte, sum [32]byte) measure.Known {
	return func(name string, s measure.PESection, file []byte) ([32]byte, bool) {
		if name != ".initrd" || uint64(s.VirtualSize) != uint64(len(file)) || !bytes.Equal(file, initrd) {
			return [32]byte{}, false
		}
		return sum, true
	}
}

// upToDate says whether dir already holds manifest m (its PCR 11, a function of
// the UKI's bytes, aside) and the image output's files, as the store's own
// inodes (or, for copies, at the listed sizes), and SHA256SUMS.
func upToDate(dir, src string, m output.Manifest) bool {
	b, err := os.ReadFile(filepath.Join(dir, output.ManifestFile))
	if err != nil {
		return false
	}
	var old output.Manifest
	if json.Unmarshal(b, &old) != nil {
		return false
	}
	old.PCR11 = nil
	a, _ := json.Marshal(old)
	n, _ := json.Marshal(m)
	if !bytes.Equal(a, n) {
		return false
	}
	for _, o := range m.Outputs {
		pub, err := os.Stat(filepath.Join(dir, o.Path))
		if err != nil {
			return false
		}
		if s, err := os.Stat(filepath.Join(src, o.Path)); err == nil && os.SameFile(pub, s) {
			continue
		}
		if pub.Size() != o.Size {
			return false
		}
	}
	_, err = os.Stat(filepath.Join(dir, output.SumsFile))
	return err == nil
}

// copySparse copies a file, leaving holes where the source has runs of zeros
// (disk images are mostly empty).
func copySparse(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := io.ReadFull(in, buf)
		if k > 0 {
			chunk := buf[:k]
			if isZero(chunk) {
				if _, err := out.Seek(int64(k), io.SeekCurrent); err != nil {
					return n, err
				}
			} else if _, err := out.Write(chunk); err != nil {
				return n, err
			}
			n += int64(k)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	if err := out.Truncate(n); err != nil {
		return n, err
	}
	return n, out.Sync()
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
