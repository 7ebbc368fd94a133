package output

import (
	"github.com/peerboot/peerboot/internal/literals"
	"strings"
	"testing"
)

// TestOneHome fails when a string literal in the module's code spells one of the
// output directory's file names outside this package, alone or as a path segment
// ("pxe/initrd.img", "%s/SHA256SUMS"): a copy a rename here would miss. Allowed,
// by rule rather than by list: tests (a test may spell the file it expects, so
// that a rename is seen), and prose (literals with spaces: help texts and
// messages are docs, held by TestHelpGolden and TestDocsGenerated).
func TestOneHome(t *testing.T) {
	values := []string{
		ManifestFile, SumsFile, SumsSigFile, ProvenanceFile, PublicKeyFile,
		UKIFile, DiskFile, ISOFile, InitrdFile, PXEKernel, PXEScript,
		PXEKernelPath, PXEInitrdPath, PXEScriptPath,
	}
	literals.Each(t, "output", func(l literals.Lit) {
		if strings.ContainsAny(l.Value, " \t\n") {
			return // prose: a help text or message, docs
		}
		for _, v := range values {
			if s := l.Value; s == v || strings.HasSuffix(s, "/"+v) || strings.HasPrefix(s, v+"/") || strings.Contains(s, "/"+v+"/") {
				t.Errorf("%s: %s spells output's %q: use the constant", l.Pos, l.Quoted, v)
				return
			}
		}
	})
}
