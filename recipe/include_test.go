package recipe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// minimalRepo is one valid repository; minimal adds the two required sources to
// make the smallest valid recipe.
const minimalRepo = `
[[repo]]
suite = "bookworm"
components = ["main"]
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
mirror = "system"
`

const minimal = minimalRepo + `
[kernel]
source = { deb = "linux-source-6.1" }

[driver]
version = "535.261.03"
source = { deb = "nvidia-open-kernel-source" }
`

// writeTree writes files (name -> text) under a fresh temp dir and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestIncludeRules(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name  string
		files map[string]string // "main.toml" is loaded
		check func(t *testing.T, dir string, r *Resolved)
	}{
		{
			name: "including file wins",
			files: map[string]string{
				"base.toml": minimal + "[boot]\non_pass = \"reboot\"\non_fail = \"reboot\"\n",
				"main.toml": "include = [\"base.toml\"]\n[boot]\non_pass = \"halt\"\n",
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				if r.Boot.OnPass != "halt" || r.Boot.OnFail != "reboot" {
					t.Errorf("boot = %+v: want on_pass from main.toml, on_fail from base.toml", r.Boot)
				}
				if got, want := r.KeyLocation("boot.on_pass"), filepath.Join(dir, "main.toml")+":3"; got != want {
					t.Errorf("KeyLocation(boot.on_pass) = %s, want %s", got, want)
				}
				if got, want := r.KeyLocation("boot.on_fail"), filepath.Join(dir, "base.toml")+":16"; got != want {
					t.Errorf("KeyLocation(boot.on_fail) = %s, want %s", got, want)
				}
			},
		},
		{
			name: "later include wins",
			files: map[string]string{
				"a.toml":    "[boot]\non_fail = \"reboot\"\non_pass = \"reboot\"\n",
				"b.toml":    "[boot]\non_fail = \"halt\"\n",
				"main.toml": "include = [\"a.toml\", \"b.toml\"]\n" + minimal,
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				if r.Boot.OnFail != "halt" || r.Boot.OnPass != "reboot" {
					t.Errorf("boot = %+v: want on_fail from b.toml, on_pass from a.toml", r.Boot)
				}
			},
		},
		{
			name: "earlier include loses whatever the order",
			files: map[string]string{
				"a.toml":    "[boot]\non_fail = \"reboot\"\n",
				"b.toml":    "[boot]\non_fail = \"halt\"\n",
				"main.toml": "include = [\"b.toml\", \"a.toml\"]\n" + minimal,
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				if r.Boot.OnFail != "reboot" {
					t.Errorf("boot.on_fail = %q, want a.toml's reboot", r.Boot.OnFail)
				}
			},
		},
		{
			name: "an include's own includes lie below it",
			files: map[string]string{
				"sub/deep.toml": "[boot]\non_fail = \"reboot\"\non_pass = \"reboot\"\n",
				"sub/mid.toml":  "include = [\"deep.toml\"]\n[boot]\non_pass = \"halt\"\n",
				"main.toml":     "include = [\"sub/mid.toml\"]\n" + minimal,
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				if r.Boot.OnFail != "reboot" || r.Boot.OnPass != "halt" {
					t.Errorf("boot = %+v", r.Boot)
				}
			},
		},
		{
			name: "tables merge key by key",
			files: map[string]string{
				"base.toml": minimal + `
[platform]
cpu_vendor = "intel"
sockets = 2
[env]
NCCL_DEBUG = "INFO"
NCCL_P2P_LEVEL = "NVL"
[driver.params.nvidia]
NVreg_EnableResizableBar = "1"
[selftest.deadlines]
total = "10m"
`,
				"main.toml": `include = ["base.toml"]
[platform]
numa_nodes = 2
[env]
NCCL_P2P_LEVEL = "SYS"
[driver.params.nvidia]
NVreg_OpenRmEnableUnsupportedGpus = "1"
[selftest.deadlines]
nccl = "8m"
`,
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				p := r.Platform
				if p.CPUVendor != "intel" || p.Sockets != 2 || p.NUMANodes != 2 {
					t.Errorf("platform = %+v", p)
				}
				if want := map[string]string{"NCCL_DEBUG": "INFO", "NCCL_P2P_LEVEL": "SYS"}; !reflect.DeepEqual(r.Env, want) {
					t.Errorf("env = %v, want %v", r.Env, want)
				}
				if want := map[string]string{"NVreg_EnableResizableBar": "1", "NVreg_OpenRmEnableUnsupportedGpus": "1"}; !reflect.DeepEqual(r.Driver.Params["nvidia"], want) {
					t.Errorf("driver.params.nvidia = %v, want %v", r.Driver.Params["nvidia"], want)
				}
				d := r.Selftest.Deadlines
				if d.Total.Std().String() != "10m0s" || d.NCCL.Std().String() != "8m0s" || d.Precheck.Std().String() != "20s" {
					t.Errorf("deadlines = %+v: want total from base, nccl from main, precheck from defaults", d)
				}
			},
		},
		{
			name: "arrays are replaced whole",
			files: map[string]string{
				"base.toml": strings.Replace(minimal, "[kernel]\n", "[kernel]\nfragments = [\"base.config\", \"gpu-node.config\", \"qemu.config\"]\n", 1) + `
[userspace]
packages = ["nvidia-smi", "libcuda1"]
`,
				"main.toml": `include = ["base.toml"]
[kernel]
fragments = ["base.config"]
[outputs]
formats = ["uki"]
`,
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				if want := []string{"base.config"}; !reflect.DeepEqual(r.Kernel.Fragments, want) {
					t.Errorf("kernel.fragments = %q, want %q", r.Kernel.Fragments, want)
				}
				if want := []output.Kind{output.KindUKI}; !reflect.DeepEqual(r.Outputs.Formats, want) {
					t.Errorf("outputs.formats = %q, want %q (defaults' list replaced)", r.Outputs.Formats, want)
				}
				if want := []string{"nvidia-smi", "libcuda1"}; !reflect.DeepEqual(r.Userspace.Packages, want) {
					t.Errorf("userspace.packages = %q, want base's %q", r.Userspace.Packages, want)
				}
			},
		},
		{
			name: "arrays of tables are replaced whole",
			files: map[string]string{
				"base.toml": minimal + `
[[repo]]
suite = "bookworm-security"
components = ["main", "non-free"]
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
mirror = "system"

[userspace]
packages = ["nvidia-smi"]
exclude = [
  { package = "dpkg", reason = "no package manager" },
  { package = "debconf", reason = "no maintainer scripts" },
]
`,
				"main.toml": `include = ["base.toml"]
[[repo]]
name = "local"
suite = "trixie"
components = ["main"]
keyring = "./local.gpg"
url = "file:///srv/mirror"

[userspace]
exclude = [{ package = "perl-base", reason = "no perl" }]
`,
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				if len(r.Repos) != 1 || r.Repos[0].Name != "local" || r.Repos[0].Mirror != "" || !reflect.DeepEqual(r.Repos[0].Components, []string{"main"}) {
					t.Errorf("repos = %+v: want main.toml's one repository, nothing inherited", r.Repos)
				}
				if want := []Exclude{{"perl-base", "no perl"}}; !reflect.DeepEqual(r.Userspace.Exclude, want) {
					t.Errorf("userspace.exclude = %+v, want %+v", r.Userspace.Exclude, want)
				}
			},
		},
		{
			name: "sources are replaced whole",
			files: map[string]string{
				"base.toml": minimalRepo + `
[kernel]
source = { deb = "linux-source-6.1", version = "6.1.192-3" }
[driver]
version = "535.261.03"
source = { deb = "nvidia-open-kernel-source", version = "535.261.03-1" }
[outputs]
efi_stub = { deb = "systemd-boot-efi", version = "252.39-1" }
`,
				"main.toml": `include = ["base.toml"]
[kernel]
source = { url = "https://cdn.kernel.org/pub/linux/kernel/v6.x/linux-6.12.tar.xz", sha256 = "` + sha + `" }
[driver.source]
git = "https://github.com/NVIDIA/open-gpu-kernel-modules.git"
commit = "23e9e7621487fe632040a370249f690a456967dd"
[outputs.efi_stub]
url = "file:///srv/linuxx64.efi.stub"
sha256 = "` + sha + `"
`,
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				for key, s := range map[string]Source{"kernel.source": r.Kernel.Source, "driver.source": r.Driver.Source, "outputs.efi_stub": r.Outputs.EFIStub} {
					if s.Deb != "" || s.Version != "" {
						t.Errorf("%s = %+v: inherited deb/version from the layer below", key, s)
					}
				}
				if r.Kernel.Source.SHA256 != sha || r.Driver.Source.Commit == "" || r.Outputs.EFIStub.URL == "" {
					t.Errorf("sources lost main.toml's keys: %+v %+v %+v", r.Kernel.Source, r.Driver.Source, r.Outputs.EFIStub)
				}
			},
		},
		{
			name: "a source given again is not merged with the one below",
			files: map[string]string{
				"base.toml": strings.Replace(minimal, `source = { deb = "linux-source-6.1" }`, `source = { deb = "linux-source-6.1", version = "6.1.192-3" }`, 1),
				"main.toml": "include = [\"base.toml\"]\n[kernel]\nsource = { deb = \"linux-source-6.12\" }\n",
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				if want := (Source{Deb: "linux-source-6.12"}); r.Kernel.Source != want {
					t.Errorf("kernel.source = %+v, want %+v", r.Kernel.Source, want)
				}
			},
		},
		{
			name: "files lists the layers in order",
			files: map[string]string{
				"c.toml":    "[boot]\non_pass = \"halt\"\n",
				"a.toml":    "include = [\"c.toml\"]\n",
				"b.toml":    "[boot]\non_fail = \"halt\"\n",
				"main.toml": "include = [\"a.toml\", \"b.toml\"]\n" + minimal,
			},
			check: func(t *testing.T, dir string, r *Resolved) {
				want := []string{defaultsFile}
				for _, f := range []string{"c.toml", "a.toml", "b.toml", "main.toml"} {
					want = append(want, filepath.Join(dir, f))
				}
				if !reflect.DeepEqual(r.Files, want) {
					t.Errorf("Files = %q, want %q", r.Files, want)
				}
				if r.Path != filepath.Join(dir, "main.toml") || r.Name != "main" {
					t.Errorf("Path = %q, Name = %q", r.Path, r.Name)
				}
				if r.Include != nil {
					t.Errorf("Include = %q: the merged recipe keeps no include list", r.Include)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTree(t, tt.files)
			r, err := Load(filepath.Join(dir, "main.toml"))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tt.check(t, dir, r)
		})
	}
}

// TestIncludeErrors checks that every problem names the file and line it is in.
func TestIncludeErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		file  string // where the error must be reported
		line  int
		key   string
		msg   string // a part of the message
	}{
		{
			name: "validation error in an include",
			files: map[string]string{
				"base.toml": "# base\n[platform]\nsockets = 2\ngpus = -1\n",
				"main.toml": "include = [\"base.toml\"]\n" + minimal,
			},
			file: "base.toml", line: 4, key: "platform.gpus", msg: "want 0..16, got -1",
		},
		{
			name: "a key overridden in main is reported in main",
			files: map[string]string{
				"base.toml": "[platform]\nsockets = 2\n",
				"main.toml": "include = [\"base.toml\"]\n" + minimal + "\n[platform]\nsockets = 99\n",
			},
			file: "main.toml", line: 17, key: "platform.sockets", msg: "got 99",
		},
		{
			name: "unknown key in an include",
			files: map[string]string{
				"sub/base.toml": "\n\n[selftest]\nverfiy = true\n",
				"main.toml":     "include = [\"sub/base.toml\"]\n" + minimal,
			},
			file: "sub/base.toml", line: 4, key: "selftest.verfiy", msg: "did you mean selftest.verify?",
		},
		{
			name: "syntax error in a nested include",
			files: map[string]string{
				"deep.toml": "[boot]\non_pass = shell\n",
				"mid.toml":  "include = [\"deep.toml\"]\n",
				"main.toml": "include = [\"mid.toml\"]\n" + minimal,
			},
			file: "deep.toml", line: 2, key: "boot.on_pass", msg: "expected value",
		},
		{
			name: "wrong type in an include",
			files: map[string]string{
				"base.toml": "[driver]\nmodules = \"nvidia\"\n",
				"main.toml": "include = [\"base.toml\"]\n" + minimal,
			},
			file: "base.toml", line: 2, key: "driver.modules", msg: "wrong type",
		},
		{
			name: "missing include, on the line that names it",
			files: map[string]string{
				"main.toml": "include = [\n  \"a.toml\",\n  \"gone.toml\",\n]\n" + minimal,
				"a.toml":    "",
			},
			file: "main.toml", line: 3, key: "include", msg: "cannot read",
		},
		{
			name: "include cycle",
			files: map[string]string{
				"a.toml":    "include = [\"b.toml\"]\n",
				"b.toml":    "# b\ninclude = [\"a.toml\"]\n",
				"main.toml": "include = [\"a.toml\"]\n" + minimal,
			},
			file: "b.toml", line: 2, key: "include", msg: "include cycle",
		},
		{
			name: "include of itself",
			files: map[string]string{
				"main.toml": "include = [\"main.toml\"]\n" + minimal,
			},
			file: "main.toml", line: 1, key: "include", msg: "include cycle",
		},
		{
			name: "include is not a list of names",
			files: map[string]string{
				"main.toml": "\ninclude = [\"\"]\n" + minimal,
			},
			file: "main.toml", line: 2, key: "include", msg: "want a list of file names",
		},
		{
			name: "a missing key is reported in the recipe asked for",
			files: map[string]string{
				"base.toml": "[boot]\non_pass = \"halt\"\n",
				"main.toml": "include = [\"base.toml\"]\n[kernel]\nsource = { deb = \"linux-source-6.1\" }\n" + strings.Replace(minimal[strings.Index(minimal, "[driver]"):], "version = \"535.261.03\"\n", "", 1) + "\n[[repo]]\nsuite = \"bookworm\"\ncomponents = [\"main\"]\nkeyring = \"k\"\nmirror = \"system\"\n",
			},
			file: "main.toml", line: 4, key: "driver.version", msg: "want an NVIDIA version",
		},
		{
			// The user never wrote outputs.efi_stub: "(defaults):47" is no file to open.
			name: "a default that does not fit is reported in the recipe asked for",
			files: map[string]string{
				"main.toml": "name = \"x\"\n[kernel]\nsource = { url = \"https://example.com/linux.tar.xz\", sha256 = \"" + strings.Repeat("ab", 32) + "\" }\n" +
					"[driver]\nversion = \"535.261.03\"\nsource = { url = \"https://example.com/nvidia.tar.xz\", sha256 = \"" + strings.Repeat("cd", 32) + "\" }\n",
			},
			file: "main.toml", line: 1, key: "outputs.efi_stub.deb", msg: "a Debian package source needs at least one [[repo]] (a default: set outputs.efi_stub in the recipe to change it)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTree(t, tt.files)
			_, err := Load(filepath.Join(dir, "main.toml"))
			if err == nil {
				t.Fatal("Load accepted it")
			}
			e := firstError(err)
			if e == nil {
				t.Fatalf("error %T %v is not an *Error or Errors", err, err)
			}
			want := &Error{File: filepath.Join(dir, tt.file), Line: tt.line, Key: tt.key}
			if e.File != want.File || e.Line != want.Line || e.Key != want.Key || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("error = %s:%d: %s: %s\nwant    %s:%d: %s: ...%s...", e.File, e.Line, e.Key, e.Msg, want.File, want.Line, want.Key, tt.msg)
			}
		})
	}
}

func firstError(err error) *Error {
	var es Errors
	if errors.As(err, &es) && len(es) > 0 {
		return es[0]
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

func TestIncludeDepthLimit(t *testing.T) {
	files := map[string]string{"main.toml": "include = [\"l1.toml\"]\n" + minimal}
	for i := 1; i <= maxIncludeDepth+2; i++ {
		files[fmt.Sprintf("l%d.toml", i)] = fmt.Sprintf("include = [\"l%d.toml\"]\n", i+1)
	}
	files[fmt.Sprintf("l%d.toml", maxIncludeDepth+3)] = ""
	dir := writeTree(t, files)
	_, err := Load(filepath.Join(dir, "main.toml"))
	e := firstError(err)
	if e == nil || !strings.Contains(e.Msg, "nested deeper") || e.Line != 1 || e.Key != "include" {
		t.Fatalf("err = %v, want an include depth error at a line", err)
	}

	// Exactly at the limit is fine.
	files = map[string]string{"main.toml": "include = [\"l1.toml\"]\n" + minimal}
	for i := 1; i < maxIncludeDepth-1; i++ {
		files[fmt.Sprintf("l%d.toml", i)] = fmt.Sprintf("include = [\"l%d.toml\"]\n", i+1)
	}
	files[fmt.Sprintf("l%d.toml", maxIncludeDepth-1)] = ""
	dir = writeTree(t, files)
	if _, err := Load(filepath.Join(dir, "main.toml")); err != nil {
		t.Fatalf("a chain of %d files: %v", maxIncludeDepth, err)
	}
}

// Includes may be absolute; a cumulative key (kernel.cmdline, kernel.fragments)
// whose final value drops an item an include gave is a warning naming both
// places, while a replacement that keeps every item, or the defaults'
// values replaced, are not.
func TestIncludeAbsoluteAndDroppedItems(t *testing.T) {
	shared := writeTree(t, map[string]string{
		"platform.toml": minimalRepo + "[kernel]\nsource = { deb = \"linux-source-6.1\" }\ncmdline = \"console=tty0 console=ttyS0,115200 amd_iommu=on iommu=pt panic=-1\"\nfragments = [\"base.config\", \"gpu-node.config\"]\n" +
			"[driver]\nversion = \"535.261.03\"\nsource = { deb = \"nvidia-open-kernel-source\" }\n",
	})
	abs := filepath.Join(shared, "platform.toml")
	cases := []struct {
		name, main string
		warns      []string
	}{
		{"absolute include, nothing replaced", fmt.Sprintf("include = [%q]\n", abs), nil},
		{"superset keeps every item", fmt.Sprintf("include = [%q]\n[kernel]\ncmdline = \"console=tty0 amd_iommu=on iommu=pt panic=-1 quiet console=ttyS0,115200\"\n", abs), nil},
		{"cmdline drops amd_iommu=on", fmt.Sprintf("include = [%q]\n[kernel]\ncmdline = \"console=tty0 iommu=pt panic=-1 console=ttyS0,115200\"\n", abs),
			[]string{"main.toml:3: kernel.cmdline: warning: replaces the value " + abs + ":9 set, dropping amd_iommu=on: a list is replaced whole, not appended to; repeat what should stay"}},
		{"fragments drop one", fmt.Sprintf("include = [%q]\n[kernel]\nfragments = [\"base.config\"]\n", abs),
			[]string{"main.toml:3: kernel.fragments: warning: replaces the value " + abs + ":10 set, dropping gpu-node.config"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"main.toml": c.main})
			r, err := Load(filepath.Join(dir, "main.toml"))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Warnings) != len(c.warns) {
				t.Fatalf("warnings %q, want %d", r.Warnings, len(c.warns))
			}
			for i, w := range c.warns {
				if got := strings.TrimPrefix(r.Warnings[i].Error(), dir+"/"); !strings.HasPrefix(got, w) {
					t.Errorf("warning %q, want it to start %q", got, w)
				}
			}
		})
	}
	// The defaults' values are there to be replaced: no warning.
	dir := writeTree(t, map[string]string{"main.toml": strings.Replace(minimal, "[kernel]\n", "[kernel]\ncmdline = \"console=ttyS0,115200\"\nfragments = [\"base.config\"]\n", 1)})
	r, err := Load(filepath.Join(dir, "main.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Warnings) != 0 {
		t.Errorf("replacing the defaults: warnings %q", r.Warnings)
	}
}

// A serial console followed by another console= is a warning (the last is
// /dev/console); serial last, or no serial console, is not. The defaults obey it.
func TestSerialConsoleLast(t *testing.T) {
	for cmdline, warn := range map[string]bool{
		"console=tty0 console=ttyS0,115200 panic=-1": false,
		"console=ttyS0,115200 console=tty0 panic=-1": true,
		"console=ttyS1 panic=-1 console=tty1":        true,
		"console=tty0 panic=-1":                      false,
		"panic=-1":                                   false,
	} {
		dir := writeTree(t, map[string]string{"main.toml": strings.Replace(minimal, "[kernel]\n", fmt.Sprintf("[kernel]\ncmdline = %q\n", cmdline), 1)})
		r, err := Load(filepath.Join(dir, "main.toml"))
		if err != nil {
			t.Fatal(err)
		}
		got := len(r.Warnings) == 1 && strings.Contains(r.Warnings[0].Error(), "main.toml:9: kernel.cmdline: warning: console=tty") && strings.Contains(r.Warnings[0].Error(), "put the serial console last")
		if got != warn || (!warn && len(r.Warnings) > 0) {
			t.Errorf("%q: warnings %q, want a serial-last warning: %v", cmdline, r.Warnings, warn)
		}
	}
	dir := writeTree(t, map[string]string{"main.toml": minimal})
	if r, err := Load(filepath.Join(dir, "main.toml")); err != nil || len(r.Warnings) != 0 {
		t.Errorf("the defaults' cmdline: %v, warnings %q", err, r.Warnings)
	}
}
