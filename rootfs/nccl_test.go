//go:build mirror

// Built only with -tags mirror (`make test-mirror`, run by the images workflow): it
// downloads the 5090 lock's sid/experimental packages, which leave Debian's mirror when
// those suites move on. In `make test` that would turn the suite red with no change
// here; in the workflow it says exactly what it should: the lock must be refreshed.

package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/fetch"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/ncclinfo"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

// The userspace stage of the RTX 5090 recipe lays down exactly the NCCL its lock pins:
// libnccl.so.2 in the stage output reports the locked version, and its kernels are
// read against the platform's GPU. The Debian packages are the lock's real ones (from
// the shared store, else downloaded from this machine's mirror into a private one);
// NVIDIA's installer cannot be downloaded here, so a SYNTHETIC one of the same version
// stands in for it (the installer supplies no NCCL or CUDA runtime file).
func TestUserspaceNCCLOf5090Lock(t *testing.T) {
	testguard.Short(t, "downloads the epyc-4x5090 lock's userspace packages (about 100 MB)")
	const path = "../recipes/epyc-4x5090.toml"
	r, err := recipe.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := lock.Read(lock.PathFor(path))
	if err != nil {
		t.Fatal(err)
	}
	baseURL := func(name string) (string, error) {
		for _, rr := range r.Repos {
			if rr.Name == name {
				repo, err := lock.AptRepo(rr, "/etc/apt")
				return repo.BaseURL, err
			}
		}
		return "", os.ErrNotExist
	}
	all, _, err := lock.Inputs(r, f, baseURL)
	if err != nil {
		t.Fatal(err)
	}
	var ins []lock.Input
	var nccl lock.Deb
	for _, in := range all {
		if in.Role == lock.RoleUserspace {
			ins = append(ins, in)
		}
	}
	for _, d := range f.Debs {
		if d.Package == "libnccl2" {
			nccl = d
		}
	}
	st, err := store.Open(store.DefaultRoot())
	have := err == nil
	for _, in := range ins {
		have = have && st.HasBlob(in.SHA256)
	}
	if !have {
		// Never write to the shared store from a test.
		if st, err = store.Open(t.TempDir()); err != nil {
			t.Fatal(err)
		}
		if _, err := fetch.Fetch(context.Background(), st, ins, fetch.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	var debs []string
	for _, in := range ins {
		debs = append(debs, st.BlobPath(in.SHA256))
	}
	run, _ := installerRun(t, r.Driver.Version)
	root := t.TempDir()
	if err := Userspace(context.Background(), UserspaceOptions{Debs: debs, DriverVersion: r.Driver.Version, Installer: run, Scratch: t.TempDir()}, root); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnccl.so.2")
	target, err := os.Readlink(so)
	if err != nil {
		t.Fatal(err)
	}
	info, err := ncclinfo.Read(so)
	if err != nil {
		t.Fatal(err)
	}
	// Debian's version of NCCL 2.29.7-1 is 2.29.7-1-1; the file is libnccl.so.2.29.7.
	if target != "libnccl.so."+info.Version || !strings.HasPrefix(nccl.Version, info.Version+"-") {
		t.Errorf("image has %s (%s), lock pins libnccl2 %s", target, info, nccl.Version)
	}
	t.Logf("image: %s -> %s: %s", "usr/lib/x86_64-linux-gnu/libnccl.so.2", target, info)
	g, ok := recipe.LookupGPU(r.Platform.GPUModel)
	if !ok {
		t.Fatalf("no architecture for %q", r.Platform.GPUModel)
	}
	if !recipe.AtLeast(nccl.Version, g.MinNCCL) {
		t.Errorf("locked libnccl2 %s is older than %s, which %s needs", nccl.Version, g.MinNCCL, r.Platform.GPUModel)
	}
	// What the kernels cover is a fact of the pinned file, reported either way: Debian
	// builds NCCL with its own CUDA, which may predate the platform's GPU.
	t.Logf("%s on %s (sm_%d): %s", info, r.Platform.GPUModel, g.SM, info.Check(g.SM))
	if cov := info.Check(89); !cov.OK() {
		t.Errorf("the same NCCL on an RTX 4090 (sm_89): %s", cov)
	}
}
