package lock

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/recipe"
)

// Kind is how an input is fetched and unpacked.
type Kind string

// The input kinds.
const (
	KindDeb Kind = "deb" // a Debian package from a [[repo]], by sha256
	KindURL Kind = "url" // a file downloaded by URL, by sha256
	KindGit Kind = "git" // a commit of a git repository
)

// Input is one pinned input of a build, ready to fetch.
type Input struct {
	Role   string // kernel-source, driver-source, efi-stub, userspace, installer
	Name   string // package or file name, for messages
	Kind   Kind
	URL    string // where to download it; for git, the clone URL
	SHA256 string // deb and url inputs
	Size   int64  // 0 when unknown
	Commit string // git inputs
}

// Digest identifies the input's content: "sha256:<hex>" or "git:<commit>".
func (i Input) Digest() string {
	if i.Kind == KindGit {
		return "git:" + i.Commit
	}
	return "sha256:" + i.SHA256
}

// Unresolved is an input the lock does not pin yet.
type Unresolved struct {
	Role, Name, Why string
}

func (u Unresolved) String() string { return fmt.Sprintf("%s %s: %s", u.Role, u.Name, u.Why) }

// Inputs lists every pinned input of the recipe (f may be nil when there is no lock),
// and what remains unresolved. baseURL maps a repository name to its archive root.
func Inputs(r *recipe.Resolved, f *File, baseURL func(repo string) (string, error)) ([]Input, []Unresolved, error) {
	var ins []Input
	var un []Unresolved
	debs := map[string][]Deb{}
	if f != nil {
		for _, d := range f.Debs {
			debs[d.Role] = append(debs[d.Role], d)
		}
	}
	addDebs := func(role string, list []Deb) error {
		for _, d := range list {
			base, err := baseURL(d.Repo)
			if err != nil {
				return err
			}
			ins = append(ins, Input{Role: role, Name: d.Package + "_" + d.Version, Kind: KindDeb,
				URL: strings.TrimSuffix(base, "/") + "/" + d.Filename, SHA256: d.SHA256, Size: d.Size})
		}
		return nil
	}
	for _, s := range []struct {
		role string
		src  recipe.Source
	}{{RoleKernelSource, r.Kernel.Source}, {RoleDriverSource, r.Driver.Source}, {RoleEFIStub, r.Outputs.EFIStub}} {
		switch {
		case s.src.Deb != "":
			if len(debs[s.role]) == 0 {
				un = append(un, Unresolved{s.role, s.src.Deb, "Debian package not in the lock file: run `peerboot lock " + r.Path + "`"})
				continue
			}
			if err := addDebs(s.role, debs[s.role]); err != nil {
				return nil, nil, err
			}
		case s.src.URL != "":
			name := s.src.URL[strings.LastIndexByte(s.src.URL, '/')+1:]
			ins = append(ins, Input{Role: s.role, Name: name, Kind: KindURL, URL: s.src.URL, SHA256: s.src.SHA256})
		case s.src.Git != "":
			ins = append(ins, Input{Role: s.role, Name: s.src.Git, Kind: KindGit, URL: s.src.Git, Commit: s.src.Commit})
		}
	}
	if len(r.Userspace.Packages) > 0 {
		if len(debs[RoleUserspace]) == 0 {
			un = append(un, Unresolved{RoleUserspace, strings.Join(r.Userspace.Packages, ", "), "packages not in the lock file: run `peerboot lock " + r.Path + "`"})
		} else if err := addDebs(RoleUserspace, debs[RoleUserspace]); err != nil {
			return nil, nil, err
		}
	}
	if in := r.Userspace.Installer; in.URL != "" {
		var pin *FilePin
		if f != nil {
			for i := range f.Files {
				if f.Files[i].Role == RoleInstaller {
					pin = &f.Files[i]
				}
			}
		}
		if pin == nil {
			un = append(un, Unresolved{RoleInstaller, in.URL[strings.LastIndexByte(in.URL, '/')+1:], "NVIDIA installer not in the lock file: run `peerboot lock " + r.Path + "`"})
		} else {
			ins = append(ins, Input{Role: RoleInstaller, Name: pin.Name, Kind: KindURL, URL: pin.URL, SHA256: pin.SHA256, Size: pin.Size})
		}
	}
	return ins, un, nil
}
