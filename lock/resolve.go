package lock

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"pault.ag/go/debian/version"

	"github.com/peerboot/peerboot/apt"
	"github.com/peerboot/peerboot/recipe"
)

// Resolver turns recipes into lock files.
type Resolver struct {
	Client *apt.Client
	AptDir string // where the machine's apt sources live, for mirror = "system"
	// Log, if set, receives one line per repository loaded, and the warnings.
	Log func(format string, args ...any)
	// Keep is the lock being replaced, nil for none: its pins of the recipe's
	// version-range requests ("libnccl2 >= 2.25.1") stay while they still meet the
	// range and are still in the indexes (PinKeeping), so a re-lock does not move a
	// library only because the archive gained a newer one.
	Keep *File
}

// AptRepo turns a recipe repository into one apt can load, finding the mirror.
func AptRepo(r recipe.Repo, aptDir string) (apt.Repo, error) {
	base := r.URL
	if r.Mirror == "system" {
		m, err := apt.SystemMirror(aptDir, r.Suite)
		if err != nil {
			return apt.Repo{}, fmt.Errorf("repo %s: finding this machine's mirror: %w", r.Name, err)
		}
		base = m
	}
	return apt.Repo{Name: r.Name, BaseURL: strings.TrimSuffix(base, "/"), Suite: r.Suite,
		Components: r.Components, Arch: r.Architecture, Keyring: r.Keyring,
		IgnoreValidUntil: !r.ValidUntilChecked()}, nil
}

// Resolve loads every repository's verified index and pins the recipe's packages.
func (rs *Resolver) Resolve(ctx context.Context, r *recipe.Resolved) (*File, error) {
	var indexes []*apt.Index
	for _, rr := range r.Repos {
		repo, err := AptRepo(rr, rs.AptDir)
		if err != nil {
			return nil, &PinError{err}
		}
		idx, err := rs.Client.LoadIndex(ctx, repo)
		if err != nil {
			return nil, fmt.Errorf("repo %s: %w", rr.Name, err)
		}
		if rs.Log != nil {
			rs.Log("repo %s: %d packages, InRelease %s (%s)", rr.Name, len(idx.Packages), idx.InReleaseSHA256[:12], idx.Date.UTC().Format("2006-01-02"))
			if idx.Expired {
				// Read on purpose (check_valid_until = false), but a reviewer should
				// know: nothing newer than this date is in the pins from it.
				rs.Log("warning: repo %s: InRelease expired at %s (Valid-Until), dated %s; read because check_valid_until = false: "+
					"the suite or this mirror is no longer refreshed, and pins from it may miss fixes published since",
					rr.Name, idx.ValidUntil.UTC().Format(time.RFC1123), idx.Date.UTC().Format(time.RFC1123))
			}
		}
		indexes = append(indexes, idx)
	}
	f, kept, err := PinKeeping(r, indexes, rs.Keep)
	if err != nil {
		return nil, &PinError{err}
	}
	for _, k := range kept {
		if rs.Log == nil {
			break
		}
		newer := ""
		if k.Newest != "" {
			newer = "; " + k.Newest + " is newer (lock --upgrade takes it)"
		}
		rs.Log("keeping %s %s, the lock's pin, which still meets %q%s", k.Request.Name, k.Version, k.Request.String(), newer)
	}
	for _, idx := range indexes {
		x := IndexPin{Repo: idx.Repo.Name, Suite: idx.Repo.Suite, Date: idx.Date.UTC().Format(time.RFC3339),
			Expired: idx.Expired, InRelease: idx.InReleaseSHA256}
		if !idx.ValidUntil.IsZero() {
			x.ValidUntil = idx.ValidUntil.UTC().Format(time.RFC3339)
		}
		f.Indexes = append(f.Indexes, x)
	}
	return f, nil
}

// onlyListed narrows each index to its repository's `only` list (apt pinning the
// rest of the suite away), failing for a listed name the index does not have: a
// typo there would otherwise silently take the package from another repository.
func onlyListed(r *recipe.Resolved, indexes []*apt.Index) ([]*apt.Index, error) {
	only := map[string]recipe.Repo{}
	for _, rr := range r.Repos {
		if len(rr.Only) > 0 {
			only[rr.Name] = rr
		}
	}
	out := make([]*apt.Index, len(indexes))
	for i, idx := range indexes {
		out[i] = idx
		rr, ok := only[idx.Repo.Name]
		if !ok {
			continue
		}
		keep := map[string]bool{}
		for _, n := range rr.Only {
			keep[n] = true
		}
		cp := *idx
		cp.Packages = nil
		found := map[string]bool{}
		for _, p := range idx.Packages {
			if keep[p.Name] {
				cp.Packages = append(cp.Packages, p)
				found[p.Name] = true
			}
		}
		for _, n := range rr.Only {
			if !found[n] {
				return nil, fmt.Errorf("repo %s: only lists %s, which %s does not have for %s", rr.Name, n, rr.Suite, rr.Architecture)
			}
		}
		out[i] = &cp
	}
	return out, nil
}

// PinError is a Resolve failure in the recipe's own terms, not the network's: a
// package, version or dependency the loaded repositories do not have, or a
// repository whose mirror this machine's apt sources do not name.
type PinError struct{ Err error }

func (e *PinError) Error() string { return e.Err.Error() }
func (e *PinError) Unwrap() error { return e.Err }

// Pin resolves the recipe against loaded indexes; it does no I/O, so tests drive it
// with fixture indexes.
func Pin(r *recipe.Resolved, indexes []*apt.Index) (*File, error) {
	f, _, err := PinKeeping(r, indexes, nil)
	return f, err
}

// Kept is a version-range request that a re-lock answered with the previous lock's
// pin rather than the newest version meeting it.
type Kept struct {
	Request apt.Request // as the recipe wrote it: libnccl2 >= 2.25.1
	Version string      // the pin kept
	Newest  string      // the newest version meeting the request, when newer than Version
}

// PinKeeping is Pin that keeps prev's pins (nil: none) where apt would keep an
// installed package: a userspace request with a version range (>=, <=, >>, <<) whose
// package prev pins at a version that still meets the range and that the indexes
// (after `only`) still carry stays at that version, although a newer one meets the
// range too. Exact requests, plain names, dependencies and source packages are
// resolved as Pin does. When the kept versions cannot be resolved together any more
// (a dependency of one is gone), the range requests take the newest again and
// nothing is reported kept.
func PinKeeping(r *recipe.Resolved, indexes []*apt.Index, prev *File) (*File, []Kept, error) {
	indexes, err := onlyListed(r, indexes)
	if err != nil {
		return nil, nil, err
	}
	f := &File{Recipe: r.Name, InputsDigest: InputsDigest(&r.Recipe)}
	for _, s := range []struct {
		role string
		src  recipe.Source
	}{{RoleKernelSource, r.Kernel.Source}, {RoleDriverSource, r.Driver.Source}, {RoleEFIStub, r.Outputs.EFIStub}} {
		if s.src.Deb == "" {
			continue
		}
		p, err := Find(indexes, apt.Request{Name: s.src.Deb, Version: s.src.Version}, r.Repos[0].Architecture)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", s.role, err)
		}
		f.Debs = append(f.Debs, debOf(p, s.role, nil))
	}
	var reqs []apt.Request
	for _, p := range r.Userspace.Packages {
		req, err := apt.ParseRequest(p)
		if err != nil {
			return nil, nil, fmt.Errorf("userspace: %w", err) // recipe.Load refuses these first
		}
		reqs = append(reqs, req)
	}
	exclude := map[string]bool{}
	for _, e := range r.Userspace.Exclude {
		exclude[e.Package] = true
	}
	var kept []Kept
	if len(reqs) > 0 {
		arch := r.Repos[0].Architecture
		keptReqs, k := keepRequests(reqs, prev, indexes, arch)
		closure, err := apt.Resolve(indexes, keptReqs, exclude, arch)
		kept = k
		if err != nil && len(k) > 0 {
			closure, err = apt.Resolve(indexes, reqs, exclude, arch)
			kept = nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("userspace: %w", err)
		}
		for _, p := range closure {
			f.Debs = append(f.Debs, debOf(p.Package, RoleUserspace, p.RequiredBy))
		}
	}
	if in := r.Userspace.Installer; in.URL != "" {
		f.Files = append(f.Files, FilePin{Role: RoleInstaller, Name: path.Base(in.URL), URL: in.URL, SHA256: in.SHA256, Size: in.Size})
	}
	sort.SliceStable(f.Debs, func(i, j int) bool {
		if f.Debs[i].Role != f.Debs[j].Role {
			return roleOrder(f.Debs[i].Role) < roleOrder(f.Debs[j].Role)
		}
		return f.Debs[i].Package < f.Debs[j].Package
	})
	return f, kept, nil
}

// keepRequests turns each version-range request that prev pins at a version still
// meeting it, and still in indexes, into an exact request for that version.
func keepRequests(reqs []apt.Request, prev *File, indexes []*apt.Index, arch string) ([]apt.Request, []Kept) {
	if prev == nil {
		return reqs, nil
	}
	out := slices.Clone(reqs)
	var kept []Kept
	for i, q := range reqs {
		if q.Version == "" || q.Op == "" || q.Op == "=" {
			continue
		}
		at := slices.IndexFunc(prev.Debs, func(d Deb) bool { return d.Role == RoleUserspace && d.Package == q.Name })
		if at < 0 || !meets(prev.Debs[at].Version, q.Op, q.Version) {
			continue
		}
		pinned, newest, carried := prev.Debs[at].Version, "", false
		for _, idx := range indexes {
			for _, p := range idx.Packages {
				if p.Name != q.Name || (p.Architecture != arch && p.Architecture != "all") || !meets(p.Version, q.Op, q.Version) {
					continue
				}
				carried = carried || p.Version == pinned
				if compareVersions(p.Version, pinned) > 0 && (newest == "" || compareVersions(p.Version, newest) > 0) {
					newest = p.Version
				}
			}
		}
		if carried {
			out[i] = apt.Request{Name: q.Name, Op: "=", Version: pinned}
			kept = append(kept, Kept{Request: q, Version: pinned, Newest: newest})
		}
	}
	return out, kept
}

// meets says whether version have stands in Debian relation op to want.
func meets(have, op, want string) bool {
	c := compareVersions(have, want)
	switch op {
	case ">=":
		return c >= 0
	case "<=":
		return c <= 0
	case ">>":
		return c > 0
	case "<<":
		return c < 0
	}
	return c == 0
}

func roleOrder(role string) int {
	return map[string]int{RoleKernelSource: 0, RoleDriverSource: 1, RoleEFIStub: 2, RoleUserspace: 3}[role]
}

func debOf(p apt.Package, role string, requiredBy []string) Deb {
	return Deb{Package: p.Name, Version: p.Version, Architecture: p.Architecture, Role: role,
		Repo: p.Repo, Filename: p.Filename, Size: p.Size, SHA256: p.SHA256, RequiredBy: requiredBy}
}

// Find picks one package without its dependencies (a source package such as
// linux-source is an input, not something installed): the requested version, or the
// newest; ties go to the earlier repository.
func Find(indexes []*apt.Index, req apt.Request, arch string) (apt.Package, error) {
	var best *apt.Package
	var have []string
	seen := map[string]bool{}
	for _, idx := range indexes {
		for i := range idx.Packages {
			p := &idx.Packages[i]
			if p.Name != req.Name || (p.Architecture != arch && p.Architecture != "all") {
				continue
			}
			if !seen[p.Version] {
				seen[p.Version] = true
				have = append(have, p.Version)
			}
			if req.Version != "" && p.Version != req.Version {
				continue
			}
			if best == nil || compareVersions(p.Version, best.Version) > 0 {
				best = p
			}
		}
	}
	if best != nil {
		return *best, nil
	}
	var repos []string
	for _, idx := range indexes {
		repos = append(repos, idx.Repo.Name)
	}
	if len(have) == 0 {
		return apt.Package{}, fmt.Errorf("package %s not found in %s", req.Name, strings.Join(repos, ", "))
	}
	sort.Slice(have, func(i, j int) bool { return compareVersions(have[i], have[j]) > 0 })
	return apt.Package{}, fmt.Errorf("%s: version %s not found in %s; available: %s", req.Name, req.Version, strings.Join(repos, ", "), strings.Join(have, ", "))
}

func compareVersions(a, b string) int {
	va, errA := version.Parse(a)
	vb, errB := version.Parse(b)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	return version.Compare(va, vb)
}
