package apt

import (
	"fmt"
	"strings"
	"testing"
)

// pk builds a package; fields are "Depends=...", "Pre-Depends=...", "Provides=...", "Arch=...".
func pk(name, ver string, fields ...string) Package {
	p := Package{Name: name, Version: ver, Architecture: "amd64", Source: name,
		Filename: fmt.Sprintf("pool/main/%s_%s.deb", name, ver), Size: 1, SHA256: sumA}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "Depends":
			p.Depends = v
		case "Pre-Depends":
			p.PreDepends = v
		case "Provides":
			p.Provides = v
		case "Arch":
			p.Architecture = v
		default:
			panic("unknown field " + k)
		}
	}
	return p
}

func idx(name string, pkgs ...Package) *Index {
	for i := range pkgs {
		pkgs[i].Repo = name
	}
	return &Index{Repo: Repo{Name: name}, Packages: pkgs}
}

// summary renders a resolution as "name=version<-requiredby,..." lines.
func summary(rs []Resolved) string {
	var out []string
	for _, r := range rs {
		s := r.Name + "=" + r.Version + "@" + r.Repo
		if len(r.RequiredBy) > 0 {
			s += "<-" + strings.Join(r.RequiredBy, ",")
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestResolve(t *testing.T) {
	main := idx("bookworm",
		pk("app", "1.0", "Depends=libfoo (>= 2), helper | helper-alt, virt-x", "Pre-Depends=dpkg (>= 1.17)"),
		pk("libfoo", "1.5"), pk("libfoo", "2.0"), pk("libfoo", "3.0", "Depends=libbar (<< 1)"),
		pk("libbar", "1.0"),
		pk("helper-alt", "1.0"),
		pk("zprov", "1.0", "Provides=virt-x"), pk("aprov", "1.0", "Provides=virt-x"),
		pk("dpkg", "1.21", "Depends=tar"), pk("tar", "1.34"),
		pk("i386only", "1.0", "Arch=i386"),
		pk("archdeps", "1.0", "Depends=libbar:any, libbar:native (>= 1), onlyi386 [i386], foreign:i386 | helper-alt, notlinux [!amd64]"),
		pk("docs", "1.0", "Arch=all", "Depends=${misc:Depends}"),
	)
	security := idx("bookworm-security",
		pk("libfoo", "2.0", "Depends=tar"), // same version as main: main wins the tie
		pk("helper", "1.0"),
	)
	tests := []struct {
		name    string
		indexes []*Index
		reqs    []Request
		exclude map[string]bool
		want    string
		wantErr string
	}{
		{name: "constraints pick highest fitting, alternatives and virtuals", indexes: []*Index{main, security},
			reqs:    []Request{{Name: "app"}},
			exclude: map[string]bool{"dpkg": true},
			// libfoo 3.0 needs libbar << 1, which does not exist, so 2.0 is taken instead.
			want: "app=1.0@bookworm aprov=1.0@bookworm<-app helper=1.0@bookworm-security<-app libfoo=2.0@bookworm<-app"},
		{name: "pinned version avoids conflict", indexes: []*Index{main, security},
			reqs:    []Request{{Name: "app"}, {Name: "libfoo", Version: "2.0"}},
			exclude: map[string]bool{"dpkg": true},
			want:    "app=1.0@bookworm aprov=1.0@bookworm<-app helper=1.0@bookworm-security<-app libfoo=2.0@bookworm"},
		{name: "tie goes to earlier index", indexes: []*Index{security, main},
			reqs:    []Request{{Name: "app"}, {Name: "libfoo", Version: "2.0"}},
			exclude: map[string]bool{"dpkg": true},
			want:    "app=1.0@bookworm aprov=1.0@bookworm<-app helper=1.0@bookworm-security<-app libfoo=2.0@bookworm-security tar=1.34@bookworm<-libfoo"},
		{name: "pre-depends followed", indexes: []*Index{main, security},
			reqs: []Request{{Name: "app"}, {Name: "libfoo", Version: "2.0"}, {Name: "zprov"}, {Name: "helper-alt"}},
			want: "app=1.0@bookworm dpkg=1.21@bookworm<-app helper-alt=1.0@bookworm libfoo=2.0@bookworm tar=1.34@bookworm<-dpkg zprov=1.0@bookworm"},
		{name: "arch qualifiers and restrictions", indexes: []*Index{main},
			reqs: []Request{{Name: "archdeps"}, {Name: "docs"}},
			want: "archdeps=1.0@bookworm docs=1.0@bookworm helper-alt=1.0@bookworm<-archdeps libbar=1.0@bookworm<-archdeps"},
		{name: "missing version lists available", indexes: []*Index{main, security},
			reqs:    []Request{{Name: "libfoo", Version: "999"}},
			wantErr: "libfoo: version 999 not found in bookworm, bookworm-security; available: 3.0, 2.0, 1.5"},
		{name: "unknown package", indexes: []*Index{main}, reqs: []Request{{Name: "nope"}},
			wantErr: "nope: no package of that name for amd64 in bookworm"},
		{name: "other-arch package is not a candidate", indexes: []*Index{main}, reqs: []Request{{Name: "i386only"}},
			wantErr: "i386only: no package of that name for amd64"},
		{name: "excluded and requested", indexes: []*Index{main}, reqs: []Request{{Name: "dpkg"}},
			exclude: map[string]bool{"dpkg": true}, wantErr: "dpkg is both requested and excluded"},
		{name: "requested virtual picks smallest provider", indexes: []*Index{main}, reqs: []Request{{Name: "virt-x"}},
			want: "aprov=1.0@bookworm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.indexes, tt.reqs, tt.exclude, "amd64")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve = %s, %v; want error containing %q", summary(got), err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := summary(got); s != tt.want {
				t.Fatalf("Resolve =\n %s\nwant\n %s", s, tt.want)
			}
		})
	}
}

func TestResolveCases(t *testing.T) {
	tests := []struct {
		name    string
		pkgs    []Package
		reqs    []string // "name" or "name=version"
		exclude []string
		want    string
		wantErr string
	}{
		{name: "operators", pkgs: []Package{
			pk("a", "1", "Depends=b (<< 3), c (<= 2), d (= 2), e (>= 2), f (>> 1)"),
			pk("b", "2"), pk("b", "3"), pk("c", "2"), pk("c", "3"), pk("d", "1"), pk("d", "2"), pk("d", "3"),
			pk("e", "1"), pk("e", "2"), pk("f", "1"), pk("f", "1.1")},
			reqs: []string{"a"}, want: "a=1@r b=2@r<-a c=2@r<-a d=2@r<-a e=2@r<-a f=1.1@r<-a"},
		{name: "epoch and tilde ordering", pkgs: []Package{
			pk("a", "1", "Depends=b"), pk("b", "9.0"), pk("b", "1:1.0"), pk("b", "1:1.0~rc1")},
			reqs: []string{"a"}, want: "a=1@r b=1:1.0@r<-a"},
		{name: "alternative already selected is reused", pkgs: []Package{
			pk("a", "1", "Depends=x | y"), pk("x", "1"), pk("y", "1")},
			reqs: []string{"a", "y"}, want: "a=1@r y=1@r"},
		{name: "alternative selected later by another dep is not retroactive", pkgs: []Package{
			pk("a", "1", "Depends=x | y, z"), pk("x", "1"), pk("y", "1"), pk("z", "1", "Depends=y | x")},
			reqs: []string{"a"}, want: "a=1@r x=1@r<-a,z z=1@r<-a"},
		{name: "first satisfiable alternative", pkgs: []Package{
			pk("a", "1", "Depends=missing | x (>= 2) | y"), pk("x", "1"), pk("y", "1")},
			reqs: []string{"a"}, want: "a=1@r y=1@r<-a"},
		{name: "real package before provider", pkgs: []Package{
			pk("a", "1", "Depends=v"), pk("v", "1"), pk("p", "1", "Provides=v")},
			reqs: []string{"a"}, want: "a=1@r v=1@r<-a"},
		{name: "selected provider reused", pkgs: []Package{
			pk("a", "1", "Depends=v"), pk("p1", "1", "Provides=v"), pk("p2", "1", "Provides=v")},
			reqs: []string{"a", "p2"}, want: "a=1@r p2=1@r"},
		{name: "versioned provides", pkgs: []Package{
			pk("a", "1", "Depends=v (>= 2)"), pk("p1", "1", "Provides=v"), pk("p2", "1", "Provides=v (= 1)"), pk("p3", "1", "Provides=v (= 2)")},
			reqs: []string{"a"}, want: "a=1@r p3=1@r<-a"},
		{name: "provider version chosen by what it provides", pkgs: []Package{
			pk("a", "1", "Depends=v"), pk("p", "2"), pk("p", "1", "Provides=v")},
			reqs: []string{"a"}, want: "a=1@r p=1@r<-a"},
		{name: "no provider", pkgs: []Package{pk("a", "1", "Depends=v (>= 1) | w")},
			reqs: []string{"a"}, wantErr: "a 1 depends on v (>= 1) | w, which no package in r is or provides for amd64"},
		{name: "exclude drops dependency and its closure", pkgs: []Package{
			pk("nvidia-driver", "1", "Depends=nvidia-alternative (= 1), glx-alternative-nvidia, lib"),
			pk("nvidia-alternative", "1", "Depends=glx-alternative-nvidia"), pk("glx-alternative-nvidia", "1", "Depends=debconf"),
			pk("lib", "1")},
			reqs: []string{"nvidia-driver"}, exclude: []string{"nvidia-alternative", "glx-alternative-nvidia"},
			want: "lib=1@r<-nvidia-driver nvidia-driver=1@r"},
		{name: "excluded alternative satisfies relation", pkgs: []Package{
			pk("a", "1", "Depends=debconf (>= 0.5) | debconf-2.0"), pk("debconf", "1.5"), pk("cdebconf", "1", "Provides=debconf-2.0")},
			reqs: []string{"a"}, exclude: []string{"debconf"}, want: "a=1@r"},
		{name: "virtual whose only provider is excluded", pkgs: []Package{
			pk("a", "1", "Depends=v"), pk("p", "1", "Provides=v")},
			reqs: []string{"a"}, exclude: []string{"p"}, want: "a=1@r"},
		{name: "re-pick when later constraint rules out earlier pick", pkgs: []Package{
			pk("a", "1", "Depends=b, c"), pk("b", "1"), pk("b", "2"), pk("c", "1", "Depends=b (<< 2)")},
			reqs: []string{"a"}, want: "a=1@r b=1@r<-a,c c=1@r<-a"},
		{name: "re-pick follows new dependencies", pkgs: []Package{
			pk("a", "1", "Depends=b, c"), pk("b", "1", "Depends=old"), pk("b", "2", "Depends=new"), pk("old", "1"), pk("new", "1"),
			pk("c", "1", "Depends=b (<< 2)")},
			reqs: []string{"a"}, want: "a=1@r b=1@r<-a,c c=1@r<-a old=1@r<-b"},
		{name: "conflict names both constraints and askers", pkgs: []Package{
			pk("a", "1", "Depends=b (>= 2)"), pk("c", "1", "Depends=b (<< 2)"), pk("b", "1"), pk("b", "2")},
			reqs: []string{"a", "c"}, wantErr: "b: needed at incompatible versions: (>= 2) required by a 1, (<< 2) required by c 1; available: 2, 1"},
		{name: "conflict with requested version", pkgs: []Package{
			pk("a", "1", "Depends=b (>= 2)"), pk("b", "1"), pk("b", "2")},
			reqs: []string{"a", "b=1"}, wantErr: "b: needed at incompatible versions: (= 1) as requested, (>= 2) required by a 1"},
		{name: "unsatisfiable version", pkgs: []Package{pk("a", "1", "Depends=b (>= 5)"), pk("b", "1")},
			reqs: []string{"a"}, wantErr: "b: no version satisfies (>= 5) required by a 1; available: 1"},
		{name: "bad dependency field", pkgs: []Package{pk("a", "1", "Depends=b (>= 5")},
			reqs: []string{"a"}, wantErr: `a 1: invalid Depends "b (>= 5"`},
		{name: "version whose dependencies fail is skipped", pkgs: []Package{
			pk("a", "1", "Depends=b"), pk("b", "2", "Depends=gone"), pk("b", "1")},
			reqs: []string{"a"}, want: "a=1@r b=1@r<-a"},
		{name: "every version failing reports the last reason", pkgs: []Package{
			pk("a", "1", "Depends=b"), pk("b", "2", "Depends=gone"), pk("b", "1", "Depends=gone2")},
			reqs: []string{"a"}, wantErr: "b 1 depends on gone2"},
		{name: "pinned version with failing dependency is not swapped", pkgs: []Package{
			pk("b", "2", "Depends=gone"), pk("b", "1")},
			reqs: []string{"b=2"}, wantErr: "b 2 depends on gone"},
		{name: "dependency cycle", pkgs: []Package{pk("a", "1", "Depends=b"), pk("b", "1", "Depends=a")},
			reqs: []string{"a"}, want: "a=1@r b=1@r<-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reqs []Request
			for _, r := range tt.reqs {
				n, v, _ := strings.Cut(r, "=")
				reqs = append(reqs, Request{Name: n, Version: v})
			}
			ex := map[string]bool{}
			for _, e := range tt.exclude {
				ex[e] = true
			}
			got, err := Resolve([]*Index{idx("r", tt.pkgs...)}, reqs, ex, "amd64")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve = %s, %v; want error containing %q", summary(got), err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := summary(got); s != tt.want {
				t.Fatalf("Resolve =\n %s\nwant\n %s", s, tt.want)
			}
		})
	}
}

// Requests given in another order, or indexes with no overlapping versions
// given in another order, must not change the answer.
func TestResolveDeterministic(t *testing.T) {
	a := idx("a", pk("x", "1", "Depends=v, y | z"), pk("y", "2"), pk("p2", "1", "Provides=v"))
	b := idx("b", pk("y", "1"), pk("z", "1"), pk("p1", "1", "Provides=v"))
	r1, err1 := Resolve([]*Index{a, b}, []Request{{Name: "x"}, {Name: "z"}}, nil, "amd64")
	r2, err2 := Resolve([]*Index{b, a}, []Request{{Name: "z"}, {Name: "x"}}, nil, "amd64")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if s1, s2 := summary(r1), summary(r2); s1 != s2 {
		t.Fatalf("order changed the result:\n %s\n %s", s1, s2)
	}
}

// TestResolveVersionRelation is the recipe's "libnccl2 >= 2.25.1": the newest
// version meeting the relation across every index, by Debian ordering (2.29.7
// beats 2.3, a revision and an epoch count), and a clear error when none does.
func TestResolveVersionRelation(t *testing.T) {
	trixie := idx("trixie",
		pk("libnccl2", "2.22.3-1-1", "Depends=libc6 (>= 2.38)"), pk("libc6", "2.41-12"),
		pk("libcudart12", "12.4.127~12.4.1-2"),
	)
	sid := idx("sid",
		pk("libnccl2", "2.29.7-1-1", "Depends=libc6 (>= 2.38)"), pk("libnccl2", "2.3.7-1"),
		pk("libcudart12", "12.4.127~12.4.1-8.2+b1"),
	)
	experimental := idx("experimental", pk("libcudart12", "12.5.39~12.5.0-2+b1"), pk("libnccl2", "2.30.0~rc1-1"))
	all := []*Index{trixie, sid, experimental}
	tests := []struct {
		name    string
		indexes []*Index
		req     string
		want    string
		wantErr string
	}{
		{name: ">= picks the newest across indexes", indexes: []*Index{trixie, sid}, req: "libnccl2 >= 2.25.1",
			want: "libc6=2.41-12@trixie<-libnccl2 libnccl2=2.29.7-1-1@sid"},
		{name: "a tilde sorts before the release", indexes: all, req: "libnccl2 << 2.30.0",
			want: "libnccl2=2.30.0~rc1-1@experimental"},
		{name: "<= keeps the old one", indexes: all, req: "libnccl2<=2.22.3-1-1",
			want: "libc6=2.41-12@trixie<-libnccl2 libnccl2=2.22.3-1-1@trixie"},
		{name: ">> strict", indexes: all, req: "libcudart12 >> 12.4.127~12.4.1-8.2+b1",
			want: "libcudart12=12.5.39~12.5.0-2+b1@experimental"},
		{name: "= exact still works", indexes: all, req: "libcudart12 = 12.4.127~12.4.1-2",
			want: "libcudart12=12.4.127~12.4.1-2@trixie"},
		{name: "none satisfies", indexes: []*Index{trixie}, req: "libnccl2 >= 2.25.1",
			wantErr: "libnccl2: no version satisfies (>= 2.25.1) in trixie; available: 2.22.3-1-1"},
		{name: "unknown package with a relation", indexes: all, req: "libnccl3 >= 1",
			wantErr: "libnccl3: no package of that name for amd64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := ParseRequest(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Resolve(tt.indexes, []Request{req}, nil, "amd64")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve = %s, %v; want error containing %q", summary(got), err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := summary(got); s != tt.want {
				t.Fatalf("Resolve =\n %s\nwant\n %s", s, tt.want)
			}
		})
	}
}

func TestParseRequest(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "libnccl2", want: "libnccl2"},
		{in: "libnccl2=2.22.3-1-1", want: "libnccl2=2.22.3-1-1"},
		{in: "libnccl2 >= 2.25.1", want: "libnccl2 >= 2.25.1"},
		{in: "libnccl2>=2.25.1", want: "libnccl2 >= 2.25.1"},
		{in: "libcuda1 << 1:560", want: "libcuda1 << 1:560"},
		{in: "libnccl2 > 2", wantErr: "want one of >= <= >> << ="},
		{in: "libnccl2 >= ", wantErr: "want a Debian version after >="},
		{in: "libnccl2 >= 2.25 1", wantErr: "want a Debian version after >="},
		{in: "LibNCCL >= 2", wantErr: "is not a Debian package name"},
		{in: ">= 2", wantErr: "is not a Debian package name"},
		{in: "lib nccl", wantErr: "is not a Debian package name"},
	}
	for _, tt := range tests {
		r, err := ParseRequest(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseRequest(%q) = %v, %v; want error containing %q", tt.in, r, err, tt.wantErr)
			}
			continue
		}
		if err != nil || r.String() != tt.want {
			t.Errorf("ParseRequest(%q) = %q, %v; want %q", tt.in, r.String(), err, tt.want)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"libnccl2", "libnccl2 >= 2.25.1", "a=1", "x<<1:2~b", "p >>= 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRequest(s)
		if err != nil {
			return
		}
		// What parses writes back to a form that parses to the same request.
		again, err := ParseRequest(r.String())
		if err != nil || again != r && !(again.Op == "=" && r.Op == "" || again.Op == "" && r.Op == "=") {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, r, r.String(), again, err)
		}
	})
}
