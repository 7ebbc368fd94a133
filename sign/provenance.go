package sign

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/output"
)

// in-toto Statement v1 (https://in-toto.io/Statement/v1) with an SLSA
// provenance v1 predicate (https://slsa.dev/provenance/v1).
const (
	StatementType      = "https://in-toto.io/Statement/v1"
	SLSAPredicateType  = "https://slsa.dev/provenance/v1"
	BuildType          = "https://github.com/peerboot/peerboot/buildtypes/image/v1"
	BuilderID          = "peerboot"
	unsignedAnnotation = "unsigned"
)

type Statement struct {
	Type          string               `json:"_type"`
	Subject       []ResourceDescriptor `json:"subject"`
	PredicateType string               `json:"predicateType"`
	Predicate     Provenance           `json:"predicate"`
}

type ResourceDescriptor struct {
	Name        string            `json:"name"`
	Digest      map[string]string `json:"digest"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type Provenance struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

type BuildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   ExternalParameters   `json:"externalParameters"`
	InternalParameters   InternalParameters   `json:"internalParameters"`
	ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies"`
}

type ExternalParameters struct {
	Recipe       string `json:"recipe"`
	RecipeDigest string `json:"recipeDigest"`
}

type InternalParameters struct {
	SourceDateEpoch int64                  `json:"sourceDateEpoch"`
	Stages          []output.ManifestStage `json:"stages"`
}

type RunDetails struct {
	Builder    Builder              `json:"builder"`
	Byproducts []ResourceDescriptor `json:"byproducts,omitempty"`
}

type Builder struct {
	ID      string            `json:"id"`
	Version map[string]string `json:"version"`
}

// digestMap turns a manifest digest ("sha256:HEX", "git:COMMIT") into an
// in-toto DigestSet.
func digestMap(d string) (map[string]string, error) {
	alg, v, ok := strings.Cut(d, ":")
	if !ok || v == "" {
		return nil, fmt.Errorf("digest %q: want ALG:VALUE", d)
	}
	switch alg {
	case "sha256":
		return map[string]string{"sha256": v}, nil
	case "git":
		return map[string]string{"gitCommit": v}, nil
	}
	return nil, fmt.Errorf("digest %q: unknown algorithm %q", d, alg)
}

// NewStatement describes a signed output: its subjects are exactly the files
// SHA256SUMS lists; the build definition comes from manifest.json. Files whose
// signed bytes differ from the unsigned build output are listed as byproducts
// with the unsigned digest, so the reproducible payload stays checkable.
func NewStatement(m *output.Manifest, sums []output.Sum, version string) (*Statement, error) {
	st := &Statement{Type: StatementType, PredicateType: SLSAPredicateType}
	for _, s := range sums {
		st.Subject = append(st.Subject, ResourceDescriptor{Name: s.Path, Digest: map[string]string{"sha256": s.SHA256}})
	}
	bd := &st.Predicate.BuildDefinition
	bd.BuildType = BuildType
	bd.ExternalParameters = ExternalParameters{Recipe: m.Recipe, RecipeDigest: m.RecipeDigest}
	bd.InternalParameters = InternalParameters{SourceDateEpoch: m.SourceDateEpoch, Stages: m.Stages}
	bd.ResolvedDependencies = []ResourceDescriptor{}
	for _, in := range m.Inputs {
		d, err := digestMap(in.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s: input %s: %w", output.ManifestFile, in.Name, err)
		}
		bd.ResolvedDependencies = append(bd.ResolvedDependencies, ResourceDescriptor{Name: in.Name, Digest: d, Annotations: map[string]string{"role": in.Role}})
	}
	st.Predicate.RunDetails.Builder = Builder{ID: BuilderID, Version: map[string]string{"peerboot": version}}
	signed := map[string]string{}
	for _, s := range sums {
		signed[s.Path] = s.SHA256
	}
	for _, o := range m.Outputs {
		if h, ok := signed[o.Path]; ok && h != o.SHA256 {
			st.Predicate.RunDetails.Byproducts = append(st.Predicate.RunDetails.Byproducts, ResourceDescriptor{
				Name: o.Path, Digest: map[string]string{"sha256": o.SHA256}, Annotations: map[string]string{"state": unsignedAnnotation}})
		}
	}
	return st, nil
}

// ParseStatement decodes a statement strictly (unknown fields are errors).
func ParseStatement(b []byte) (*Statement, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var st Statement
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("in-toto statement: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("in-toto statement: trailing data")
	}
	if st.Type != StatementType {
		return nil, fmt.Errorf("in-toto statement: _type %q, want %q", st.Type, StatementType)
	}
	if st.PredicateType != SLSAPredicateType {
		return nil, fmt.Errorf("in-toto statement: predicateType %q, want %q", st.PredicateType, SLSAPredicateType)
	}
	return &st, nil
}
