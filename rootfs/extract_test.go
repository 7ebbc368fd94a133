package rootfs

import (
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/debfile/debtest"
)

var updateCorpus = flag.Bool("update-corpus", false, "write the hostile packages into the fuzz corpora (rootfs FuzzExtractDeb, debfile FuzzData)")

// OUTSIDE in a hostile entry stands for a directory beside the image root, as /
// or /etc would be on a real host; the test checks it is left as it was.
const outsideMark = "OUTSIDE"

type hostileCase struct {
	name    string
	entries []debtest.Entry
	files   map[string]string // written with writeFile after the package, as Build lays overlay and generated files
	err     string            // what the refusal says
}

// hostileCases are packages (and overlay files) that try to write or read outside
// the tree through a symlink the package itself shipped.
var hostileCases = []hostileCase{
	{name: "file through absolute dir link", entries: []debtest.Entry{
		{Name: "./usr/share/x", Symlink: outsideMark},
		{Name: "./usr/share/x/pwned", Body: "root was here"},
	}, err: "./usr/share/x/pwned: /usr/share/x is a symlink (to OUTSIDE): refusing to go through it"},
	{name: "file through relative escape", entries: []debtest.Entry{
		{Name: "./usr/share/y", Symlink: "../../../outside"},
		{Name: "./usr/share/y/pwned", Body: "root was here"},
	}, err: "/usr/share/y is a symlink (to ../../../outside)"},
	{name: "file through in-tree link", entries: []debtest.Entry{
		{Name: "./usr/share/z", Symlink: "../../etc"},
		{Name: "./usr/share/z/shadow", Body: "swapped"},
	}, err: "/usr/share/z is a symlink (to ../../etc)"},
	{name: "directory through link", entries: []debtest.Entry{
		{Name: "./usr/share/d", Symlink: outsideMark},
		{Name: "./usr/share/d/sub/", Dir: true},
	}, err: "/usr/share/d is a symlink"},
	{name: "symlink through link", entries: []debtest.Entry{
		{Name: "./usr/share/d", Symlink: outsideMark},
		{Name: "./usr/share/d/evil", Symlink: "/"},
	}, err: "/usr/share/d is a symlink"},
	{name: "hardlink through dir link reads a host file", entries: []debtest.Entry{
		{Name: "./usr/share/h", Symlink: outsideMark},
		{Name: "./usr/lib/stolen", Hardlink: "./usr/share/h/secret"},
	}, err: "hardlink target /usr/share/h/secret: /usr/share/h is a symlink"},
	{name: "hardlink to a link out of the tree", entries: []debtest.Entry{
		{Name: "./usr/share/s", Symlink: outsideMark + "/secret"},
		{Name: "./usr/lib/stolen", Hardlink: "./usr/share/s"},
	}}, // becomes a copy of the symlink, never of the host file
	{name: "overlay through package link", entries: []debtest.Entry{
		{Name: "./etc/peerboot", Symlink: outsideMark},
	}, files: map[string]string{"etc/peerboot/recipe.toml": "x"}, err: "/etc/peerboot is a symlink"},
	{name: "overlay replaces a leaf link", entries: []debtest.Entry{
		{Name: "./etc/motd", Symlink: outsideMark + "/secret"},
	}, files: map[string]string{"etc/motd": "hello\n"}},
	{name: "file replaces a leaf link", entries: []debtest.Entry{
		{Name: "./usr/share/f", Symlink: outsideMark + "/secret"},
		{Name: "./usr/share/f", Body: "mine"},
	}},
}

// hostileRoot makes parent/{root,outside}, with outside/secret standing for a
// host file, and returns the paths.
func hostileRoot(t testing.TB) (root, outside string) {
	parent := t.TempDir()
	root, outside = filepath.Join(parent, "root"), filepath.Join(parent, "outside")
	for _, d := range []string{"usr/bin", "usr/lib", "usr/share", "etc"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Symlink("usr/lib", filepath.Join(root, "lib"))
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600)
	return root, outside
}

// snapshot lists every path under dir with its type and bytes.
func snapshot(t testing.TB, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			out = append(out, "error "+err.Error())
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		var b []byte
		if d.Type()&fs.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			b = []byte("-> " + l)
		} else {
			b, _ = os.ReadFile(p)
		}
		out = append(out, fmt.Sprintf("%s %v %q", rel, d.Type(), b))
		return nil
	})
	return out
}

func hostileDeb(t testing.TB, c hostileCase, outside string) string {
	var entries []debtest.Entry
	for _, e := range c.entries {
		e.Symlink = strings.ReplaceAll(e.Symlink, outsideMark, outside)
		entries = append(entries, e)
	}
	p := filepath.Join(t.TempDir(), "evil.deb")
	if err := os.WriteFile(p, debtest.Build("evil", entries), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every hostile entry is refused or neutralised; nothing outside the root is
// written or read. (On the code before this test, each case with an error wrote
// into OUTSIDE or copied outside/secret into the image.)
func TestExtractStaysInTheTree(t *testing.T) {
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			root, outside := hostileRoot(t)
			before := snapshot(t, filepath.Dir(outside))
			before = slices.DeleteFunc(before, func(s string) bool { return strings.HasPrefix(s, "root") })
			err := extractDeb(hostileDeb(t, c, outside), root)
			for _, p := range slices.Sorted(maps.Keys(c.files)) {
				if err != nil {
					break
				}
				err = writeFile(root, p, []byte(c.files[p]), 0o644)
			}
			msg := strings.ReplaceAll(fmt.Sprint(err), outside, outsideMark)
			if c.err == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if c.err != "" && !strings.Contains(msg, c.err) {
				t.Fatalf("got error %q, want one containing %q", msg, c.err)
			}
			after := snapshot(t, filepath.Dir(outside))
			after = slices.DeleteFunc(after, func(s string) bool { return strings.HasPrefix(s, "root") })
			if !slices.Equal(before, after) {
				t.Fatalf("outside the root changed:\nbefore %q\nafter  %q", before, after)
			}
			for _, s := range snapshot(t, root) {
				if strings.Contains(s, "host secret") || strings.Contains(s, "swapped") {
					t.Fatalf("a host file or a write through an in-tree link reached the image: %s", s)
				}
			}
		})
	}
}

// What ordinary Debian packages do still works: absolute and dangling symlinks
// are created as shipped, the usr-merge maps ./lib into usr/lib, trixie's
// base-files links ./bin -> usr/bin are the tree's own, a hardlink becomes a copy.
func TestExtractOrdinaryPackage(t *testing.T) {
	root, _ := hostileRoot(t)
	deb := filepath.Join(t.TempDir(), "ok.deb")
	os.WriteFile(deb, debtest.Build("ok", []debtest.Entry{
		{Name: "./bin", Symlink: "usr/bin"},
		{Name: "./lib", Symlink: "usr/lib"},
		{Name: "./lib/x86_64-linux-gnu/", Dir: true},
		{Name: "./lib/x86_64-linux-gnu/libfoo.so.1.2", Body: "ELF", Mode: 0o755},
		{Name: "./usr/lib/x86_64-linux-gnu/libfoo.so.1", Symlink: "libfoo.so.1.2"},
		{Name: "./usr/lib/x86_64-linux-gnu/libfoo.so", Symlink: "/usr/lib/x86_64-linux-gnu/libfoo.so.1"},
		{Name: "./usr/lib/x86_64-linux-gnu/libfoo-hard.so", Hardlink: "./lib/x86_64-linux-gnu/libfoo.so.1.2"},
		{Name: "./usr/lib/x86_64-linux-gnu/libfoo-soft.so", Hardlink: "./usr/lib/x86_64-linux-gnu/libfoo.so"},
		{Name: "./usr/share/nowhere", Symlink: "/nonexistent/on/the/host"},
	}), 0o644)
	if err := extractDeb(deb, root); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"usr/lib/x86_64-linux-gnu/libfoo.so":      "-> /usr/lib/x86_64-linux-gnu/libfoo.so.1",
		"usr/lib/x86_64-linux-gnu/libfoo.so.1":    "-> libfoo.so.1.2",
		"usr/lib/x86_64-linux-gnu/libfoo-soft.so": "-> /usr/lib/x86_64-linux-gnu/libfoo.so.1",
		"usr/share/nowhere":                       "-> /nonexistent/on/the/host",
		"usr/lib/x86_64-linux-gnu/libfoo.so.1.2":  "-rwxr-xr-x ELF",
		"usr/lib/x86_64-linux-gnu/libfoo-hard.so": "-rwxr-xr-x ELF",
		"lib": "-> usr/lib",
		"bin": "", // Build's own link; not in hostileRoot
	} {
		full := filepath.Join(root, p)
		got := ""
		if l, err := os.Readlink(full); err == nil {
			got = "-> " + l
		} else if info, err := os.Lstat(full); err == nil {
			b, _ := os.ReadFile(full)
			got = info.Mode().String() + " " + string(b)
		}
		if got != want {
			t.Errorf("/%s: got %q, want %q", p, got, want)
		}
	}
	if info, err := os.Lstat(filepath.Join(root, "usr/bin")); err != nil || !info.IsDir() {
		t.Errorf("usr/bin is no longer a directory: %v %v", info, err)
	}
}

func TestWriteFileRefusesPathsOutOfTheImage(t *testing.T) {
	root, _ := hostileRoot(t)
	for _, p := range []string{"../x", "/etc/passwd", "", "."} {
		if err := writeFile(root, p, nil, 0o644); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
	if err := writeFile(root, "lib/firmware/x.bin", []byte("fw"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "usr/lib/firmware/x.bin")); err != nil || string(b) != "fw" {
		t.Fatalf("lib/ does not reach usr/lib: %q %v", b, err)
	}
	os.Symlink(t.TempDir(), filepath.Join(root, "usr/lib/x86_64-linux-gnu"))
	if err := writeSymlink(root, "usr/lib/x86_64-linux-gnu/libcuda.so.1", "nvidia/current/libcuda.so.1"); err == nil || !strings.Contains(err.Error(), "/usr/lib/x86_64-linux-gnu is a symlink") {
		t.Fatalf("a link made through a link: %v", err)
	}
}

// FuzzExtractDeb: whatever the package, nothing outside the root changes. (The
// seeds' OUTSIDE links stay relative, compressed as they are; the relative escape
// seed reaches the outside directory beside the root.)
func FuzzExtractDeb(f *testing.F) {
	for _, c := range hostileCases {
		f.Add(debtest.Build("evil", c.entries))
	}
	f.Fuzz(func(t *testing.T, deb []byte) {
		root, outside := hostileRoot(t)
		p := filepath.Join(t.TempDir(), "f.deb")
		os.WriteFile(p, deb, 0o644)
		before := snapshot(t, outside)
		extractDeb(p, root)
		if after := snapshot(t, outside); !slices.Equal(before, after) {
			t.Fatalf("outside the root changed: %q", after)
		}
		if entries, _ := os.ReadDir(filepath.Dir(root)); len(entries) != 2 {
			t.Fatalf("a write beside the root: %v", entries)
		}
	})
}

// TestUpdateCorpus writes the hostile packages into the fuzz corpora with
// -update-corpus.
func TestUpdateCorpus(t *testing.T) {
	if !*updateCorpus {
		return
	}
	for i, c := range hostileCases {
		b := "go test fuzz v1\n[]byte(" + strconv.Quote(string(debtest.Build("evil", c.entries))) + ")\n"
		name := fmt.Sprintf("hostile-%02d-%s", i, strings.ReplaceAll(c.name, " ", "-"))
		for _, dir := range []string{"testdata/fuzz/FuzzExtractDeb", "../debfile/testdata/fuzz/FuzzData"} {
			os.MkdirAll(dir, 0o755)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
