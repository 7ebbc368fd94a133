// Package build runs the pipeline: stages in order, each asked of the store first.
// This file defines the stages' action keys, which `peerboot plan` prints.
package build

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/driver"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/overlay"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/rootfs"
	"github.com/peerboot/peerboot/sign/keyref"
	"github.com/peerboot/peerboot/store"
)

// stageVersions come from each stage's package: a stage bumps its Version when
// its code changes what it writes, so old store entries are not reused. The
// initramfs, image and sign steps are versioned here, where their wiring lives.
var stageVersions = map[string]int{
	"kernel": kernel.Version, "driver": driver.Version, "rootfs": rootfs.Version,
	"initramfs": 1, "image": 1, "sign": 1,
}

// StageNames in pipeline order.
var StageNames = []string{"kernel", "driver", "rootfs", "initramfs", "image", "sign"}

// Item is one line of a stage's key: an input digest or a recipe field.
type Item struct {
	Kind  string // "input", "stage" or "field"
	Name  string
	Value string
}

// Stage is one planned stage.
type Stage struct {
	Name       string
	Items      []Item
	Key        string   // "<name>-<sha256>"; "" when an input is unresolved
	Cached     bool     // the store holds the output
	Unresolved []string // why Key is unknown
}

// Plan is every stage of a recipe's build.
type Plan struct {
	Recipe *recipe.Resolved
	Tools  Tools
	Stages []*Stage
	// ModSign is what the recipe's sign.module_cert and sign.module_key name;
	// nil when the recipe signs no modules.
	ModSign *ModuleSigning
}

// ModuleSigning is the recipe's module-signing material as the stages use it:
// the kernel stage compiles the certificate into its built-in keyring, the
// rootfs stage signs every module with the key. Only digests enter the keys.
type ModuleSigning struct {
	CertPEM []byte // sign.module_cert, normalised to one PEM CERTIFICATE block
	KeyRef  string // sign.module_key, a "file:" path made relative to the recipe; "" = none
	KeyHash string // digest of the key reference's bytes (never the key itself)
}

// moduleSigning reads sign.module_cert and sign.module_key, relative paths
// taken from the recipe's directory.
func moduleSigning(r *recipe.Resolved) (*ModuleSigning, error) {
	if r.Sign.ModuleCert == "" && r.Sign.ModuleKey == "" {
		return nil, nil
	}
	if r.Sign.ModuleCert == "" {
		return nil, exitcode.Tag(exitcode.Recipe, fmt.Errorf("%s: sign.module_key needs sign.module_cert: the kernel must be built to trust the key", r.Path))
	}
	dir := filepath.Dir(r.Path)
	ref := keyref.Resolve(r.Sign.ModuleCert, dir)
	cert, err := keyref.LoadCert(ref)
	if err != nil {
		return nil, exitcode.Tag(exitcode.Recipe, fmt.Errorf("%s: sign.module_cert: %w", r.Path, err))
	}
	m := &ModuleSigning{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}
	if r.Sign.ModuleKey != "" {
		m.KeyRef = keyref.Resolve(r.Sign.ModuleKey, dir)
		b, _, err := keyref.Read(m.KeyRef)
		if err != nil {
			return nil, exitcode.Tag(exitcode.Recipe, fmt.Errorf("%s: sign.module_key: %w", r.Path, err))
		}
		m.KeyHash = digest(b)
	}
	return m, nil
}

// Tools are peerboot's own binaries that go into the image.
type Tools struct {
	Init     string // static PID 1 (cmd/peerboot-init)
	P2PCheck string // the self-test (cmd/p2pcheck)
}

// ToolsBeside finds the image binaries next to the running peerboot (make builds
// all three into bin/).
func ToolsBeside(exe string) Tools {
	dir := filepath.Dir(exe)
	return Tools{Init: filepath.Join(dir, "peerboot-init"), P2PCheck: filepath.Join(dir, "p2pcheck")}
}

// Stage returns the planned stage by name.
func (p *Plan) Stage(name string) *Stage {
	for _, s := range p.Stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// MakePlan computes every stage's key from pinned inputs, data files and recipe
// fields, and asks the store which outputs it has. It reads no network.
func MakePlan(r *recipe.Resolved, ins []lock.Input, un []lock.Unresolved, st *store.Store, tools Tools) (*Plan, error) {
	p := &Plan{Recipe: r, Tools: tools}
	byRole := map[string][]lock.Input{}
	for _, in := range ins {
		byRole[in.Role] = append(byRole[in.Role], in)
	}
	missing := map[string][]string{}
	for _, u := range un {
		missing[u.Role] = append(missing[u.Role], u.String())
	}
	field := func(name string, v any) Item { return Item{"field", name, fmt.Sprintf("%q", fmt.Sprint(v))} }
	inputs := func(s *Stage, role string) {
		for _, in := range byRole[role] {
			s.Items = append(s.Items, Item{"input", role + " " + in.Name, in.Digest()})
		}
		s.Unresolved = append(s.Unresolved, missing[role]...)
	}
	dep := func(s *Stage, name string) {
		d := p.Stage(name)
		if d.Key == "" {
			s.Unresolved = append(s.Unresolved, "needs stage "+name+", whose key is unknown")
			return
		}
		s.Items = append(s.Items, Item{"stage", name, d.Key})
	}

	epoch := strconv.FormatInt(r.SourceDateEpoch, 10)
	ms, err := moduleSigning(r)
	if err != nil {
		return nil, err
	}
	p.ModSign = ms

	k := &Stage{Name: "kernel"}
	inputs(k, lock.RoleKernelSource)
	for _, f := range r.Kernel.Fragments {
		b, _, err := r.ReadData(f, kernel.Configs, kernel.ConfigsDir)
		if err != nil {
			return nil, fmt.Errorf("kernel.fragments: %w", err)
		}
		k.Items = append(k.Items, Item{"input", "fragment " + f, digest(b)})
	}
	for _, f := range r.Kernel.Patches {
		b, _, err := r.ReadData(f, kernel.Configs, "patches")
		if err != nil {
			return nil, fmt.Errorf("kernel.patches: %w", err)
		}
		k.Items = append(k.Items, Item{"input", "patch " + f, digest(b)})
	}
	if ms != nil { // only then: a recipe without module signing keeps its kernel key
		k.Items = append(k.Items, Item{"input", "module certificate", digest(ms.CertPEM)})
	}
	k.Items = append(k.Items, field("kernel.base", r.Kernel.Base), field("source_date_epoch", epoch))
	p.add(k, st)

	d := &Stage{Name: "driver"}
	dep(d, "kernel")
	inputs(d, lock.RoleDriverSource)
	for _, f := range r.Driver.Patches {
		b, _, err := r.ReadData(f, driver.Patches, driver.PatchDir(r.Driver.Version))
		if err != nil {
			return nil, fmt.Errorf("driver.patches: %w", err)
		}
		d.Items = append(d.Items, Item{"input", "patch " + f, digest(b)})
	}
	d.Items = append(d.Items, field("driver.version", r.Driver.Version),
		field("driver.modules", strings.Join(r.Driver.Modules, ",")), field("source_date_epoch", epoch))
	p.add(d, st)

	rf := &Stage{Name: "rootfs"}
	dep(rf, "kernel")
	dep(rf, "driver")
	inputs(rf, lock.RoleUserspace)
	ov, err := fsDigest(overlay.FS())
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	rf.Items = append(rf.Items, Item{"input", "overlay", ov})
	if ms != nil && ms.KeyRef != "" {
		// The key's digest, not the key: a new key re-signs every module.
		rf.Items = append(rf.Items, Item{"input", "module signing key", ms.KeyHash})
	}
	for _, t := range []struct{ name, path string }{{"peerboot-init", tools.Init}, {"p2pcheck", tools.P2PCheck}} {
		b, err := os.ReadFile(t.path)
		if err != nil {
			rf.Unresolved = append(rf.Unresolved, fmt.Sprintf("image binary %s not found at %s: run make", t.name, t.path))
			continue
		}
		rf.Items = append(rf.Items, Item{"input", "binary " + t.name, digest(b)})
	}
	rf.Items = append(rf.Items,
		field("platform", r.Platform), field("driver.params", r.Driver.Params), field("env", r.Env),
		field("selftest", r.Selftest), field("boot", r.Boot), field("name", r.Name), field("source_date_epoch", epoch),
		// The self-test's verdict reads driver.p2p from the recipe copy in the image.
		field("driver.p2p", r.Driver.P2P))
	p.add(rf, st)

	ir := &Stage{Name: "initramfs"}
	dep(ir, "rootfs")
	p.add(ir, st)

	im := &Stage{Name: "image"}
	dep(im, "kernel")
	dep(im, "initramfs")
	inputs(im, lock.RoleEFIStub)
	im.Items = append(im.Items, field("kernel.cmdline", r.Kernel.Cmdline), field("outputs", r.Outputs), field("source_date_epoch", epoch))
	p.add(im, st)

	sg := &Stage{Name: "sign"}
	dep(sg, "image")
	sg.Items = append(sg.Items, field("sign", r.Sign))
	p.add(sg, st)
	return p, nil
}

func (p *Plan) add(s *Stage, st *store.Store) {
	if len(s.Unresolved) == 0 {
		h := sha256.New()
		fmt.Fprintf(h, "stage %s\nversion %d\n", s.Name, stageVersions[s.Name])
		for _, it := range s.Items {
			fmt.Fprintf(h, "%s %s %s\n", it.Kind, it.Name, it.Value)
		}
		s.Key = s.Name + "-" + hex.EncodeToString(h.Sum(nil))
		s.Cached = st != nil && st.HasOutput(s.Key)
	}
	p.Stages = append(p.Stages, s)
}

// fsDigest hashes every file of fsys with its path, in walk (lexical) order.
func fsDigest(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %s\n", p, digest(b))
		return nil
	})
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), err
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Print writes the plan for people: each stage, whether it would run, its key and inputs.
func (p *Plan) Print(w io.Writer, verbose bool) {
	fmt.Fprintf(w, "recipe %s  %s\n", p.Recipe.Name, p.Recipe.Digest)
	fmt.Fprintf(w, "  files: %s\n\n", strings.Join(p.Recipe.Files, " <- "))
	for i, s := range p.Stages {
		status := "run: not in store"
		switch {
		case s.Key == "":
			status = "blocked: unresolved inputs"
		case s.Cached:
			status = "cached"
		}
		key := s.Key
		if key == "" {
			key = "(unknown)"
		}
		fmt.Fprintf(w, "%d. %-9s %-26s %s\n", i+1, s.Name, status, key)
		for _, u := range s.Unresolved {
			fmt.Fprintf(w, "     unresolved: %s\n", u)
		}
		for _, it := range s.Items {
			if it.Kind == "field" && !verbose {
				continue
			}
			v := it.Value
			if !verbose && len(v) > 80 {
				v = v[:77] + "..."
			}
			fmt.Fprintf(w, "     %-5s %-48s %s\n", it.Kind, it.Name, v)
		}
	}
}
