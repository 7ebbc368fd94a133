package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/image/fatread"
	"github.com/peerboot/peerboot/initramfs"
	"github.com/peerboot/peerboot/internal/testbin"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/internal/xfstest"
)

// A warm rebuild after a recipe edit gives the bytes of a build whose stages
// start empty: after editing description and kernel.cmdline in a copy of the
// default recipe, the build reuses what the edit does not touch; then
// `build --check` builds every stage but the two compiles again from empty
// scratch and compares each file with what the store holds (a stage whose key
// missed a field it writes would be reused stale and differ here), and the
// published SHA256SUMS must be those of the first build. `plan --why` names the
// two fields.
func TestWarmRebuildEqualsFresh(t *testing.T) {
	testguard.Short(t, "builds the default image (a store hit after TestBuildAndBootDefault)")
	dir := t.TempDir()
	recipe := filepath.Join(dir, "default.toml")
	for _, f := range []string{"default.toml", "default.lock"} {
		b, err := os.ReadFile(filepath.Join("..", "recipes", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "default.toml" {
			s := strings.Replace(string(b), `cmdline = "console=ttyS0,115200 panic=-1"`, `cmdline = "console=ttyS0,115200 panic=-1 quiet"`, 1)
			// A new edit every run, so the store cannot already hold its stages.
			s = strings.Replace(s, `description = "`, fmt.Sprintf(`description = "edited: %d `, time.Now().UnixNano()), 1)
			if s == string(b) || !strings.Contains(s, "quiet") || !strings.Contains(s, "edited: ") {
				t.Fatal("the default recipe no longer has the lines this test edits")
			}
			b = []byte(s)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, code := peerboot(t, "fetch"); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	if out, code := peerboot(t, "build", "--out", filepath.Join(dir, "base")); code != 0 {
		t.Fatalf("build of the default recipe: exit %d\n%s", code, out)
	}
	why, code := peerboot(t, "plan", "--why", recipe)
	t.Logf("plan --why after the edit:\n%s", why)
	for _, want := range []string{"recipe field description:", "recipe field kernel.cmdline:", "kernel    unchanged", "userspace unchanged"} {
		if code != 0 || !strings.Contains(why, want) {
			t.Errorf("plan --why (exit %d) lacks %q", code, want)
		}
	}
	warm := filepath.Join(dir, "warm")
	out, code := peerboot(t, "build", recipe, "--out", warm)
	t.Logf("warm build after the edit:\n%s", out)
	if code != 0 {
		t.Fatalf("warm build: exit %d", code)
	}
	// The driver is not even asked about: the modules layer that reads it is in the store.
	for st, want := range map[string]string{"kernel": "cached", "driver": "unused", "userspace": "cached", "modules": "cached"} {
		if !strings.Contains(lineOf(out, st), want) {
			t.Errorf("stage %s after an edit it does not read: want %s:\n%s", st, want, lineOf(out, st))
		}
	}
	fresh := filepath.Join(dir, "fresh")
	out, code = peerboot(t, "build", recipe, "--out", fresh, "--check", "userspace,modules,tools,config,initramfs,image")
	t.Logf("build --check:\n%s", out)
	if code != 0 {
		t.Fatalf("build --check: exit %d: a stage built from empty differs from the one the store reused", code)
	}
	a, _ := os.ReadFile(filepath.Join(warm, "default", "SHA256SUMS"))
	b, _ := os.ReadFile(filepath.Join(fresh, "default", "SHA256SUMS"))
	if len(a) == 0 || string(a) != string(b) {
		t.Errorf("SHA256SUMS differ:\nwarm:\n%s\nfresh:\n%s", a, b)
	}
	f, err := os.Open(filepath.Join(warm, "default", "pxe", "initrd.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inImage string
	err = initramfs.ReadFiles(f, func(p string) bool { return p == "etc/peerboot/recipe.toml" }, func(_ string, b []byte) error {
		inImage = string(b)
		return nil
	})
	if err != nil || !strings.Contains(inImage, "edited: ") || !strings.Contains(inImage, "panic=-1 quiet") {
		t.Errorf("the warm image's /etc/peerboot/recipe.toml does not carry the edit (%v):\n%s", err, inImage)
	}
}

func lineOf(out, stage string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, stage+" ") {
			return l
		}
	}
	return ""
}

// stageStatus is the second word of a stage's line in build's table: built,
// cached or unused.
func stageStatus(out, stage string) string {
	if f := strings.Fields(lineOf(out, stage)); len(f) > 1 {
		return f[1]
	}
	return ""
}

// An overlay edit is what people do all day: after each of two edits to
// /etc/hosts (a peerboot built with the edited overlay, as `make` would), the
// build re-runs only config, initramfs and image (the tools' segment is
// reused: their bytes did not change), and `build --check` builds
// those three again from empty and finds each file equal to what the store
// holds. The store's sums were resumed from the previous build's midstates and
// the PXE files' taken from their stages, so this is what shows the
// incremental hashing exact. The first edit keeps the UKI's size (its initrd
// room is padded to whole MiB), and disk.img is then the previous build's up
// to the UKI, at the ESP's top (checked: what lets the store resume the disk's
// hash there). The second adds 1.25 MiB of incompressible text, so the UKI
// grows past its padding and by whole FAT clusters (checked). The published
// files are the store's, by hard link.
func TestOverlayEditEqualsFresh(t *testing.T) {
	testguard.Short(t, "builds the default image three times (a store hit for its kernel and driver)")
	overlayEdits(t, t.TempDir(), false)
}

// The same edits with the store on an XFS loop mount (a copy of the default
// recipe's warm outputs), where the stages clone the previous build's files
// and carry what did not change (issue 34): the one-line edit writes KiBs,
// carries 3 of the initrd's 4 segments and the UKI's kernel, initrd head and
// its place in the disk and ISO, and every output still equals a build from
// empty; the edit that grows the initrd past its MiB moves the UKI, and the
// records that no longer match are not used.
func TestOverlayEditEqualsFreshOnXFS(t *testing.T) {
	testguard.Short(t, "copies the warm store to an XFS loop mount and builds the default image three times")
	mnt := xfstest.Mount(t, 16<<30)
	t.Setenv("PEERBOOT_CACHE", copyStore(t, cacheDir(), filepath.Join(mnt, "store"), planKeys(t)))
	overlayEdits(t, filepath.Join(mnt, "work"), true) // out/ beside the store: publish links
}

// overlayEdits builds the default image into dir, then after each of two
// overlay edits builds it warm and with --check, and compares; carried says
// the store has reflinks, so the warm builds must carry what the edit left
// alone.
func overlayEdits(t *testing.T, dir string, carried bool) {
	if out, code := peerboot(t, "fetch"); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	if out, code := peerboot(t, "build", "--out", filepath.Join(dir, "base")); code != 0 {
		t.Fatalf("build of the default recipe: exit %d\n%s", code, out)
	}
	hostsPath, err := filepath.Abs(filepath.Join("..", "overlay", "etc", "hosts"))
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := os.ReadFile(hostsPath)
	if err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, 5<<18)
	rand.New(rand.NewSource(time.Now().UnixNano())).Read(noise)
	var big strings.Builder
	for b64 := base64.StdEncoding.EncodeToString(noise); len(b64) > 0; b64 = b64[min(76, len(b64)):] {
		big.WriteString("# " + b64[:min(76, len(b64))] + "\n")
	}
	edits := []string{fmt.Sprintf("# edited %d\n", time.Now().UnixNano()), big.String()}
	prev := filepath.Join(dir, "base", "default")
	for i, add := range edits {
		hosts = append(hosts, add...)
		pb := overlayPeerboot(t, filepath.Join(dir, fmt.Sprintf("bin%d", i)), hostsPath, hosts)
		warm := filepath.Join(dir, fmt.Sprintf("warm%d", i))
		out, code := runPeerboot(t, pb, "build", "--out", warm)
		warmOut := out
		t.Logf("edit %d, warm build:\n%s", i, out)
		if code != 0 {
			t.Fatalf("edit %d: warm build: exit %d", i, code)
		}
		for st, want := range map[string]string{"kernel": "cached", "userspace": "cached", "modules": "cached", "tools": "cached", "config": "built", "initramfs": "built", "image": "built"} {
			if !strings.Contains(lineOf(out, st), want) {
				t.Errorf("edit %d: stage %s: want %s:\n%s", i, st, want, lineOf(out, st))
			}
		}
		// The image stage started from the previous build's files: clones where
		// the store's filesystem has reflinks (XFS, btrfs), whole writes where
		// not (ext4); --check below builds from empty and must match either.
		if cloned := strings.Count(warmOut, "cloned from the previous build"); cloned == 0 && !strings.Contains(warmOut, "image: writing whole files") {
			t.Errorf("edit %d: the image stage says neither that it cloned nor why not:\n%s", i, warmOut)
		} else {
			t.Logf("edit %d: %d image files cloned from the previous build", i, cloned)
		}
		if carried {
			imageLog := imageLines(warmOut)
			if n := strings.Count(warmOut, "cloned from the previous build"); n != 3 {
				t.Errorf("edit %d: %d of the image stage's 3 files cloned:\n%s", i, n, imageLog)
			}
			if !strings.Contains(warmOut, "initramfs: 4 segments") || !strings.Contains(warmOut, "(3 carried from the previous build)") {
				t.Errorf("edit %d: the initrd did not carry the 3 segments before config", i)
			}
			if n := strings.Count(imageLog, "carried unread"); i == 0 && n != 3 {
				t.Errorf("edit 0: the UKI, disk and ISO did not all carry what the edit left alone (%d of 3):\n%s", n, imageLog)
			}
		}
		fresh := filepath.Join(dir, fmt.Sprintf("fresh%d", i))
		out, code = runPeerboot(t, pb, "build", "--out", fresh, "--check", "config,initramfs,image")
		t.Logf("edit %d, build --check:\n%s", i, out)
		if code != 0 {
			t.Fatalf("edit %d: build --check: exit %d: a stage built from empty differs from the incremental one", i, code)
		}
		a, _ := os.ReadFile(filepath.Join(warm, "default", "SHA256SUMS"))
		b, _ := os.ReadFile(filepath.Join(fresh, "default", "SHA256SUMS"))
		if len(a) == 0 || string(a) != string(b) {
			t.Errorf("edit %d: SHA256SUMS differ:\nwarm:\n%s\nfresh:\n%s", i, a, b)
		}
		cur := filepath.Join(warm, "default")
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(cur, "peerboot.efi"), &st); err != nil || st.Nlink < 2 || st.Mode&0o222 != 0 {
			t.Errorf("edit %d: the published UKI is no read-only hard link to the store's (%v, %d links, mode %o)", i, err, st.Nlink, st.Mode&0o777)
		}
		before, after := ukiClusters(t, prev), ukiClusters(t, cur)
		t.Logf("edit %d: the UKI takes %d clusters before the edit, %d after", i, before, after)
		switch {
		case i == 1 && before == after:
			t.Errorf("the second edit left the UKI at %d clusters: it tests no cluster boundary", after)
		case i == 0 && before != after:
			t.Errorf("the one-line edit moved the UKI from %d to %d clusters: its initrd room is not padded", before, after)
		case i == 0:
			at, diff := ukiOffset(t, cur), firstDiff(t, filepath.Join(prev, "disk.img"), filepath.Join(cur, "disk.img"))
			t.Logf("edit 0: disk.img first differs at %.1f MiB, the UKI starts at %.1f MiB", float64(diff)/(1<<20), float64(at)/(1<<20))
			if diff < at {
				t.Errorf("edit 0: disk.img differs at %d, before the UKI (at %d)", diff, at)
			}
			// The store hashed disk.img from the 4 MiB chunk holding that byte on.
			if want := fmt.Sprintf("disk.img from %.1f MiB", float64(diff/(4<<20)*(4<<20))/(1<<20)); !strings.Contains(lineOf(warmOut, "image: committed,"), want) {
				t.Errorf("edit 0: the image commit did not resume disk.img's hash at its first changed chunk (%q):\n%s", want, lineOf(warmOut, "image: committed,"))
			}
			// The initrd is NUL-padded to whole MiB and the UKI's CheckSum is 0,
			// so the UKI's header did not move: its hash and the ISO's resume too.
			for _, f := range []string{"peerboot.efi from", "peerboot.iso from"} {
				if !strings.Contains(lineOf(warmOut, "image: committed,"), f) {
					t.Errorf("edit 0: the image commit did not resume %s's hash:\n%s", strings.TrimSuffix(f, " from"), lineOf(warmOut, "image: committed,"))
				}
			}
		}
		prev = cur
	}
}

// overlayPeerboot builds peerboot into dir with the overlay file at path
// replaced by content (go build -overlay: the overlay is embedded), beside
// links to the image binaries the config stage reads.
func overlayPeerboot(t *testing.T, dir, path string, content []byte) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(dir, "hosts")
	if err := os.WriteFile(edited, content, 0o644); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(map[string]map[string]string{"Replace": {path: edited}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	pb := filepath.Join(dir, "peerboot")
	cmd := exec.Command("go", "build", "-overlay", ov, "-trimpath", "-ldflags=-buildid=", "-o", pb, "../cmd/peerboot")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with the edited overlay: %v\n%s", err, out)
	}
	for _, tool := range []string{"peerboot-init", "p2pcheck"} {
		if err := os.Symlink(filepath.Join(filepath.Dir(bin), tool), filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return pb
}

func runPeerboot(t *testing.T, pb string, args ...string) (string, int) {
	t.Helper()
	out, errs, code, err := testbin.Run(pb, "..", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out + errs, code
}

// ukiClusters is how many clusters the UKI takes in the ESP of dir's disk.img.
func ukiClusters(t *testing.T, dir string) int64 {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := image.ReadGPT(f)
	if err != nil {
		t.Fatal(err)
	}
	esp, ok := g.Find(image.ESPLabel)
	if !ok {
		t.Fatal("disk.img has no ESP")
	}
	fs, err := fatread.Open(io.NewSectionReader(f, esp.Offset(), esp.Size()), esp.Size())
	if err != nil {
		t.Fatal(err)
	}
	uki, err := fs.ReadFile(image.UKIPath)
	if err != nil {
		t.Fatal(err)
	}
	return (int64(len(uki)) + fs.ClusterSize() - 1) / fs.ClusterSize()
}

// ukiOffset is where the published UKI of dir starts inside its disk.img.
func ukiOffset(t *testing.T, dir string) int64 {
	t.Helper()
	uki, err := os.ReadFile(filepath.Join(dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	head := uki[:4096]
	f, err := os.Open(filepath.Join(dir, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4<<20+len(head))
	for off := int64(0); ; off += 4 << 20 {
		n, err := f.ReadAt(buf, off)
		if i := bytes.Index(buf[:n], head); i >= 0 {
			return off + int64(i)
		}
		if err != nil {
			t.Fatalf("disk.img of %s holds no UKI: %v", dir, err)
		}
	}
}

// firstDiff is the offset of the first byte where files a and b differ (the
// shorter one's size when one is a prefix of the other; -1 when equal).
func firstDiff(t *testing.T, a, b string) int64 {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	x, y := make([]byte, 4<<20), make([]byte, 4<<20)
	for off := int64(0); ; off += 4 << 20 {
		n, errA := io.ReadFull(fa, x)
		m, errB := io.ReadFull(fb, y)
		for i := range min(n, m) {
			if x[i] != y[i] {
				return off + int64(i)
			}
		}
		if n != m {
			return off + int64(min(n, m))
		}
		if errA != nil || errB != nil {
			return -1
		}
	}
}
