package apt

import (
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"pault.ag/go/debian/version"
)

// Package is one binary package stanza of a Packages index.
type Package struct {
	Name, Version, Architecture string
	// Source is the source package name (without the version that the
	// Source field may carry); it defaults to Name as Debian policy says.
	Source     string
	Component  string // which component index it came from
	Repo       string // Repo.Name
	Filename   string // pool path, relative to BaseURL
	Size       int64
	SHA256     string
	Depends    string // raw field
	PreDepends string // raw field
	Provides   string // raw field
	MultiArch  string
}

// keepPackageField selects the only Packages fields ParsePackages uses.
func keepPackageField(key string) bool {
	switch strings.ToLower(key) {
	case "package", "version", "architecture", "source", "filename", "size",
		"sha256", "depends", "pre-depends", "provides", "multi-arch":
		return true
	}
	return false
}

// ParsePackages parses a Packages index. Every stanza must carry the fields
// needed to fetch and pin the .deb; a stanza that lacks one is an error rather
// than a silently skipped package, because a lock built from a partial index
// would be wrong without anyone noticing.
func ParsePackages(r io.Reader, repo, component string) ([]Package, error) {
	var pkgs []Package
	err := readParagraphs(r, keepPackageField, false, func(p *paragraph) error {
		pkg, err := packageFromParagraph(p)
		if err != nil {
			return err
		}
		pkg.Repo, pkg.Component = repo, component
		pkgs = append(pkgs, pkg)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("parsing Packages index of %s/%s: %w", repo, component, err)
	}
	return pkgs, nil
}

func packageFromParagraph(p *paragraph) (Package, error) {
	var pkg Package
	var size string
	for _, f := range p.Fields {
		switch strings.ToLower(f.Key) {
		case "package":
			pkg.Name = f.Value
		case "version":
			pkg.Version = f.Value
		case "architecture":
			pkg.Architecture = f.Value
		case "source":
			pkg.Source = f.Value
		case "filename":
			pkg.Filename = f.Value
		case "size":
			size = f.Value
		case "sha256":
			pkg.SHA256 = f.Value
		case "depends":
			pkg.Depends = f.Value
		case "pre-depends":
			pkg.PreDepends = f.Value
		case "provides":
			pkg.Provides = f.Value
		case "multi-arch":
			pkg.MultiArch = f.Value
		}
	}
	where := fmt.Sprintf("stanza at line %d", p.Line)
	if pkg.Name != "" {
		where = fmt.Sprintf("package %q (line %d)", pkg.Name, p.Line)
	}
	if !validName(pkg.Name) {
		return pkg, fmt.Errorf("%s: missing or invalid Package field", where)
	}
	if pkg.Version == "" {
		return pkg, fmt.Errorf("%s: missing Version field", where)
	}
	if _, err := version.Parse(pkg.Version); err != nil {
		return pkg, fmt.Errorf("%s: invalid Version %q: %w", where, pkg.Version, err)
	}
	if pkg.Architecture == "" || strings.ContainsAny(pkg.Architecture, " \t\n") {
		return pkg, fmt.Errorf("%s: missing or invalid Architecture field", where)
	}
	// Flat repositories (NVIDIA's) write "./name.deb": the same path as "name.deb".
	pkg.Filename = strings.TrimPrefix(pkg.Filename, "./")
	if err := checkPoolPath(pkg.Filename); err != nil {
		return pkg, fmt.Errorf("%s: %w", where, err)
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n < 0 {
		return pkg, fmt.Errorf("%s: missing or invalid Size %q", where, size)
	}
	pkg.Size = n
	if !isSHA256(pkg.SHA256) {
		return pkg, fmt.Errorf("%s: missing or invalid SHA256 %q", where, truncate(pkg.SHA256, 80))
	}
	pkg.SHA256 = strings.ToLower(pkg.SHA256)
	// "Source: name (version)" names a source version that differs from the binary's.
	if src, _, _ := strings.Cut(pkg.Source, " "); src != "" {
		pkg.Source = src
	} else {
		pkg.Source = pkg.Name
	}
	return pkg, nil
}

// checkPoolPath rejects Filename values that would escape the archive root
// once joined to BaseURL or to a local directory.
func checkPoolPath(p string) error {
	if p == "" {
		return fmt.Errorf("missing Filename field")
	}
	if strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00\n?#") || path.Clean(p) != p ||
		p == ".." || strings.HasPrefix(p, "../") {
		//lint:ignore ST1005 Filename is the Packages field's name
		return fmt.Errorf("Filename %q is not a plain path inside the archive", truncate(p, 80))
	}
	return nil
}

// validName follows Debian policy 5.6.1: lower-case alphanumerics and + - .,
// at least two characters, starting with an alphanumeric.
func validName(s string) bool {
	if len(s) < 2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '+' || c == '-' || c == '.') && i > 0:
		default:
			return false
		}
	}
	return true
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
