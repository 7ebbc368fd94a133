package driver

import (
	"archive/tar"
	"bufio"
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/fetch"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/patch"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

// readSeries returns the patch names a series file lists, in order.
func readSeries(t *testing.T, dir string) []string {
	t.Helper()
	b, err := fs.ReadFile(Patches, path.Join(dir, "series"))
	if err != nil {
		t.Fatalf("%s: %v (every patch directory has a series file giving the order)", dir, err)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		names = append(names, l)
	}
	return names
}

// Every series lists exactly the patches of its directory, and every patch
// parses and has a header saying what it does.
func TestSeriesFiles(t *testing.T) {
	versions, err := fs.ReadDir(Patches, "patches")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		dir := PatchDir(v.Name())
		listed := readSeries(t, dir)
		var have []string
		entries, _ := fs.ReadDir(Patches, dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".patch") {
				have = append(have, e.Name())
			}
		}
		if !slices.Equal(slices.Sorted(slices.Values(listed)), have) {
			t.Errorf("%s/series lists %q, the directory has %q", dir, listed, have)
		}
		for _, name := range listed {
			data, err := fs.ReadFile(Patches, path.Join(dir, name))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if err := patch.Check(data); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			h, err := patch.ParseHeader(data)
			if err != nil || h.Subject == "" || len(h.Body) < 200 {
				t.Errorf("%s: want a header with a subject and a body saying what, why and which chips (got subject %q, %d bytes of body, %v)",
					name, h.Subject, len(h.Body), err)
			}
		}
	}
}

// p2pRecipes are the recipes built on the 550.163.01 series.
var p2pRecipes = []string{"../recipes/epyc-4gpu.toml", "../recipes/xeon-8gpu.toml"}

// The recipes select patches of the series in the series' order.
func TestRecipesFollowSeriesOrder(t *testing.T) {
	for _, rp := range p2pRecipes {
		r, err := recipe.Load(rp)
		if err != nil {
			t.Fatal(err)
		}
		series := readSeries(t, PatchDir(r.Driver.Version))
		last := -1
		for _, p := range r.Driver.Patches {
			i := slices.Index(series, p)
			if i < 0 {
				t.Errorf("%s: driver.patches names %s, which is not in the %s series", rp, p, r.Driver.Version)
				continue
			}
			if i < last {
				t.Errorf("%s: driver.patches lists %s after a patch that follows it in the series", rp, p)
			}
			last = i
		}
	}
}

// gitTree finds a bare repository holding commit for cloneURL: first the
// local mirror PEERBOOT_GIT_MIRRORS names for it (as `peerboot fetch` uses),
// then the store's copy (`peerboot fetch` puts it there). It returns "" and
// why not when neither has the commit.
func gitTree(t *testing.T, cloneURL, commit string) (string, string) {
	t.Helper()
	var tried []string
	var dirs []string
	mirrors, err := fetch.GitMirrorsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := mirrors[cloneURL]; ok {
		dirs = append(dirs, m)
	} else {
		tried = append(tried, "PEERBOOT_GIT_MIRRORS has no mirror for "+cloneURL)
	}
	if st, err := store.Open(store.DefaultRoot()); err == nil {
		dirs = append(dirs, fetch.GitDir(st, cloneURL))
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			tried = append(tried, d+" does not exist")
			continue
		}
		if err := exec.Command("git", "--git-dir", d, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
			tried = append(tried, d+" lacks commit "+commit)
			continue
		}
		return d, ""
	}
	return "", strings.Join(tried, "; ")
}

// The 550.163.01 series applies, in order and exactly (no hunk away from its
// recorded lines), to the full NVIDIA tree at the commit the recipes pin, with
// the applier the driver stage uses. The tree comes from a git copy when there
// is one (PEERBOOT_GIT_MIRRORS, the store), else from NVIDIA's release tarball
// beside the repository (releaseTrees), which is what CI has.
func TestSeries550AppliesToPinnedTree(t *testing.T) {
	testguard.Short(t, "unpacks the NVIDIA tree (~120 MB)")
	r, err := recipe.Load(p2pRecipes[0])
	if err != nil {
		t.Fatal(err)
	}
	src := r.Driver.Source
	if src.Git == "" || src.Commit == "" {
		t.Fatalf("%s: driver.source is not a git commit", p2pRecipes[0])
	}
	tree := t.TempDir()
	if gitDir, why := gitTree(t, src.Git, src.Commit); gitDir != "" {
		t.Logf("tree from git: %s", gitDir)
		unpackGit(t, gitDir, src.Commit, tree)
	} else if why2, err := unpackReleaseTree(src.Commit, tree); err != nil {
		t.Fatal(err)
	} else if why2 != "" {
		testguard.Skipf(t, "no copy of %s at %s here (%s; %s). Set PEERBOOT_GIT_MIRRORS=%s=/path/to/a/clone, run `peerboot fetch %s`, or set PEERBOOT_NVIDIA_TREES.",
			src.Git, src.Commit, why, why2, src.Git, strings.TrimPrefix(p2pRecipes[0], "../"))
	} else {
		t.Logf("tree from the release tarball of %s", releaseTrees[src.Commit].tag)
	}
	if !IsFullTree(tree) {
		t.Fatalf("%s at %s is not NVIDIA's full open-gpu-kernel-modules tree", src.Git, src.Commit)
	}

	dir := PatchDir(r.Driver.Version)
	for _, name := range readSeries(t, dir) {
		data, err := fs.ReadFile(Patches, path.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		res, err := patch.Apply(tree, name, data)
		if err != nil {
			t.Fatalf("%v", err)
		}
		if len(res.Offsets) > 0 {
			t.Errorf("%s applies, but away from its recorded lines (%q): regenerate it against the pinned tree", name, res.Offsets)
		}
		t.Logf("%s: %d files", name, len(res.Files))
	}

	// A few landmarks of each patch, so a series that "applies" to the wrong
	// place cannot pass.
	for file, want := range map[string][]string{
		"kernel-open/nvidia/nv-reg.h":                   {"NV_DEFINE_REG_ENTRY_GLOBAL(__NV_ENABLE_RESIZABLE_BAR, 1);"},
		"kernel-open/nvidia/nv-pci.c":                   {"#if defined(NV_PCI_RESIZE_RESOURCE_HAS_EXCLUDE_BARS_ARG)"},
		"src/nvidia/generated/g_kern_bus_nvoc.c":        {"pThis->__kbusIsPcieBar1P2PMappingSupported__ = &kbusIsPcieBar1P2PMappingSupported_GH100;\n    }\n    // default"},
		"src/nvidia/src/kernel/gpu/bif/kernel_bif.c":    {"pKernelBif->forceP2PType = NV_REG_STR_RM_FORCE_P2P_TYPE_BAR1P2P;"},
		"src/nvidia/src/kernel/rmapi/nv_gpu_ops.c":      {"aperture = GMMU_APERTURE_SYS_NONCOH;", "_nvGpuOpsDynBar1Release(device, hPhysHandle)", "_nvGpuOpsDynBar1DestroyAll(device);"},
		"src/nvidia/src/kernel/gpu/bus/kern_bus.c":      {"return KBUS_BAR1_P2P_MODE_DYNAMIC;"},
		"src/nvidia/src/kernel/platform/p2p/p2p_caps.c": {"_kp2pCapsBar1P2PRequired(gpuMask)"},
		"kernel-open/conftest.sh":                       {"#if IS_ENABLED(CONFIG_DRM_TTM_HELPER)"},
	} {
		b, err := os.ReadFile(filepath.Join(tree, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s lacks %q after the series", file, w)
			}
		}
	}
}

// unpackGit writes the tree of commit in the bare repository gitDir into dst,
// through the same reader as the release tarballs (git archive's pax header
// names the commit).
func unpackGit(t *testing.T, gitDir, commit, dst string) {
	t.Helper()
	const prefix = "open-gpu-kernel-modules/"
	archive := exec.Command("git", "--git-dir", gitDir, "archive", "--format=tar", "--prefix="+prefix, commit)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	if err := archive.Start(); err != nil {
		t.Fatalf("git archive: %v", err)
	}
	uerr := untarTree(tar.NewReader(pipe), prefix, commit, dst)
	io.Copy(io.Discard, pipe)
	if err := archive.Wait(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, stderr.Bytes())
	}
	if uerr != nil {
		t.Fatalf("git archive %s: %v", commit, uerr)
	}
}
