package driver

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
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
		if !v.IsDir() {
			continue // patches/README.md: the mode line and decision table all series share
		}
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

// driverRecipes are the per-branch driver recipes, recipes/drivers/*-p2p.toml:
// each pins one NVIDIA tree and the series written for it.
func driverRecipes(t *testing.T) []string {
	t.Helper()
	rps, err := filepath.Glob("../recipes/drivers/*-p2p.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(rps) == 0 {
		t.Fatal("no driver recipes (recipes/drivers/*-p2p.toml)")
	}
	return rps
}

// The driver recipes and every platform recipe with a driver series select
// patches of their series in the series' order.
func TestRecipesFollowSeriesOrder(t *testing.T) {
	platforms, err := filepath.Glob("../recipes/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, rp := range append(driverRecipes(t), platforms...) {
		r, err := recipe.Load(rp)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Driver.Patches) == 0 {
			continue
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
		dirs = append(dirs, st.GitDir(cloneURL))
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

// pinnedTree unpacks NVIDIA's tree at commit (of the repository cloneURL)
// into a new directory, only paths when any are given: from a git copy when
// there is one (PEERBOOT_GIT_MIRRORS, the store), else from the release
// tarball beside the repository (releaseTrees), which is what CI has. Without
// either it skips, saying why (which CI turns into a failure).
func pinnedTree(t *testing.T, cloneURL, commit string, paths ...string) string {
	t.Helper()
	tree := t.TempDir()
	gitDir, why := gitTree(t, cloneURL, commit)
	if gitDir != "" {
		t.Logf("tree %s from git: %s", commit, gitDir)
		unpackGit(t, gitDir, commit, tree, paths...)
		return tree
	}
	why2, err := unpackReleaseTree(commit, tree, paths...)
	if err != nil {
		t.Fatal(err)
	}
	if why2 != "" {
		testguard.Skipf(t, "no copy of %s at %s here (%s; %s). Set PEERBOOT_GIT_MIRRORS=%s=/path/to/a/clone, run `peerboot fetch` on a recipe pinning it, or set PEERBOOT_NVIDIA_TREES.",
			cloneURL, commit, why, why2, cloneURL)
	}
	t.Logf("tree %s from the release tarball of %s", commit, releaseTrees[commit].tag)
	return tree
}

// Every driver recipe's series applies, in order and exactly (every hunk at
// its recorded line), to the full NVIDIA tree at the commit the recipe pins,
// with the applier the driver stage uses; then the tree holds the version's
// landmarks (seriesLandmarks), so a series that "applies" to the wrong place
// cannot pass.
func TestSeriesAppliesToPinnedTree(t *testing.T) {
	testguard.Short(t, "unpacks an NVIDIA tree (~90-130 MB) per driver recipe")
	for _, rp := range driverRecipes(t) {
		r, err := recipe.Load(rp)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(r.Driver.Version, func(t *testing.T) {
			src := r.Driver.Source
			if src.Git == "" || src.Commit == "" {
				t.Fatalf("%s: driver.source is not a git commit of NVIDIA's full tree", rp)
			}
			landmarks, ok := seriesLandmarks[r.Driver.Version]
			if !ok || len(landmarks) == 0 {
				t.Fatalf("%s: seriesLandmarks has no entry for %s: add a few strings per patch that only the series puts in the tree", rp, r.Driver.Version)
			}
			if _, ok := releaseTrees[src.Commit]; !ok {
				t.Errorf("%s pins commit %s, which releaseTrees does not list: CI, with no git mirror, could not run this test", rp, src.Commit)
			}
			tree := pinnedTree(t, src.Git, src.Commit)
			if !IsFullTree(tree) {
				t.Fatalf("%s at %s is not NVIDIA's full open-gpu-kernel-modules tree", src.Git, src.Commit)
			}
			dir := PatchDir(r.Driver.Version)
			for _, name := range readSeries(t, dir) {
				data, err := fs.ReadFile(Patches, path.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				res, err := patch.ApplyExact(tree, name, data)
				if err != nil {
					t.Fatalf("%s: %v", rp, err)
				}
				if len(res.Offsets) > 0 {
					t.Fatalf("%s applied away from its recorded lines (%q)", name, res.Offsets)
				}
				t.Logf("%s: %d files", name, len(res.Files))
			}
			for file, want := range landmarks {
				b, err := os.ReadFile(filepath.Join(tree, file))
				if err != nil {
					t.Errorf("landmark file: %v", err)
					continue
				}
				for _, w := range want {
					if !bytes.Contains(b, []byte(w)) {
						t.Errorf("%s lacks %q after the %s series", file, w, r.Driver.Version)
					}
				}
			}
		})
	}
}

// A hand-made offset case: the 550 series' hunk that binds
// kbusHasPcieBar1P2PMapping for AD102 in the generated HAL table. Its old
// lines are in 580's g_kern_bus_nvoc.c too, ~400 lines further down (the
// tables grew). An applier that searches for moved hunks takes it; the exact
// applier the driver stage uses must refuse it, name the file, the hunk and
// both lines, and leave the file as it was.
func TestExactApplyRefusesShiftedHunk(t *testing.T) {
	const file = "src/nvidia/generated/g_kern_bus_nvoc.c"
	p550, err := fs.ReadFile(Patches, path.Join(PatchDir("550.163.01"), "0002-rm-static-bar1-p2p-ad102.patch"))
	if err != nil {
		t.Fatal(err)
	}
	one := singleHunk(t, string(p550), file, "__kbusHasPcieBar1P2PMapping__")
	for _, tc := range []struct {
		tag, commit          string
		recorded, found, off int
	}{
		{"580.95.05", "2b436058a616676ec888ef3814d1db6b2220f2eb", 709, 1122, 413},
		{"580.142", "1a5075f82128be3603d4a4657c7b689234306778", 709, 1122, 413},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			tree := pinnedTree(t, "https://github.com/NVIDIA/open-gpu-kernel-modules.git", tc.commit, file)
			before, err := os.ReadFile(filepath.Join(tree, file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = patch.ApplyExact(tree, "0002-hunk7.patch", []byte(one))
			var pe *patch.Error
			want := fmt.Sprintf("is recorded at line %d, but its old lines (first: \"    {\") are at line %d (offset %+d)", tc.recorded, tc.found, tc.off)
			if !errors.As(err, &pe) || pe.File != file || pe.Hunk != 1 || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want a *patch.Error for %s hunk 1 saying %q", err, file, want)
			}
			after, err := os.ReadFile(filepath.Join(tree, file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatal("the refused patch changed the file")
			}
			// The case is real: an offset-tolerant apply takes the hunk.
			res, err := patch.Apply(tree, "0002-hunk7.patch", []byte(one))
			if err != nil || len(res.Offsets) != 1 || !strings.Contains(res.Offsets[0], fmt.Sprintf("offset %+d lines", tc.off)) {
				t.Fatalf("offset-tolerant apply: %v, offsets %v; want it applied at %+d", err, res, tc.off)
			}
		})
	}
}

// singleHunk cuts a one-hunk patch out of a format-patch: the header, the
// diff of file and its one hunk that contains marker.
func singleHunk(t *testing.T, p, file, marker string) string {
	t.Helper()
	hdr, rest, ok := strings.Cut(p, "\ndiff --git ")
	if !ok {
		t.Fatal("patch has no diff")
	}
	for _, d := range strings.Split("diff --git "+rest, "\ndiff --git ") {
		d = strings.TrimPrefix(d, "diff --git ")
		if !strings.HasPrefix(d, "a/"+file+" ") {
			continue
		}
		head, hunks, ok := strings.Cut(d, "\n@@ ")
		if !ok {
			t.Fatalf("%s: no hunks", file)
		}
		for _, h := range strings.Split(hunks, "\n@@ ") {
			if strings.Contains(h, marker) {
				return hdr + "\ndiff --git " + head + "\n@@ " + strings.TrimSuffix(h, "\n") + "\n"
			}
		}
	}
	t.Fatalf("no hunk of %s contains %q", file, marker)
	return ""
}

// unpackGit writes the tree of commit in the bare repository gitDir into dst
// (only paths, when given), through the same reader as the release tarballs
// (git archive's pax header names the commit).
func unpackGit(t *testing.T, gitDir, commit, dst string, paths ...string) {
	t.Helper()
	const prefix = "open-gpu-kernel-modules/"
	archive := exec.Command("git", append([]string{"--git-dir", gitDir, "archive", "--format=tar", "--prefix=" + prefix, commit, "--"}, paths...)...)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	if err := archive.Start(); err != nil {
		t.Fatalf("git archive: %v", err)
	}
	uerr := untarTree(tar.NewReader(pipe), prefix, commit, dst, paths...)
	io.Copy(io.Discard, pipe)
	if err := archive.Wait(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, stderr.Bytes())
	}
	if uerr != nil {
		t.Fatalf("git archive %s: %v", commit, uerr)
	}
}
