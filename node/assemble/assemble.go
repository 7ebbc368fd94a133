// Package assemble puts the node's self-test report together, for both programs that
// make one on the node: p2pcheck, which folds each phase child's answer into its
// report (assemble/phases), and the init, which makes the report itself when p2pcheck
// could not (a crash, a timeout, a panic of the init). Both start from Base, so a
// report says the same of the kernel and the recipe whoever wrote it. The phase types
// live in their own package so that the init, which never reads them, does not link
// the CUDA and PCIe result types.
package assemble

import (
	"time"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

// Base is the report before any phase: when it started, the kernel, and the recipe
// when the image's could be loaded (nil otherwise).
func Base(start time.Time, kernel selftest.Kernel, rc *recipe.Resolved) *selftest.Report {
	r := selftest.New()
	r.StartedAt = start.UTC().Format(time.RFC3339)
	r.Kernel = kernel
	if rc != nil {
		r.Recipe = selftest.RecipeRef{Name: rc.Name, Digest: rc.Digest, DriverVersion: rc.Recipe.Driver.Version}
	}
	return r
}
