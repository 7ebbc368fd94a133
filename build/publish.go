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
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/store"
)

// Manifest describes one published build: what went in and what came out.
type Manifest struct {
	Recipe          string           `json:"recipe"`
	RecipeDigest    string           `json:"recipe_digest"`
	SourceDateEpoch int64            `json:"source_date_epoch"`
	Inputs          []ManifestInput  `json:"inputs"`
	Stages          []ManifestStage  `json:"stages"`
	Outputs         []ManifestOutput `json:"outputs"`
	// PCR11 is what systemd-stub leaves in PCR 11 for peerboot.efi
	// (measure.Predict), so a collector can check a node's quote without
	// parsing the UKI. Absent when the build has no UKI.
	PCR11 *ManifestPCR11 `json:"pcr11,omitempty"`
}

// ManifestPCR11 is the predicted PCR 11, sha256 bank, per boot phase.
type ManifestPCR11 struct {
	Bank     string          `json:"bank"`     // "sha256"
	Sections []string        `json:"sections"` // measured, in the stub's order
	Phases   []ManifestPhase `json:"phases"`   // "" (after the stub), then systemd-measure's default phases
}

type ManifestPhase struct {
	Phase string `json:"phase"`
	Value string `json:"value"` // hex
}

type ManifestInput struct {
	Role   string `json:"role"`
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

type ManifestStage struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

type ManifestOutput struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Publish copies the image stage's output to outRoot/<recipe>/ with manifest.json
// and SHA256SUMS. The directory is replaced atomically (renameat2 RENAME_EXCHANGE),
// so a failed or killed build leaves the previous good output whole.
func Publish(ctx context.Context, p *Plan, st *store.Store, ins []lock.Input, epoch int64, outRoot string) (string, error) {
	img := p.Stage("image")
	if img == nil || !st.HasOutput(img.Key) {
		return "", errors.New("publish: the image stage has no output in the store")
	}
	if err := os.MkdirAll(outRoot, 0o755); err != nil {
		return "", err
	}
	final := filepath.Join(outRoot, p.Recipe.Name)
	src := st.OutputDir(img.Key)
	// The store's MANIFEST already holds every output's sha256: no re-hashing.
	outputs, err := storeOutputs(src)
	if err != nil {
		return "", fmt.Errorf("publish: %w", err)
	}
	m := Manifest{Recipe: p.Recipe.Name, RecipeDigest: p.Recipe.Digest, SourceDateEpoch: epoch, Outputs: outputs}
	for _, in := range ins {
		m.Inputs = append(m.Inputs, ManifestInput{Role: in.Role, Name: in.Name, Digest: in.Digest()})
	}
	for _, s := range p.Stages { // every stage the image came from, by key
		m.Stages = append(m.Stages, ManifestStage{Name: s.Name, Key: s.Key})
	}
	if m.PCR11, err = predictPCR11(filepath.Join(src, ukiFile)); err != nil {
		return "", fmt.Errorf("publish: %w", err)
	}
	mj, _ := json.MarshalIndent(m, "", "  ")
	mj = append(mj, '\n')
	if upToDate(final, mj, outputs) {
		return final, nil // a no-op rebuild touches nothing
	}
	tmp, err := os.MkdirTemp(outRoot, "."+p.Recipe.Name+".new-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	for _, o := range outputs {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if _, err := copySparse(filepath.Join(src, o.Path), filepath.Join(tmp, o.Path)); err != nil {
			return "", fmt.Errorf("publish: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "manifest.json"), mj, 0o644); err != nil {
		return "", err
	}
	var sums bytes.Buffer
	msum := sha256.Sum256(mj)
	all := append([]ManifestOutput{{Path: "manifest.json", SHA256: hex.EncodeToString(msum[:])}}, outputs...)
	sort.Slice(all, func(i, j int) bool { return all[i].Path < all[j].Path })
	for _, o := range all {
		fmt.Fprintf(&sums, "%s  %s\n", o.SHA256, o.Path)
	}
	if err := os.WriteFile(filepath.Join(tmp, "SHA256SUMS"), sums.Bytes(), 0o644); err != nil {
		return "", err
	}
	if err := fsutil.SyncTree(tmp); err != nil {
		return "", err
	}
	if _, err := os.Stat(final); err == nil {
		if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE); err != nil {
			return "", fmt.Errorf("publish: swapping in %s: %w", final, err)
		}
		// tmp now holds the previous output; the deferred RemoveAll drops it.
	} else if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	return final, nil
}

// predictPCR11 predicts PCR 11 for the UKI at path; nil when there is none
// (or the file is no PE image: nothing a stub boots).
func predictPCR11(path string) (*ManifestPCR11, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || string(b[:2]) != "MZ" {
		return nil, nil
	}
	pred, err := measure.Predict(b)
	if err != nil {
		return nil, fmt.Errorf("%s: predicting PCR 11: %w", ukiFile, err)
	}
	out := &ManifestPCR11{Bank: "sha256", Sections: pred.Sections}
	for _, ph := range pred.Phases {
		out.Phases = append(out.Phases, ManifestPhase{Phase: ph.Name, Value: hex.EncodeToString(ph.PCR11[:])})
	}
	return out, nil
}

// storeOutputs lists a stage output's files with their sizes and the sha256
// its MANIFEST recorded when the store committed it.
func storeOutputs(dir string) ([]ManifestOutput, error) {
	b, err := os.ReadFile(filepath.Join(dir, "MANIFEST"))
	if err != nil {
		return nil, err
	}
	var out []ManifestOutput
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sum, path, ok := strings.Cut(line, "  ")
		if !ok {
			return nil, fmt.Errorf("%s/MANIFEST: malformed line %q", dir, line)
		}
		info, err := os.Stat(filepath.Join(dir, path))
		if err != nil {
			return nil, err
		}
		out = append(out, ManifestOutput{Path: path, Size: info.Size(), SHA256: sum})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// upToDate says whether dir already holds this manifest and files of the listed sizes.
func upToDate(dir string, manifest []byte, outputs []ManifestOutput) bool {
	old, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil || !bytes.Equal(old, manifest) {
		return false
	}
	for _, o := range outputs {
		info, err := os.Stat(filepath.Join(dir, o.Path))
		if err != nil || info.Size() != o.Size {
			return false
		}
	}
	_, err = os.Stat(filepath.Join(dir, "SHA256SUMS"))
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
