// Package output is the layout of a build's output directory (out/<recipe>/ as
// `peerboot build` publishes it and `peerboot sign` rewrites it): the files' names,
// the output kinds a recipe asks for, manifest.json and SHA256SUMS. The builder writes
// it; sign, oci, serve, flash, run and publish read it, all through these names, and
// none of them needs the builder to do so. It imports nothing of the module.
package output

// Files of an output directory.
const (
	// ManifestFile is the build's manifest.json (Manifest).
	ManifestFile = "manifest.json"
	// SumsFile lists every other file's sha256 (ParseSums, FormatSums).
	SumsFile = "SHA256SUMS"
	// SumsSigFile is SumsFile's signature, after `peerboot sign`.
	SumsSigFile = "SHA256SUMS.sig"
	// ProvenanceFile is the signed in-toto statement, after `peerboot sign`.
	ProvenanceFile = "provenance.intoto.jsonl"
	// PublicKeyFile is the artifact key's public half, after `peerboot sign`.
	PublicKeyFile = "cosign.pub"

	// UKIFile is the unified kernel image (KindUKI).
	UKIFile = "peerboot.efi"
	// DiskFile is the GPT disk image (KindDisk).
	DiskFile = "disk.img"
	// ISOFile is the El Torito ISO for BMC virtual media (KindISO).
	ISOFile = "peerboot.iso"
	// InitrdFile is the initramfs, in the initramfs stage's output and the PXE bundle.
	InitrdFile = "initrd.img"
	// PXEDir holds the PXE bundle (KindPXE): PXEKernel, InitrdFile, PXEScript.
	PXEDir = "pxe"
	// PXEKernel is the bundle's kernel.
	PXEKernel = "vmlinuz"
	// PXEScript is the bundle's iPXE script.
	PXEScript = "boot.ipxe"
)

// In PXEDir, the bundle's files as an output directory lists them.
const (
	PXEKernelPath = PXEDir + "/" + PXEKernel
	PXEInitrdPath = PXEDir + "/" + InitrdFile
	PXEScriptPath = PXEDir + "/" + PXEScript
)

// MetaFiles are the output's files that describe the images rather than boot:
// served and pushed beside them when present.
func MetaFiles() []string {
	return []string{ManifestFile, SumsFile, SumsSigFile, ProvenanceFile, PublicKeyFile}
}

// Manifest describes one published build: what went in and what came out.
type Manifest struct {
	Recipe          string           `json:"recipe"`
	RecipeDigest    string           `json:"recipe_digest"`
	SourceDateEpoch int64            `json:"source_date_epoch"`
	Inputs          []ManifestInput  `json:"inputs"`
	Stages          []ManifestStage  `json:"stages"`
	Outputs         []ManifestOutput `json:"outputs"`
	// PCR11 is what systemd-stub leaves in PCR 11 for peerboot.efi
	// (measure.Predict), so a collector can check a node's quote without
	// parsing the UKI. Absent when the build has no UKI.
	PCR11 *ManifestPCR11 `json:"pcr11,omitempty"`
}

// ManifestPCR11 is the predicted PCR 11, sha256 bank, per boot phase.
type ManifestPCR11 struct {
	Bank     string          `json:"bank"`     // "sha256"
	Sections []string        `json:"sections"` // measured, in the stub's order
	Phases   []ManifestPhase `json:"phases"`   // "" (after the stub), then systemd-measure's default phases
}

// ManifestPhase is PCR 11 after one boot phase.
type ManifestPhase struct {
	Phase string `json:"phase"`
	Value string `json:"value"` // hex
}

// ManifestInput is one pinned input the build used.
type ManifestInput struct {
	Role   string `json:"role"`
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// ManifestStage is one stage the images came from, by its store key.
type ManifestStage struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// ManifestOutput is one file of the output directory.
type ManifestOutput struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Kind is one of the images a recipe's outputs.formats asks for.
type Kind string

// The output kinds.
const (
	KindUKI  Kind = "uki"  // UKIFile
	KindDisk Kind = "disk" // DiskFile
	KindPXE  Kind = "pxe"  // PXEDir
	KindISO  Kind = "iso"  // ISOFile
)

// Kinds are all the kinds, in the order messages list them.
func Kinds() []Kind { return []Kind{KindUKI, KindDisk, KindPXE, KindISO} }

// KindNames are the kinds as strings, for validation messages.
func KindNames() []string {
	var out []string
	for _, k := range Kinds() {
		out = append(out, string(k))
	}
	return out
}
