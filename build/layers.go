package build

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/driver"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/initramfs"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/overlay"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/rootfs"
	"github.com/peerboot/peerboot/sign/keyref"
)

// A layer stage's output: its tree, and that tree as one initramfs segment.
const (
	layerTree    = "root"
	layerSegment = "segment.cpio.zst"
)

// 3. Userspace: the pinned .debs, extracted, NVIDIA's installer unpacked (when the
// recipe pins one), with the NVIDIA links and the linker cache.
func userspaceStage() *stage {
	return &stage{
		Name: StageUserspace, Version: rootfs.Version,
		Roles:  []string{lock.RoleUserspace, lock.RoleInstaller},
		Fields: []string{"driver.version"},
		Clock:  clockOwn,
		Run: func(ctx context.Context, sr *stageRun) error {
			opt := rootfs.UserspaceOptions{DriverVersion: sr.Recipe.Driver.Version, Scratch: sr.Scratch}
			for _, in := range sr.Inputs {
				if in.Role == lock.RoleInstaller {
					opt.Installer, opt.InstallerSHA256 = sr.Store.BlobPath(in.SHA256), in.SHA256
					continue
				}
				opt.Debs = append(opt.Debs, sr.Store.BlobPath(in.SHA256))
			}
			return layer(ctx, sr, func(root string) error { return rootfs.Userspace(ctx, opt, root) })
		},
	}
}

const moduleKeyDatum = "module signing key"

// 4. Modules: the kernel's and the driver's modules, signed when the recipe says so, with depmod.
func modulesStage() *stage {
	return &stage{
		Name: StageModules, Version: rootfs.Version,
		Deps:       []StageName{StageKernel, StageDriver},
		DataFields: []string{"sign.module_key", "sign.module_cert"},
		Clock:      clockOwn,
		Data: func(pc *planContext) ([]Datum, []string, error) {
			ms, err := pc.moduleSigning()
			if err != nil || ms == nil || ms.Key == nil {
				return nil, nil, err
			}
			// The key's digest enters the key, never the key: a new key re-signs every module.
			return []Datum{{Name: moduleKeyDatum, Bytes: ms.Key}, {Name: moduleCertDatum, Bytes: ms.CertPEM}}, nil, nil
		},
		Run: func(ctx context.Context, sr *stageRun) error {
			kout := sr.Dep(StageKernel)
			rel, err := kernel.ReadRelease(kout)
			if err != nil {
				return err
			}
			kos, err := filepath.Glob(filepath.Join(sr.Dep(StageDriver), driver.ModulesDir, "lib", "modules", rel, "updates", "dkms", "*.ko"))
			if err != nil {
				return err
			}
			sort.Strings(kos)
			opt := rootfs.ModulesOptions{KernelModules: filepath.Join(kout, kernel.ModulesDir, "lib", "modules", rel), Release: rel, DriverModules: kos}
			if opt.ModuleKey, opt.ModuleCert, err = moduleSigner(sr); err != nil {
				return err
			}
			return layer(ctx, sr, func(root string) error { return rootfs.Modules(ctx, opt, root) })
		},
	}
}

// moduleSigner parses the module key and certificate the plan read.
func moduleSigner(sr *stageRun) (crypto.Signer, *x509.Certificate, error) {
	kb, ok := sr.Datum(moduleKeyDatum)
	if !ok {
		return nil, nil, nil
	}
	key, err := keyref.ParsePrivateKeyPEM(kb)
	if err != nil {
		return nil, nil, fmt.Errorf("sign.module_key: %w", err)
	}
	cb, _ := sr.Datum(moduleCertDatum)
	cert, err := keyref.ParseCert(cb)
	if err != nil {
		return nil, nil, fmt.Errorf("sign.module_cert: %w", err)
	}
	return key, cert, nil
}

// 5. Tools: the init and the self-test (peerboot-init, p2pcheck: ~21 MB that
// make builds beside peerboot), a segment of their own keyed by their digests
// only, so an overlay or recipe edit re-packs none of it. No fields and no
// clock: the files' times are 0, the same for every recipe.
func toolsStage() *stage {
	return &stage{
		Name: StageTools, Version: 1,
		Data: func(pc *planContext) ([]Datum, []string, error) {
			var data []Datum
			var unresolved []string
			for _, t := range []struct{ at, path string }{{bootproto.InImage(bootproto.InitPath), pc.Tools.Init}, {bootproto.InImage(bootproto.P2PCheckPath), pc.Tools.P2PCheck}} {
				// Not read here: the plan keys them by the store's stat cache,
				// and only the stage's run, when it runs, reads their bytes.
				path, err := filepath.Abs(t.path)
				if err == nil {
					var fi os.FileInfo
					if fi, err = os.Stat(path); err == nil && !fi.Mode().IsRegular() {
						err = errors.New("not a regular file")
					}
				}
				if err != nil {
					unresolved = append(unresolved, fmt.Sprintf("image binary /%s not found at %s: run make", t.at, t.path))
					continue
				}
				data = append(data, Datum{Name: "binary " + t.at, Path: path})
			}
			return data, unresolved, nil
		},
		Run: func(ctx context.Context, sr *stageRun) error {
			opt := rootfs.ConfigOptions{Executables: map[string][]byte{}}
			for _, d := range sr.Data {
				if p, ok := strings.CutPrefix(d.Name, "binary "); ok {
					b, err := d.read()
					if err != nil {
						return err
					}
					opt.Executables[p] = b
				}
			}
			return layer(ctx, sr, func(root string) error { return rootfs.Config(ctx, opt, root) })
		},
	}
}

// 6. Config: the overlay and the files generated from the recipe (the recipe
// itself among them). Small, and the initrd's last segment, so an edit here
// re-packs some KiB and changes only the initrd's tail.
func configStage() *stage {
	return &stage{
		Name: StageConfig, Version: rootfs.Version,
		Fields: []string{wholeRecipe},
		Clock:  clockAll,
		Data: func(pc *planContext) ([]Datum, []string, error) {
			var data []Datum
			err := fs.WalkDir(overlay.FS(), ".", func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := fs.ReadFile(overlay.FS(), p)
				data = append(data, Datum{Name: "overlay " + p, Bytes: b})
				return err
			})
			if err != nil {
				return nil, nil, fmt.Errorf("overlay: %w", err)
			}
			return data, nil, nil
		},
		Run: func(ctx context.Context, sr *stageRun) error {
			opt := rootfs.ConfigOptions{Overlay: map[string][]byte{}, Files: generatedFiles(sr.Recipe)}
			for _, d := range sr.Data {
				if p, ok := strings.CutPrefix(d.Name, "overlay "); ok {
					opt.Overlay[p] = d.Bytes
				}
			}
			return layer(ctx, sr, func(root string) error { return rootfs.Config(ctx, opt, root) })
		},
	}
}

// layer builds a layer's tree with lay, then packs it as the layer's segment.
func layer(ctx context.Context, sr *stageRun, lay func(root string) error) error {
	root := filepath.Join(sr.Out, layerTree)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if err := lay(root); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(sr.Out, layerSegment))
	if err != nil {
		return err
	}
	st, err := initramfs.Pack(ctx, root, sr.Epoch, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(sr.Log, "%s: %d files, %d dirs, %d symlinks, %.1f MiB uncompressed\n", sr.Name, st.Files, st.Dirs, st.Symlinks, float64(st.Bytes)/(1<<20))
	return nil
}

// ModuleSigning is the recipe's module-signing material: the kernel stage
// compiles the certificate into its built-in keyring, the modules stage signs
// every module with the key.
type ModuleSigning struct {
	CertPEM []byte // sign.module_cert, normalised to one PEM CERTIFICATE block
	Key     []byte // sign.module_key's bytes; nil = modules stay unsigned
}

// moduleSigning reads sign.module_cert and sign.module_key, relative paths
// taken from the recipe's directory.
func moduleSigning(r *recipe.Resolved) (*ModuleSigning, error) {
	if r.Sign.ModuleCert == "" && r.Sign.ModuleKey == "" {
		return nil, nil
	}
	if r.Sign.ModuleCert == "" {
		return nil, exitcode.Tag(exitcode.Recipe, r.ErrorAt("sign.module_key", "needs sign.module_cert: the kernel must be built to trust the key"))
	}
	dir := filepath.Dir(r.Path)
	cert, err := keyref.LoadCert(keyref.Resolve(r.Sign.ModuleCert, dir))
	if err != nil {
		return nil, exitcode.Tag(exitcode.Recipe, r.ErrorAt("sign.module_cert", "%v", err))
	}
	m := &ModuleSigning{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}
	if r.Sign.ModuleKey != "" {
		b, _, err := keyref.Read(keyref.Resolve(r.Sign.ModuleKey, dir))
		if err != nil {
			return nil, exitcode.Tag(exitcode.Recipe, r.ErrorAt("sign.module_key", "%v", err))
		}
		m.Key = b
	}
	return m, nil
}

// asRecipeErrors flattens err into located recipe errors where it is one (so a
// stage's data problems are reported together), else one unlocated error.
func asRecipeErrors(err error) recipe.Errors {
	var es recipe.Errors
	if errors.As(err, &es) {
		return es
	}
	var e *recipe.Error
	if errors.As(err, &e) {
		return recipe.Errors{e}
	}
	return recipe.Errors{{Msg: err.Error()}}
}

// Data is every data file a recipe names (kernel fragments and patches, driver
// patches, the module-signing key and certificate, the PCR key) and the image's
// binaries, each read once by ReadData. MakePlan keys these bytes and the
// stages' runs get them, so a build reads each file once and what was checked
// is what is built, even if a file changes meanwhile.
type Data struct {
	Recipe *recipe.Resolved
	Tools  Tools
	// StatCache is the file where MakePlan keeps the digests of the data
	// files it keys by path (the image binaries) by their stat; "": the
	// store's given to MakePlan, if any (store.StatCacheHint).
	StatCache string
	stages    map[StageName]stageData
}

// stageData is what one stage's Data function read.
type stageData struct {
	data       []Datum
	unresolved []string // a missing binary: the plan names it, `make` fixes it
}

// ReadData reads every data file r names and returns every problem at once,
// each at the file and line that named it. lock, plan, fetch and build all run
// it, so no command accepts a recipe another refuses.
func ReadData(r *recipe.Resolved, tools Tools) (*Data, error) {
	pc := &planContext{Recipe: r, Tools: tools}
	d := &Data{Recipe: r, Tools: tools, stages: map[StageName]stageData{}}
	var errs recipe.Errors
	seen := map[string]bool{}
	for _, s := range pipeline() {
		if s.Data == nil {
			continue
		}
		data, unresolved, err := s.Data(pc)
		if err != nil {
			for _, e := range asRecipeErrors(err) {
				if k := e.Error(); !seen[k] { // kernel and modules both key the certificate
					seen[k] = true
					errs = append(errs, e)
				}
			}
			continue
		}
		d.stages[s.Name] = stageData{data, unresolved}
	}
	if len(errs) > 0 {
		return nil, exitcode.Tag(exitcode.Recipe, errs)
	}
	return d, nil
}
