package apt

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"pault.ag/go/debian/dependency"
	"pault.ag/go/debian/version"
)

// Request names one package the recipe asks for: the newest version, an exact
// Version, or with Op the newest version in relation Op to Version.
type Request struct {
	Name    string
	Op      string // "", "=", ">=", "<=", ">>" or "<<" (Debian's relations); "" with a Version is "="
	Version string // "" = newest available
}

// Ops are the version relations a Request may carry, as Debian writes them.
var Ops = []string{">=", "<=", ">>", "<<", "="}

// ParseRequest reads "name", "name=version" or "name OP version" (OP one of
// Ops, blanks around it optional): the forms a recipe's userspace.packages takes.
func ParseRequest(s string) (Request, error) {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune("<>=", rune(s[i])) {
			continue
		}
		name, rest := strings.TrimSpace(s[:i]), s[i:]
		op := ""
		for _, o := range Ops {
			if strings.HasPrefix(rest, o) {
				op = o
				break
			}
		}
		if op == "" {
			return Request{}, fmt.Errorf("%q: want one of %s between the name and the version", s, strings.Join(Ops, " "))
		}
		ver := strings.TrimSpace(rest[len(op):])
		if !validName(name) {
			return Request{}, fmt.Errorf("%q: %q is not a Debian package name", s, name)
		}
		if _, err := version.Parse(ver); err != nil || ver == "" || strings.ContainsAny(ver, " \t<>") {
			return Request{}, fmt.Errorf("%q: want a Debian version after %s, got %q", s, op, ver)
		}
		return Request{Name: name, Op: op, Version: ver}, nil
	}
	name := strings.TrimSpace(s)
	if !validName(name) {
		return Request{}, fmt.Errorf("%q is not a Debian package name", s)
	}
	return Request{Name: name}, nil
}

// String writes r back the way ParseRequest reads it.
func (r Request) String() string {
	switch {
	case r.Version == "":
		return r.Name
	case r.Op == "" || r.Op == "=":
		return r.Name + "=" + r.Version
	}
	return r.Name + " " + r.Op + " " + r.Version
}

// exact says whether r names one version.
func (r Request) exact() bool { return r.Version != "" && (r.Op == "" || r.Op == "=") }

// Resolved is one package of a resolution.
type Resolved struct {
	Package
	RequiredBy []string // sorted names of packages whose dependency pulled it in; empty for requested ones
}

// maxPasses bounds re-resolution. Each extra pass is caused by a constraint
// not seen before, so real inputs settle in a handful.
const maxPasses = 200

// Resolve returns the closure over Depends and Pre-Depends of the requested
// packages, sorted by name. Candidates are packages of arch or "all"; among
// those meeting every constraint on a name the highest version wins, ties
// going to the earlier index. When a dependency found later rules out an
// earlier pick, resolution restarts with that constraint known from the
// start, so picks never silently violate a constraint.
func Resolve(indexes []*Index, reqs []Request, exclude map[string]bool, arch string) ([]Resolved, error) {
	u, err := newUniverse(indexes, exclude, arch)
	if err != nil {
		return nil, err
	}
	sorted := append([]Request(nil), reqs...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Name != sorted[j].Name {
			return sorted[i].Name < sorted[j].Name
		}
		return sorted[i].Version < sorted[j].Version
	})
	for _, r := range sorted {
		if exclude[r.Name] {
			return nil, fmt.Errorf("%s is both requested and excluded; drop it from one of the two lists", r.Name)
		}
	}
	learned := map[string][]constraint{}
	seen := map[string]bool{}
	for range maxPasses {
		p := newPass(u, learned)
		res, again, err := p.run(sorted)
		if err != nil {
			return nil, err
		}
		if again == nil {
			return res, nil
		}
		key := again.name + "\x00" + again.c.by + "\x00" + again.c.text
		if seen[key] {
			return nil, fmt.Errorf("dependency resolution does not settle: %s keeps being ruled out by %s (%s)",
				again.name, again.c.by, again.c.text)
		}
		seen[key] = true
		learned[again.name] = append(learned[again.name], again.c)
	}
	return nil, fmt.Errorf("dependency resolution did not settle after %d passes", maxPasses)
}

// cand is one installable package version.
type cand struct {
	pkg      *Package
	ver      version.Version
	idx      int // position of its index in the indexes slice, for ties
	provides []provided
	deps     []dependency.Relation // Pre-Depends then Depends, parsed on first use
	parsed   bool
}

type provided struct {
	name string
	ver  *version.Version // nil: unversioned Provides
}

type providerRef struct {
	c   *cand
	ver *version.Version
}

// universe is everything installable, indexed for lookups.
type universe struct {
	arch      string
	target    *dependency.Arch
	exclude   map[string]bool
	repoNames []string
	byName    map[string][]*cand // best first
	providers map[string][]providerRef
}

func newUniverse(indexes []*Index, exclude map[string]bool, arch string) (*universe, error) {
	target, err := dependency.ParseArch(arch)
	if err != nil {
		return nil, fmt.Errorf("architecture %q: %w", arch, err)
	}
	u := &universe{arch: arch, target: target, exclude: exclude,
		byName: map[string][]*cand{}, providers: map[string][]providerRef{}}
	for i, idx := range indexes {
		if idx == nil {
			continue
		}
		if !contains(u.repoNames, idx.Repo.Name) {
			u.repoNames = append(u.repoNames, idx.Repo.Name)
		}
		for j := range idx.Packages {
			pkg := &idx.Packages[j]
			if pkg.Architecture != arch && pkg.Architecture != "all" {
				continue
			}
			v, err := version.Parse(pkg.Version)
			if err != nil {
				return nil, fmt.Errorf("%s in %s: invalid version %q: %w", pkg.Name, idx.Repo.Name, pkg.Version, err)
			}
			c := &cand{pkg: pkg, ver: v, idx: i}
			if pkg.Provides != "" {
				d, err := dependency.Parse(pkg.Provides)
				if err != nil {
					return nil, fmt.Errorf("%s %s in %s: invalid Provides %q: %w", pkg.Name, pkg.Version, idx.Repo.Name, pkg.Provides, err)
				}
				for _, pr := range d.GetAllPossibilities() {
					p := provided{name: pr.Name}
					if pr.Version != nil && pr.Version.Operator == "=" {
						if pv, err := version.Parse(pr.Version.Number); err == nil {
							p.ver = &pv
						}
					}
					c.provides = append(c.provides, p)
					u.providers[pr.Name] = append(u.providers[pr.Name], providerRef{c: c, ver: p.ver})
				}
			}
			u.byName[pkg.Name] = append(u.byName[pkg.Name], c)
		}
	}
	for _, cs := range u.byName {
		// Stable: same version in two indexes keeps the earlier index first.
		sort.SliceStable(cs, func(a, b int) bool {
			if r := version.Compare(cs[a].ver, cs[b].ver); r != 0 {
				return r > 0
			}
			return cs[a].idx < cs[b].idx
		})
	}
	for _, ps := range u.providers {
		sort.SliceStable(ps, func(a, b int) bool {
			if ps[a].c.pkg.Name != ps[b].c.pkg.Name {
				return ps[a].c.pkg.Name < ps[b].c.pkg.Name
			}
			if r := version.Compare(ps[a].c.ver, ps[b].c.ver); r != 0 {
				return r > 0
			}
			return ps[a].c.idx < ps[b].c.idx
		})
	}
	return u, nil
}

func (c *cand) dependencies() ([]dependency.Relation, error) {
	if c.parsed {
		return c.deps, nil
	}
	for _, f := range []struct{ name, val string }{{"Pre-Depends", c.pkg.PreDepends}, {"Depends", c.pkg.Depends}} {
		if strings.TrimSpace(f.val) == "" {
			continue
		}
		d, err := dependency.Parse(f.val)
		if err != nil {
			return nil, fmt.Errorf("%s %s: invalid %s %q: %w", c.pkg.Name, c.pkg.Version, f.name, f.val, err)
		}
		c.deps = append(c.deps, d.Relations...)
	}
	c.parsed = true
	return c.deps, nil
}

func (c *cand) String() string { return c.pkg.Name + " " + c.pkg.Version }

// providesOK reports whether c provides name in a way that meets vr. An
// unversioned Provides never meets a versioned dependency (Debian policy 7.5).
func (c *cand) providesOK(name string, vr *dependency.VersionRelation) bool {
	for _, p := range c.provides {
		if p.name != name {
			continue
		}
		if vr == nil || (p.ver != nil && vr.SatisfiedBy(*p.ver)) {
			return true
		}
	}
	return false
}

// constraint is one demand on which version of a name may be picked.
type constraint struct {
	by   string // who asked: "requested" or "name version"
	text string // the demand as a user reads it
	ok   func(*cand) bool
}

func versionConstraint(by string, vr *dependency.VersionRelation) constraint {
	if vr == nil {
		return constraint{by: by, text: "any version", ok: func(*cand) bool { return true }}
	}
	return constraint{by: by, text: "(" + vr.Operator + " " + vr.Number + ")",
		ok: func(c *cand) bool { return vr.SatisfiedBy(c.ver) }}
}

type restart struct {
	name string
	c    constraint
}

// pass is one attempt at resolution with some constraints known up front.
type pass struct {
	u         *universe
	selected  map[string]*cand
	cons      map[string][]constraint
	reqBy     map[string]map[string]bool
	requested map[string]bool
	queue     []*cand
}

func newPass(u *universe, learned map[string][]constraint) *pass {
	p := &pass{u: u, selected: map[string]*cand{}, cons: map[string][]constraint{},
		reqBy: map[string]map[string]bool{}, requested: map[string]bool{}}
	for n, cs := range learned {
		p.cons[n] = append([]constraint(nil), cs...)
	}
	return p
}

func (p *pass) run(reqs []Request) ([]Resolved, *restart, error) {
	for _, r := range reqs {
		again, err := p.request(r)
		if err != nil || again != nil {
			return nil, again, err
		}
	}
	for len(p.queue) > 0 {
		c := p.queue[0]
		p.queue = p.queue[1:]
		again, err := p.follow(c)
		var unmet *unmetError
		if errors.As(err, &unmet) {
			// c cannot be installed; if another version of it fits, retry
			// without this one, as apt would. Otherwise the error stands.
			if again := p.without(c); again != nil {
				return nil, again, nil
			}
		}
		if err != nil || again != nil {
			return nil, again, err
		}
	}
	names := make([]string, 0, len(p.selected))
	for n := range p.selected {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Resolved, 0, len(names))
	for _, n := range names {
		r := Resolved{Package: *p.selected[n].pkg}
		if !p.requested[n] {
			for by := range p.reqBy[n] {
				r.RequiredBy = append(r.RequiredBy, by)
			}
			sort.Strings(r.RequiredBy)
		}
		out = append(out, r)
	}
	return out, nil, nil
}

func (p *pass) request(r Request) (*restart, error) {
	cs := p.u.byName[r.Name]
	if len(cs) == 0 {
		if r.Version == "" && len(p.u.providers[r.Name]) > 0 {
			// A virtual name: install what provides it, as apt would.
			return p.pickProvider(r.Name, nil, nil, true)
		}
		if r.exact() {
			return nil, fmt.Errorf("%s: version %s not found in %s; available: none", r.Name, r.Version, p.repos())
		}
		return nil, fmt.Errorf("%s: no package of that name for %s in %s", r.Name, p.u.arch, p.repos())
	}
	c := versionConstraint("requested", nil)
	if r.Version != "" && !r.exact() {
		if !contains(Ops, r.Op) {
			return nil, fmt.Errorf("%s: version relation %q: want one of %s", r.Name, r.Op, strings.Join(Ops, " "))
		}
		if _, err := version.Parse(r.Version); err != nil {
			return nil, fmt.Errorf("%s: requested version %q is not a valid Debian version: %w", r.Name, r.Version, err)
		}
		// The newest version meeting the relation, across every index (byName is
		// sorted newest first by Debian ordering); none is an error naming what
		// the indexes have.
		c = versionConstraint("requested", &dependency.VersionRelation{Operator: r.Op, Number: r.Version})
		if !slices.ContainsFunc(cs, c.ok) {
			return nil, fmt.Errorf("%s: no version satisfies (%s %s) in %s; available: %s", r.Name, r.Op, r.Version, p.repos(), available(cs))
		}
	} else if r.Version != "" {
		want, err := version.Parse(r.Version)
		if err != nil {
			return nil, fmt.Errorf("%s: requested version %q is not a valid Debian version: %w", r.Name, r.Version, err)
		}
		found := false
		for _, x := range cs {
			found = found || version.Compare(x.ver, want) == 0
		}
		if !found {
			return nil, fmt.Errorf("%s: version %s not found in %s; available: %s", r.Name, r.Version, p.repos(), available(cs))
		}
		c = versionConstraint("requested", &dependency.VersionRelation{Operator: "=", Number: r.Version})
	}
	p.requested[r.Name] = true
	return p.need(r.Name, c, nil)
}

// unmetError is a dependency that no candidate meets, as opposed to
// broken metadata; only the former is worth trying another version for.
type unmetError struct{ msg string }

func (e *unmetError) Error() string { return e.msg }

func unmet(format string, args ...any) error {
	return &unmetError{msg: fmt.Sprintf(format, args...)}
}

// without returns a restart that rules out c's version, or nil when no
// other version of c fits the constraints already known.
func (p *pass) without(c *cand) *restart {
	name := c.pkg.Name
	k := constraint{by: c.String() + " (its dependencies cannot be met)", text: "other than " + c.pkg.Version,
		ok: func(x *cand) bool { return version.Compare(x.ver, c.ver) != 0 }}
	for _, x := range p.u.byName[name] {
		if x != c && k.ok(x) && p.fits(name, x) {
			return &restart{name: name, c: k}
		}
	}
	return nil
}

// need records c on name and makes sure the pick for name meets it.
func (p *pass) need(name string, c constraint, from *cand) (*restart, error) {
	p.cons[name] = append(p.cons[name], c)
	if from != nil {
		if p.reqBy[name] == nil {
			p.reqBy[name] = map[string]bool{}
		}
		p.reqBy[name][from.pkg.Name] = true
	}
	if sel := p.selected[name]; sel != nil {
		if c.ok(sel) {
			return nil, nil
		}
		if p.best(name) != nil {
			// An earlier pick is ruled out but another version fits
			// everything: start over knowing this constraint.
			return &restart{name: name, c: c}, nil
		}
		return nil, p.conflict(name)
	}
	best := p.best(name)
	if best == nil {
		return nil, p.conflict(name)
	}
	p.selected[name] = best
	p.queue = append(p.queue, best)
	return nil, nil
}

func (p *pass) best(name string) *cand {
	for _, c := range p.u.byName[name] {
		if p.fits(name, c) {
			return c
		}
	}
	return nil
}

func (p *pass) fits(name string, c *cand) bool {
	for _, k := range p.cons[name] {
		if !k.ok(c) {
			return false
		}
	}
	return true
}

func (p *pass) conflict(name string) error {
	cs := p.u.byName[name]
	if len(cs) == 0 {
		asked := p.cons[name]
		by := ""
		if len(asked) > 0 {
			by = " (required by " + asked[len(asked)-1].by + ")"
		}
		return unmet("%s: not found for %s in %s%s", name, p.u.arch, p.repos(), by)
	}
	var parts []string
	for _, k := range p.cons[name] {
		if k.by == "requested" {
			parts = append(parts, k.text+" as requested")
		} else {
			parts = append(parts, k.text+" required by "+k.by)
		}
	}
	if len(parts) == 1 {
		return unmet("%s: no version satisfies %s; available: %s", name, parts[0], available(cs))
	}
	return unmet("%s: needed at incompatible versions: %s; available: %s", name, strings.Join(parts, ", "), available(cs))
}

// follow selects what c's dependencies need.
func (p *pass) follow(c *cand) (*restart, error) {
	rels, err := c.dependencies()
	if err != nil {
		return nil, err
	}
	for _, rel := range rels {
		poss := p.applicable(rel)
		if len(poss) == 0 {
			continue // only for other architectures
		}
		again, err := p.satisfy(c, poss)
		if err != nil || again != nil {
			return again, err
		}
	}
	return nil, nil
}

// applicable drops alternatives that cannot apply on this architecture:
// "[i386]" restrictions and qualifiers naming a foreign architecture.
func (p *pass) applicable(rel dependency.Relation) []dependency.Possibility {
	var out []dependency.Possibility
	for _, x := range rel.Possibilities {
		if x.Substvar || x.Name == "" {
			continue
		}
		if x.Architectures != nil && len(x.Architectures.Architectures) > 0 && !x.Architectures.Matches(p.u.target) {
			continue
		}
		if x.Arch != nil {
			q := x.Arch.CPU
			if q != "any" && q != "native" && q != p.u.arch && x.Arch.String() != p.u.arch {
				continue
			}
		}
		out = append(out, x)
	}
	return out
}

func (p *pass) satisfy(from *cand, poss []dependency.Possibility) (*restart, error) {
	by := from.String()
	// An alternative already installed wins, so a choice made elsewhere is reused.
	for _, x := range poss {
		if sel := p.selected[x.Name]; sel != nil && versionConstraint(by, x.Version).ok(sel) {
			return p.need(x.Name, versionConstraint(by, x.Version), from)
		}
		for _, pr := range p.u.providers[x.Name] {
			if sel := p.selected[pr.c.pkg.Name]; sel == pr.c && pr.c.providesOK(x.Name, x.Version) {
				return p.need(pr.c.pkg.Name, providesConstraint(by, x.Name, x.Version), from)
			}
		}
	}
	for _, x := range poss {
		if p.u.exclude[x.Name] {
			return nil, nil // the recipe drops it on purpose
		}
		vc := versionConstraint(by, x.Version)
		for _, c := range p.u.byName[x.Name] {
			if vc.ok(c) && p.fits(x.Name, c) {
				return p.need(x.Name, vc, from)
			}
		}
		if again, err, ok := p.tryProvider(x.Name, x.Version, from); ok {
			return again, err
		}
		if p.onlyExcludedProviders(x.Name, x.Version) {
			return nil, nil
		}
	}
	// Nothing fits: report against the first alternative that exists at all,
	// which gives the most specific message.
	for _, x := range poss {
		if len(p.u.byName[x.Name]) > 0 {
			return p.need(x.Name, versionConstraint(by, x.Version), from)
		}
	}
	names := make([]string, len(poss))
	for i, x := range poss {
		names[i] = x.Name
		if x.Version != nil {
			names[i] += " (" + x.Version.Operator + " " + x.Version.Number + ")"
		}
	}
	return nil, unmet("%s depends on %s, which no package in %s is or provides for %s",
		by, strings.Join(names, " | "), p.repos(), p.u.arch)
}

func providesConstraint(by, virtual string, vr *dependency.VersionRelation) constraint {
	text := "providing " + virtual
	if vr != nil {
		text += " (" + vr.Operator + " " + vr.Number + ")"
	}
	return constraint{by: by, text: text, ok: func(c *cand) bool { return c.providesOK(virtual, vr) }}
}

// tryProvider picks the lexically smallest provider of virtual that fits;
// ok is false when none does.
func (p *pass) tryProvider(virtual string, vr *dependency.VersionRelation, from *cand) (*restart, error, bool) {
	for _, pr := range p.u.providers[virtual] {
		name := pr.c.pkg.Name
		if p.u.exclude[name] || !pr.c.providesOK(virtual, vr) || !p.fits(name, pr.c) {
			continue
		}
		again, err := p.pickProvider(virtual, vr, from, false)
		return again, err, true
	}
	return nil, nil, false
}

// pickProvider selects the first fitting provider (lexical by name) of virtual.
func (p *pass) pickProvider(virtual string, vr *dependency.VersionRelation, from *cand, requested bool) (*restart, error) {
	by := "requested"
	if from != nil {
		by = from.String()
	}
	for _, pr := range p.u.providers[virtual] {
		name := pr.c.pkg.Name
		if p.u.exclude[name] || !pr.c.providesOK(virtual, vr) || !p.fits(name, pr.c) {
			continue
		}
		if requested {
			p.requested[name] = true
		}
		return p.need(name, providesConstraint(by, virtual, vr), from)
	}
	return nil, unmet("%s: no package provides it for %s in %s", virtual, p.u.arch, p.repos())
}

func (p *pass) onlyExcludedProviders(virtual string, vr *dependency.VersionRelation) bool {
	for _, pr := range p.u.providers[virtual] {
		if p.u.exclude[pr.c.pkg.Name] && pr.c.providesOK(virtual, vr) {
			return true
		}
	}
	return false
}

func (p *pass) repos() string {
	if len(p.u.repoNames) == 0 {
		return "no repositories"
	}
	return strings.Join(p.u.repoNames, ", ")
}

// available lists the distinct versions of cs, newest first.
func available(cs []*cand) string {
	var vs []string
	for _, c := range cs {
		if !contains(vs, c.pkg.Version) {
			vs = append(vs, c.pkg.Version)
		}
	}
	return strings.Join(vs, ", ")
}
