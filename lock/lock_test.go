package lock

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/apt"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

const testRecipe = `
name = "t"
[[repo]]
suite = "bookworm"
components = ["main"]
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
mirror = "system"
[kernel]
source = { deb = "linux-source-6.1" }
[driver]
version = "535.261.03"
source = { deb = "nvidia-open-kernel-source", version = "535.261.03-1" }
[userspace]
packages = ["libcuda1=535.261.03-1"]
exclude = [{ package = "nvidia-alternative", reason = "glue" }]
`

func loadRecipe(t *testing.T, text string) *recipe.Resolved {
	t.Helper()
	p := filepath.Join(t.TempDir(), "t.toml")
	os.WriteFile(p, []byte(text), 0o644)
	r, err := recipe.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pkg(name, ver, deps string) apt.Package {
	return apt.Package{Name: name, Version: ver, Architecture: "amd64", Repo: "bookworm", Component: "main",
		Filename: "pool/main/" + name + "_" + ver + ".deb", Size: 100, SHA256: strings.Repeat("a", 63) + string('0'+rune(len(name)%10)), Depends: deps}
}

func fixture() []*apt.Index {
	return []*apt.Index{{Repo: apt.Repo{Name: "bookworm"}, Packages: []apt.Package{
		pkg("linux-source-6.1", "6.1.170-3", ""),
		pkg("linux-source-6.1", "6.1.192-3", ""),
		pkg("nvidia-open-kernel-source", "535.261.03-1", "debhelper"),
		pkg("systemd-boot-efi", "252.39-1", ""),
		pkg("libcuda1", "535.261.03-1", "nvidia-alternative (= 535.261.03-1), libc6 (>= 2.34)"),
		pkg("libcuda1", "535.247.01-1", "libc6"),
		pkg("nvidia-alternative", "535.261.03-1", "dpkg"),
		pkg("libc6", "2.36-9", ""),
	}}}
}

func TestPinIsDeterministicAndFollowsTheRecipe(t *testing.T) {
	r := loadRecipe(t, testRecipe)
	a, err := Pin(r, fixture())
	if err != nil {
		t.Fatal(err)
	}
	shuffled := fixture()
	p := shuffled[0].Packages
	for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
		p[i], p[j] = p[j], p[i]
	}
	b, err := Pin(r, shuffled)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Encode(), b.Encode()) {
		t.Fatalf("index order changed the lock:\n%s\n---\n%s", a.Encode(), b.Encode())
	}
	var got []string
	for _, d := range a.Debs {
		got = append(got, d.Role+":"+d.Package+"="+d.Version)
	}
	want := "kernel-source:linux-source-6.1=6.1.192-3 driver-source:nvidia-open-kernel-source=535.261.03-1 efi-stub:systemd-boot-efi=252.39-1 userspace:libc6=2.36-9 userspace:libcuda1=535.261.03-1"
	if strings.Join(got, " ") != want {
		t.Fatalf("pins:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	// A source package is pinned alone: debhelper (absent from the index) is not pulled in.
	if err := Check(r, a); err != nil {
		t.Fatal(err)
	}
	r2 := loadRecipe(t, strings.Replace(testRecipe, `"libcuda1=535.261.03-1"`, `"libcuda1=535.247.01-1"`, 1))
	if err := Check(r2, a); err == nil {
		t.Fatal("a changed userspace request did not make the lock stale")
	}
}

func TestMissingVersionNamesWhatExists(t *testing.T) {
	_, err := Find(fixture(), apt.Request{Name: "linux-source-6.1", Version: "6.1.999-1"}, "amd64")
	if err == nil || !strings.Contains(err.Error(), "available: 6.1.192-3, 6.1.170-3") {
		t.Fatalf("got %v", err)
	}
}

func TestReadRejectsBadPins(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"short-sum": "recipe = \"x\"\n[[deb]]\npackage = \"a\"\nfilename = \"pool/a.deb\"\nsha256 = \"abc\"\n",
		"escape":    "recipe = \"x\"\n[[deb]]\npackage = \"a\"\nfilename = \"../../etc/passwd\"\nsha256 = \"" + strings.Repeat("a", 64) + "\"\n",
		"unknown":   "recipe = \"x\"\nsurprise = 1\n",
	} {
		p := filepath.Join(dir, name+".lock")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := Read(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestInputsNameUnresolved(t *testing.T) {
	r := loadRecipe(t, testRecipe)
	ins, un, err := Inputs(r, nil, func(string) (string, error) { return "http://mirror.invalid/debian", nil })
	if err != nil || len(ins) != 0 || len(un) != 4 {
		t.Fatalf("without a lock: inputs %v, unresolved %v, err %v", ins, un, err)
	}
	f, _ := Pin(r, fixture())
	ins, un, err = Inputs(r, f, func(string) (string, error) { return "http://mirror.invalid/debian/", nil })
	if err != nil || len(un) != 0 || len(ins) != 5 || ins[0].URL != "http://mirror.invalid/debian/pool/main/linux-source-6.1_6.1.192-3.deb" {
		t.Fatalf("with a lock: inputs %+v, unresolved %v, err %v", ins, un, err)
	}
}

// Locking the real default recipe twice against the live archive gives the same bytes.
func TestLockDefaultRecipeTwice(t *testing.T) {
	testguard.Short(t, "resolves against the live archive")
	r, err := recipe.Load("../recipes/default.toml")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := store.Open(t.TempDir())
	rs := &Resolver{Client: &apt.Client{HTTP: http.DefaultClient, Cache: st}, AptDir: "/etc/apt"}
	a, err := rs.Resolve(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rs.Resolve(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Encode(), b.Encode()) {
		t.Fatal("two locks of the same recipe differ")
	}
	if len(a.Debs) < 8 {
		t.Fatalf("suspiciously small closure: %d packages", len(a.Debs))
	}
}

// The installer is pinned in the recipe; the lock records it beside the packages
// and the build takes it from the lock, like every other input.
func TestLockRecordsTheInstaller(t *testing.T) {
	sum := strings.Repeat("e", 64)
	text := strings.Replace(testRecipe, `packages = ["libcuda1=535.261.03-1"]`, `packages = ["libc6"]
installer = { url = "https://download.nvidia.com/XFree86/Linux-x86_64/535.261.03/NVIDIA-Linux-x86_64-535.261.03.run", sha256 = "`+sum+`", size = 1234 }`, 1)
	r := loadRecipe(t, text)
	f, err := Pin(r, fixture())
	if err != nil {
		t.Fatal(err)
	}
	enc := string(f.Encode())
	for _, want := range []string{"[[file]]", `role = "installer"`, `name = "NVIDIA-Linux-x86_64-535.261.03.run"`, `sha256 = "` + sum + `"`, "size = 1234", "Every Debian package and file"} {
		if !strings.Contains(enc, want) {
			t.Errorf("lock lacks %q:\n%s", want, enc)
		}
	}
	p := filepath.Join(t.TempDir(), "t.lock")
	if err := Write(p, f); err != nil {
		t.Fatal(err)
	}
	back, err := Read(p)
	if err != nil || !bytes.Equal(back.Encode(), f.Encode()) {
		t.Fatalf("read back: %v", err)
	}
	ins, un, err := Inputs(r, back, func(string) (string, error) { return "http://mirror.invalid/debian", nil })
	if err != nil || len(un) != 0 {
		t.Fatalf("unresolved %v: %v", un, err)
	}
	last := ins[len(ins)-1]
	if last.Role != RoleInstaller || last.Kind != "url" || last.SHA256 != sum || last.Size != 1234 || last.Name != "NVIDIA-Linux-x86_64-535.261.03.run" {
		t.Errorf("installer input %+v", last)
	}
	// A lock made before the recipe named the installer is stale, and without
	// a lock the installer is unresolved.
	old, _ := Pin(loadRecipe(t, testRecipe), fixture())
	if Check(r, old) == nil {
		t.Error("a lock without the installer passed Check")
	}
	if _, un, _ := Inputs(r, nil, func(string) (string, error) { return "", nil }); len(un) == 0 || un[len(un)-1].Role != RoleInstaller {
		t.Errorf("unresolved without a lock: %v", un)
	}
}

// Adding the installer key changed no existing lock: their inputs digests
// (which cover userspace) still match the committed recipes.
func TestCommittedLocksStayCurrent(t *testing.T) {
	paths, _ := filepath.Glob("../recipes/*.toml")
	if len(paths) == 0 {
		t.Fatal("no recipes")
	}
	for _, p := range paths {
		r, err := recipe.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Read(PathFor(p))
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(r, f); err != nil {
			t.Error(err)
		}
	}
}

const twoSuiteRecipe = `
name = "t"
[[repo]]
name = "trixie"
suite = "trixie"
components = ["main", "contrib", "non-free"]
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
mirror = "system"
[[repo]]
name = "sid"
suite = "sid"
components = ["contrib"]
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
mirror = "system"
check_valid_until = false
only = ["libnccl2"]
[kernel]
source = { url = "https://example.invalid/linux.tar.xz", sha256 = "` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `" }
[driver]
version = "595.45.04"
source = { url = "https://example.invalid/nvidia.tar.xz", sha256 = "` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `" }
[outputs]
efi_stub = { url = "https://example.invalid/stub.deb", sha256 = "` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `" }
[userspace]
packages = ["libnccl2 >= 2.25.1", "libcudart12"]
`

func suites() []*apt.Index {
	in := func(repo string, ps ...apt.Package) *apt.Index {
		for i := range ps {
			ps[i].Repo = repo
		}
		return &apt.Index{Repo: apt.Repo{Name: repo}, Packages: ps}
	}
	return []*apt.Index{
		in("trixie", pkg("libnccl2", "2.22.3-1-1", "libc6 (>= 2.38)"), pkg("libc6", "2.41-12", ""), pkg("libcudart12", "12.4.127~12.4.1-2", "libc6")),
		// sid's libc6 and libcudart12 are newer, but `only` keeps them out.
		in("sid", pkg("libnccl2", "2.29.7-1-1", "libc6 (>= 2.38)"), pkg("libc6", "2.42-2", ""), pkg("libcudart12", "12.4.127~12.4.1-8.2+b1", "libc6")),
	}
}

// "libnccl2 >= 2.25.1" takes sid's NCCL, the newest meeting it; `only` keeps the rest
// of sid (its libc6 and cudart) out, so the dependencies stay on trixie.
func TestPinVersionRelationAcrossSuites(t *testing.T) {
	r := loadRecipe(t, twoSuiteRecipe)
	f, err := Pin(r, suites())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range f.Debs {
		got = append(got, d.Package+"="+d.Version+"@"+d.Repo)
	}
	if want := "libc6=2.41-12@trixie libcudart12=12.4.127~12.4.1-2@trixie libnccl2=2.29.7-1-1@sid"; strings.Join(got, " ") != want {
		t.Fatalf("pins:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	for _, c := range []struct{ from, to, wantErr string }{
		{`"libnccl2 >= 2.25.1"`, `"libnccl2 >= 2.30"`, "libnccl2: no version satisfies (>= 2.30) in trixie, sid; available: 2.29.7-1-1, 2.22.3-1-1"},
		{`only = ["libnccl2"]`, `only = ["libncl2"]`, "repo sid: only lists libncl2, which sid does not have for amd64"},
	} {
		_, err := Pin(loadRecipe(t, strings.Replace(twoSuiteRecipe, c.from, c.to, 1)), suites())
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: got %v, want %q", c.to, err, c.wantErr)
		}
	}
}

// The index records survive a re-lock whose pins did not move (the archive only
// republished), and are replaced when a pin changes; Read checks their shape.
func TestKeepIndexes(t *testing.T) {
	r := loadRecipe(t, twoSuiteRecipe)
	old, _ := Pin(r, suites())
	old.Indexes = []IndexPin{{Repo: "sid", Suite: "sid", Date: "2026-10-30T08:08:01Z", ValidUntil: "2026-11-06T08:08:01Z", Expired: true, InRelease: strings.Repeat("1", 64)}}
	fresh, _ := Pin(r, suites())
	fresh.Indexes = []IndexPin{{Repo: "sid", Suite: "sid", Date: "2026-12-01T08:08:01Z", InRelease: strings.Repeat("2", 64)}}
	KeepIndexes(fresh, old)
	if fresh.Indexes[0].Date != "2026-10-30T08:08:01Z" {
		t.Errorf("unchanged pins: index date %s, want the old lock's", fresh.Indexes[0].Date)
	}
	moved, _ := Pin(r, suites()[:1:1]) // sid gone: a different libnccl2... which trixie cannot meet
	if moved != nil {
		t.Fatal("trixie alone met libnccl2 >= 2.25.1")
	}
	changed, _ := Pin(r, suites())
	changed.Debs[0].Version = "2.41-13"
	changed.Indexes = []IndexPin{{Repo: "sid", Suite: "sid", Date: "2026-12-01T08:08:01Z", InRelease: strings.Repeat("2", 64)}}
	KeepIndexes(changed, old)
	if changed.Indexes[0].Date != "2026-12-01T08:08:01Z" {
		t.Errorf("changed pins kept the old index date")
	}
	p := filepath.Join(t.TempDir(), "t.lock")
	if err := Write(p, old); err != nil {
		t.Fatal(err)
	}
	back, err := Read(p)
	if err != nil || !bytes.Equal(back.Encode(), old.Encode()) {
		t.Fatalf("read back: %v\n%s", err, old.Encode())
	}
	for _, want := range []string{"[[index]]", `date = "2026-10-30T08:08:01Z"`, "expired = true"} {
		if !strings.Contains(string(old.Encode()), want) {
			t.Errorf("lock lacks %q", want)
		}
	}
	bad := strings.Replace(string(old.Encode()), "2026-10-30T08:08:01Z", "Fri, 30 Oct 2026", 1)
	os.WriteFile(p, []byte(bad), 0o644)
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "index[0] (sid): date") {
		t.Errorf("bad date: %v", err)
	}
}

// A flat repository (NVIDIA's CUDA repository's layout) next to Debian's: only its
// NCCL is taken, by relation, and fetch's URL is the repository's directory plus the
// index's Filename.
func TestPinFromAFlatRepository(t *testing.T) {
	text := strings.Replace(twoSuiteRecipe, `[[repo]]
name = "sid"
suite = "sid"
components = ["contrib"]
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
mirror = "system"
check_valid_until = false
only = ["libnccl2"]`, `[[repo]]
name = "cuda"
suite = "/"
url = "https://cuda.example.invalid/repos/debian12/x86_64"
keyring = "/usr/share/keyrings/cuda-archive-keyring.gpg"
only = ["libnccl2"]`, 1)
	r := loadRecipe(t, text)
	nv := pkg("libnccl2", "2.27.7-1+cuda12.9", "")
	nv.Repo, nv.Filename = "cuda", "libnccl2_2.27.7-1+cuda12.9_amd64.deb"
	indexes := []*apt.Index{suites()[0], {Repo: apt.Repo{Name: "cuda", Suite: "/"}, Packages: []apt.Package{nv}}}
	f, err := Pin(r, indexes)
	if err != nil {
		t.Fatal(err)
	}
	ins, _, err := Inputs(r, f, func(name string) (string, error) {
		for _, rr := range r.Repos {
			if rr.Name == name {
				repo, err := AptRepo(rr, "/etc/apt")
				return repo.BaseURL, err
			}
		}
		return "", os.ErrNotExist
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range ins {
		if in.Role == RoleUserspace {
			got = append(got, in.URL)
		}
	}
	if !slices.Contains(got, "https://cuda.example.invalid/repos/debian12/x86_64/libnccl2_2.27.7-1+cuda12.9_amd64.deb") {
		t.Errorf("userspace URLs %q", got)
	}
}

// A re-lock keeps the previous lock's pin of a version-range request while it still
// meets the range and the indexes still carry it, as apt keeps an installed package;
// anything else (no previous lock, a raised range, a pin gone from the archive, a pin
// whose dependencies cannot be met any more, an exact request) resolves as Pin does.
func TestPinKeepingKeepsARangePin(t *testing.T) {
	withNewer := func() []*apt.Index {
		ix := suites()
		ix[1].Packages = append(ix[1].Packages, pkg("libnccl2", "2.30.1-1", "libc6 (>= 2.38)"))
		ix[1].Packages[len(ix[1].Packages)-1].Repo = "sid"
		return ix
	}
	prevAt := func(ver string) *File {
		return &File{Debs: []Deb{{Package: "libnccl2", Version: ver, Role: RoleUserspace, Repo: "sid"},
			{Package: "libcudart12", Version: "12.4.127~12.4.1-2", Role: RoleUserspace, Repo: "trixie"}}}
	}
	for _, tt := range []struct {
		name    string
		recipe  string // replaces "libnccl2 >= 2.25.1" in twoSuiteRecipe ("" keeps it)
		prev    *File
		indexes func() []*apt.Index
		want    string // the libnccl2 pin
		kept    string // "version newest" of the one Kept, "" for none
	}{
		{name: "no previous lock takes the newest", indexes: withNewer, want: "2.30.1-1"},
		{name: "the pin still meets the range", prev: prevAt("2.29.7-1-1"), indexes: withNewer, want: "2.29.7-1-1", kept: "2.29.7-1-1 2.30.1-1"},
		{name: "the pin is already the newest", prev: prevAt("2.29.7-1-1"), indexes: suites, want: "2.29.7-1-1", kept: "2.29.7-1-1 "},
		{name: "a raised range moves the pin", recipe: "libnccl2 >= 2.30", prev: prevAt("2.29.7-1-1"), indexes: withNewer, want: "2.30.1-1"},
		{name: "an upper bound the pin now breaks", recipe: "libnccl2 << 2.29", prev: prevAt("2.29.7-1-1"), indexes: withNewer, want: "2.22.3-1-1"},
		{name: "the pin left the archive", prev: prevAt("2.28.3-1-1"), indexes: withNewer, want: "2.30.1-1"},
		{name: "the pin's dependency left the archive", prev: prevAt("2.29.7-1-1"), indexes: func() []*apt.Index {
			ix := withNewer()
			for i, p := range ix[1].Packages {
				if p.Version == "2.29.7-1-1" {
					ix[1].Packages[i].Depends = "libnccl-gone (>= 1)"
				}
			}
			return ix
		}, want: "2.30.1-1"},
		{name: "an exact request is not a range", recipe: "libnccl2=2.30.1-1", prev: prevAt("2.29.7-1-1"), indexes: withNewer, want: "2.30.1-1"},
		{name: "a plain name takes the newest", recipe: "libnccl2", prev: prevAt("2.29.7-1-1"), indexes: withNewer, want: "2.30.1-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text := twoSuiteRecipe
			if tt.recipe != "" {
				text = strings.Replace(text, `"libnccl2 >= 2.25.1"`, `"`+tt.recipe+`"`, 1)
			}
			f, kept, err := PinKeeping(loadRecipe(t, text), tt.indexes(), tt.prev)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, d := range f.Debs {
				if d.Package == "libnccl2" {
					got = d.Version
				}
			}
			if got != tt.want {
				t.Errorf("libnccl2 pinned at %s, want %s", got, tt.want)
			}
			var k []string
			for _, x := range kept {
				k = append(k, x.Version+" "+x.Newest)
				if x.Request.Name != "libnccl2" || x.Request.Op == "=" {
					t.Errorf("kept %+v: not the recipe's range request", x)
				}
			}
			if strings.Join(k, ",") != tt.kept {
				t.Errorf("kept %q, want %q", strings.Join(k, ","), tt.kept)
			}
			// Keeping never makes a lock Pin could not have made from these indexes and
			// a recipe asking for that version exactly.
			if tt.kept != "" {
				exact, err := Pin(loadRecipe(t, strings.Replace(text, `"libnccl2 >= 2.25.1"`, `"libnccl2=`+tt.want+`"`, 1)), tt.indexes())
				if err != nil || !bytes.Equal(dropDigest(exact).Encode(), dropDigest(f).Encode()) {
					t.Errorf("the kept lock differs from pinning %s exactly (%v)", tt.want, err)
				}
			}
		})
	}
}

func dropDigest(f *File) *File {
	c := *f
	c.InputsDigest = ""
	return &c
}
