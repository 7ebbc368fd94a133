package sign

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// NewStatement without keys or files: subjects are SHA256SUMS's files; each
// input's digest becomes a resolved dependency (sha256 or git commit); an
// output signed since the build (its hash in SHA256SUMS differs from the
// manifest's) is a byproduct marked unsigned, and nothing else is.
func TestNewStatement(t *testing.T) {
	m := &output.Manifest{Recipe: "r.toml", RecipeDigest: "sha256:aa", SourceDateEpoch: 7,
		Inputs: []output.ManifestInput{{Role: "kernel", Name: "linux", Digest: "sha256:bb"}, {Role: "source", Name: "tree", Digest: "git:c0ffee"}},
		Outputs: []output.ManifestOutput{
			{Path: "peerboot.efi", SHA256: "01"}, // signed since: SHA256SUMS says 02
			{Path: "disk.img", SHA256: "03"},     // unchanged
			{Path: "extra.bin", SHA256: "04"},    // not in SHA256SUMS
		}}
	sums := []output.Sum{{Path: "peerboot.efi", SHA256: "02"}, {Path: "disk.img", SHA256: "03"}}
	st, err := NewStatement(m, sums, "v1")
	if err != nil {
		t.Fatal(err)
	}
	want := []ResourceDescriptor{{Name: "peerboot.efi", Digest: map[string]string{"sha256": "02"}}, {Name: "disk.img", Digest: map[string]string{"sha256": "03"}}}
	if !reflect.DeepEqual(st.Subject, want) {
		t.Errorf("subjects %+v, want %+v", st.Subject, want)
	}
	deps := []ResourceDescriptor{
		{Name: "linux", Digest: map[string]string{"sha256": "bb"}, Annotations: map[string]string{"role": "kernel"}},
		{Name: "tree", Digest: map[string]string{"gitCommit": "c0ffee"}, Annotations: map[string]string{"role": "source"}},
	}
	if got := st.Predicate.BuildDefinition.ResolvedDependencies; !reflect.DeepEqual(got, deps) {
		t.Errorf("dependencies %+v, want %+v", got, deps)
	}
	bp := []ResourceDescriptor{{Name: "peerboot.efi", Digest: map[string]string{"sha256": "01"}, Annotations: map[string]string{"state": "unsigned"}}}
	if got := st.Predicate.RunDetails.Byproducts; !reflect.DeepEqual(got, bp) {
		t.Errorf("byproducts %+v, want %+v", got, bp)
	}
	for _, d := range []string{"sha256:", "sha256", "md5:aa", ":aa"} {
		m.Inputs[0].Digest = d
		if _, err := NewStatement(m, sums, "v1"); err == nil || !strings.Contains(err.Error(), "input linux: digest") {
			t.Errorf("input digest %q: %v, want an error naming the input", d, err)
		}
	}
}

// ParseStatement takes only an in-toto v1 statement of SLSA provenance v1,
// one JSON value, no unknown fields.
func TestParseStatement(t *testing.T) {
	good, err := json.Marshal(Statement{Type: StatementType, PredicateType: SLSAPredicateType})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseStatement(good); err != nil {
		t.Fatalf("a good statement: %v", err)
	}
	s := string(good)
	for name, c := range map[string]struct{ body, err string }{
		"other _type":         {strings.Replace(s, StatementType, "https://in-toto.io/Statement/v0.1", 1), "_type"},
		"other predicateType": {strings.Replace(s, SLSAPredicateType, "https://slsa.dev/provenance/v0.2", 1), "predicateType"},
		"unknown field":       {strings.Replace(s, `"subject"`, `"subjects"`, 1), "unknown field"},
		"trailing value":      {s + s, "trailing data"},
		"not JSON":            {"{", "in-toto statement"},
	} {
		if _, err := ParseStatement([]byte(c.body)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.err)
		}
	}
}
