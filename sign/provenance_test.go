package sign

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// A provenance statement validly signed with the artifact key, but describing
// another build, is refused: Verify compares every subject's digest with
// SHA256SUMS and the buildDefinition with manifest.json, not only the
// signature. (Issue 35: neither comparison had a test that failed without it.)
func TestVerifyComparesProvenance(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		edit func(st *Statement)
		msg  string
	}{
		{"subject digest", func(st *Statement) {
			st.Subject[0].Digest["sha256"] = strings.Repeat("ab", 32)
		}, "has digest map[sha256:abab"},
		{"subject missing", func(st *Statement) { st.Subject = st.Subject[1:] }, "lacks subject"},
		{"subject twice", func(st *Statement) { st.Subject = append(st.Subject, st.Subject[0]) }, "subject manifest.json appears twice"},
		// The right sha256 beside a digest verify cannot check is still refused:
		// a consumer may trust the other one.
		{"subject with a second digest", func(st *Statement) {
			st.Subject[0].Digest["sha512"] = strings.Repeat("ef", 64)
		}, "subject manifest.json has digest map[sha256:"},
		{"subject not in SHA256SUMS", func(st *Statement) {
			st.Subject = append(st.Subject, ResourceDescriptor{Name: "extra.img", Digest: map[string]string{"sha256": strings.Repeat("cd", 32)}})
		}, "subject extra.img is not listed in SHA256SUMS"},
		{"buildDefinition recipe digest", func(st *Statement) {
			st.Predicate.BuildDefinition.ExternalParameters.RecipeDigest = "sha256:" + strings.Repeat("0", 64)
		}, "buildDefinition differs from what manifest.json records"},
		{"buildDefinition dependency", func(st *Statement) {
			d := &st.Predicate.BuildDefinition.ResolvedDependencies[0]
			for k := range d.Digest {
				d.Digest[k] = strings.Repeat("1", len(d.Digest[k]))
			}
		}, "buildDefinition differs from what manifest.json records"},
		{"buildDefinition epoch", func(st *Statement) {
			st.Predicate.BuildDefinition.InternalParameters.SourceDateEpoch++
		}, "buildDefinition differs from what manifest.json records"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSynthetic(t, false)
			o := signOpts(Ed25519KeyFile)
			o.DBKey, o.DBCert = "", "" // the UKI's Authenticode is not the point here
			if err := SignOutput(ctx, dir, o); err != nil {
				t.Fatal(err)
			}
			vo := verifyOpts(Ed25519PubFile)
			vo.DBCert = ""
			if err := Verify(ctx, dir, vo); err != nil {
				t.Fatalf("the untouched output: %v", err)
			}
			// Re-sign an edited statement with the same key: the signature is good.
			env, err := os.ReadFile(filepath.Join(dir, output.ProvenanceFile))
			if err != nil {
				t.Fatal(err)
			}
			signer, err := LoadSigner(key(Ed25519KeyFile))
			if err != nil {
				t.Fatal(err)
			}
			payload, err := OpenEnvelope(env, signer.Public(), InTotoPayloadType)
			if err != nil {
				t.Fatal(err)
			}
			st, err := ParseStatement(payload)
			if err != nil {
				t.Fatal(err)
			}
			c.edit(st)
			payload, _ = json.Marshal(st)
			e, err := SignEnvelope(signer, InTotoPayloadType, payload)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := MarshalEnvelope(e)
			if err := os.WriteFile(filepath.Join(dir, output.ProvenanceFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
			err = Verify(ctx, dir, vo)
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("a re-signed statement of another build: Verify = %v, want a VerifyError", err)
			}
			if len(ve.Problems) == 0 || ve.Problems[0].File != output.ProvenanceFile || !strings.Contains(ve.Problems[0].What, c.msg) {
				t.Errorf("got %v\nwant a %s problem saying %q", err, output.ProvenanceFile, c.msg)
			}
			for _, p := range ve.Problems {
				if strings.Contains(p.What, "does not verify") {
					t.Errorf("the signature was re-made with the right key, yet: %v", p)
				}
			}
		})
	}
}
