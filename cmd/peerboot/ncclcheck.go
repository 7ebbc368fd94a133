package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/build"
	"github.com/peerboot/peerboot/ncclinfo"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

// ncclLib is where Debian's libnccl2 puts the library, inside a stage's tree.
const ncclLib = "usr/lib/x86_64-linux-gnu/libnccl.so.2"

// ncclWarnings read the image's NCCL (the userspace stage's tree in the store) against
// the platform's GPU: rule 3 of docs/userspace.md, which recipe loading can only check
// by version. A warning, not an error: the image still boots and its peer-copy phases
// still run; the self-test's NCCL phase will then fail with nccl.arch.
func ncclWarnings(r *recipe.Resolved, st *store.Store, p *build.Plan) []string {
	s := p.Stage(build.StageUserspace)
	if s == nil || s.Key == "" || !st.HasOutput(s.Key) {
		return nil
	}
	return ncclCheck(r, filepath.Join(st.OutputDir(s.Key), "root"))
}

// ncclCheck is ncclWarnings on a userspace tree.
func ncclCheck(r *recipe.Resolved, root string) []string {
	g, ok := recipe.LookupGPU(r.Platform.GPUModel)
	if r.Platform.GPUs == 0 || !ok {
		return nil
	}
	info, err := ncclinfo.Read(filepath.Join(root, ncclLib))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // no NCCL in this image
	case err != nil:
		return []string{fmt.Sprintf("warning: cannot read the image's NCCL to check it against the %s (sm_%d): %v", r.Platform.GPUModel, g.SM, err)}
	}
	cov := info.Check(g.SM)
	if cov.OK() {
		return nil
	}
	return []string{fmt.Sprintf("warning: the image's %s cannot run on the platform's %s (%s, sm_%d): %s; its all-reduce will fail with \"no kernel image is available\" (the self-test's nccl.arch). "+
		"Take an NCCL built for sm_%d (docs/userspace.md)%s",
		info, r.Platform.GPUModel, g.Chip, g.SM, cov, g.SM, builtWith(info, g))}
}

// builtWith adds what the CUDA version says, when it says something.
func builtWith(info *ncclinfo.Info, g recipe.GPUArch) string {
	if g.SM >= 100 && strings.HasPrefix(info.CUDA, "12.") && recipe.AtLeast(info.CUDA, "12.0") && !recipe.AtLeast(info.CUDA, "12.8") {
		return fmt.Sprintf(": CUDA %s cannot compile for sm_%d (12.8 is the first that can)", info.CUDA, g.SM)
	}
	return ""
}
