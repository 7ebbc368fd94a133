package main

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/internal/xfstest"
)

// essential are the commands tests run that every Debian bookworm box has
// (Essential: yes packages, and the Go toolchain the tests run under).
var essential = map[string]string{
	"sh": "dash", "cp": "coreutils", "sha256sum": "coreutils", "mkfifo": "coreutils",
	"runuser": "util-linux", "blkid": "util-linux", "go": "the Go toolchain",
}

// alsoFrom are commands a need's package provides besides the one doctor checks.
var alsoFrom = map[string]string{
	"objdump": "binutils", "mkfs.vfat": "dosfstools", "mdir": "mtools", "mtype": "mtools",
	"minfo": "mtools", "mcopy": "mtools", "mount": "mount", "umount": "mount", "chromium-browser": "chromium",
	"sbverify": "sbsigntool",
	"cc":       "build-essential", // gcc's cc, as the C compiler need checks gcc
}

// Every command a test runs or looks up is a host need `make deps` installs
// (or part of every Debian box): under CI=true a test that finds one missing
// fails, so the list must name it.
func TestDoctorCoversTestTools(t *testing.T) {
	pkgs := map[string]bool{}
	cmds := map[string]bool{}
	for _, n := range hostNeeds {
		pkgs[n.pkg] = true
		if n.command != "" {
			cmds[n.command] = true
		}
	}
	used := testCommands(t, "../..")
	if len(used) < 10 {
		t.Fatalf("found only %d commands in the tests: the scan is broken", len(used))
	}
	var names []string
	for c := range used {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		if cmds[c] || essential[c] != "" || pkgs[alsoFrom[c]] {
			continue
		}
		t.Errorf("%s runs %q, which no host need in doctor.go provides: add its Debian package (test: true if only tests need it)", used[c], c)
	}
}

// testCommands finds the commands the tree's tests name as string literals in
// exec.Command, exec.CommandContext and exec.LookPath calls, in the tests' own
// need* helpers, and in string lists ranged over around an exec.LookPath call,
// with one place each.
func testCommands(t *testing.T, root string) map[string]string {
	t.Helper()
	found := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		add := func(e ast.Expr) {
			if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				if s, err := strconv.Unquote(bl.Value); err == nil && s != "" && !strings.Contains(s, "/") {
					if _, ok := found[s]; !ok {
						found[s] = fset.Position(bl.Pos()).String()
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				// needTool(t, "sbsign"), needTools(t, "sgdisk", "fdisk"): a test's own helper.
				if id, ok := n.Fun.(*ast.Ident); ok && strings.HasPrefix(id.Name, "need") {
					for _, a := range n.Args {
						add(a)
					}
				}
				switch execCall(n) {
				case "Command", "LookPath":
					add(n.Args[0])
				case "CommandContext":
					if len(n.Args) > 1 {
						add(n.Args[1])
					}
				}
			case *ast.RangeStmt:
				lit, ok := n.X.(*ast.CompositeLit)
				if !ok || !looksUp(n.Body) {
					return true
				}
				for _, e := range lit.Elts {
					add(e)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// execCall names the os/exec function c calls, or "".
func execCall(c *ast.CallExpr) string {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || len(c.Args) == 0 {
		return ""
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "exec" {
		return ""
	}
	return sel.Sel.Name
}

func looksUp(body ast.Node) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && execCall(c) == "LookPath" {
			found = true
		}
		return !found
	})
	return found
}

// `make image` installs only what building needs: the packages only the tests,
// QEMU or signing use are not in `doctor --packages`, and are in `--all`.
func TestDoctorBuildPackagesOnly(t *testing.T) {
	out, _, code := run(t, "doctor", "--packages")
	all, _, _ := run(t, "doctor", "--packages", "--all")
	build := strings.Fields(out)
	if code != 0 || len(build) == 0 {
		t.Fatalf("doctor --packages: exit %d, %q", code, out)
	}
	for _, pkg := range []string{"chromium", "postgresql", "docker-registry", "qemu-system-x86", "ovmf", "sbsigntool"} {
		if slices.Contains(build, pkg) {
			t.Errorf("doctor --packages (make image) lists %s, which building does not need", pkg)
		}
		if !slices.Contains(strings.Fields(all), pkg) {
			t.Errorf("doctor --packages --all (make test) lacks %s", pkg)
		}
	}
	for _, pkg := range []string{"build-essential", "libelf-dev", "zstd", "git", "debian-archive-keyring"} {
		if !slices.Contains(build, pkg) {
			t.Errorf("doctor --packages lacks %s, which building needs", pkg)
		}
	}
}

// doctor says whether the store's filesystem clones (the inner loop writes
// only what changed there) and never makes the store to find out.
func TestDoctorStoreClones(t *testing.T) {
	xfs := xfstest.Mount(t, 300<<20)
	store := filepath.Join(xfs, "not", "yet")
	out, _, _ := run(t, "--cache", store, "doctor", "--json")
	var j doctorJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if want := (storeJSON{Path: store, Filesystem: "xfs", Clones: true}); j.Store != want {
		t.Errorf("doctor --json store = %+v, want %+v", j.Store, want)
	}
	if _, err := os.Stat(filepath.Join(xfs, "not")); !os.IsNotExist(err) {
		t.Errorf("doctor made the store's directories (%v)", err)
	}
	text, _, _ := run(t, "--cache", store, "doctor")
	if !strings.Contains(text, "store    "+store+" (xfs, clones files") {
		t.Errorf("doctor does not say the store clones:\n%s", text)
	}

	tmpfs := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(tmpfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"); err != nil {
		testguard.Skipf(t, "cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(tmpfs, 0) })
	text, _, code := run(t, "--cache", tmpfs, "doctor", "--for", "build")
	if !strings.Contains(text, "store    "+tmpfs+" (tmpfs, no clones: FICLONE: ") || !strings.Contains(text, "mkfs.xfs -m reflink=1") {
		t.Errorf("doctor on a tmpfs store does not say it writes whole files, or what clones:\n%s", text)
	}
	if code != 0 && !strings.Contains(text, "MISSING") {
		t.Errorf("a store that cannot clone failed doctor (exit %d)", code)
	}
	if left, _ := filepath.Glob(filepath.Join(tmpfs, ".clone-probe-*")); len(left) > 0 {
		t.Errorf("doctor left its probe files: %v", left)
	}
}

// doctor's table keeps its columns: every row's package starts at one offset,
// whatever the longest tool name is.
func TestDoctorColumnsAligned(t *testing.T) {
	js, _, _ := run(t, "doctor", "--all", "--json")
	var j doctorJSON
	if err := json.Unmarshal([]byte(js), &j); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, js)
	}
	text, _, _ := run(t, "doctor", "--all")
	rows := strings.Split(text, "\n")
	if len(rows) < len(j.Needs) {
		t.Fatalf("doctor --all printed %d lines for %d needs:\n%s", len(rows), len(j.Needs), text)
	}
	col := -1
	for i, n := range j.Needs {
		row := rows[i]
		head := strings.TrimRight(row[:max(strings.Index(row, " ("+n.Use+": "), 0)], " ")
		if !strings.HasSuffix(head, " "+n.Package) {
			t.Fatalf("row %d %q does not end its columns with the package %q", i, row, n.Package)
		}
		at := len(head) - len(n.Package)
		if col == -1 {
			col = at
		}
		if at != col {
			t.Errorf("row %d: package %q at column %d, the first row's at %d:\n%s", i, n.Package, at, col, text)
		}
	}
}
