package nvrun

import (
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
)

// Manifest is the payload's .manifest, the file nvidia-installer installs from:
// eight header lines (1 the description, 2 the version, 4 the kernel modules; the
// others nvidia-installer ignores too), then one line per file up to a blank line:
//
//	FILE MODE TYPE [ARCH] [PATH | INHERIT_PATH_DEPTH:N] [TARGET] [MODULE:name ...]
//
// ARCH (NATIVE or COMPAT32) is there for types that have one, PATH for types with
// a path, TARGET for symlinks; which is which is the type's (fileTypes).
type Manifest struct {
	Description string
	Version     string
	Modules     []string
	Entries     []Entry
}

// Entry is one file line of the manifest.
type Entry struct {
	Line         int // in .manifest, for messages
	File         string
	Mode         fs.FileMode
	Type         string
	Arch         string // NATIVE, COMPAT32 or ""
	Path         string // for types with a path
	InheritDepth int    // for types that inherit their path: leading directories dropped
	Target       string // for symlinks
	Unknown      bool   // a type this package does not know: only File, Mode and Type are read
}

var typeRe = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// ManifestHeaderLines is how many lines precede the file entries.
const ManifestHeaderLines = 8

// typeCaps is what a manifest line of a type carries after MODE and TYPE.
type typeCaps struct{ arch, path, symlink, inherit bool }

// fileTypes are nvidia-installer's file types (manifest.c's table, unchanged from
// 580.119.02 to 590.48.01) with the fields their lines carry. A type not here is
// kept unread (Entry.Unknown): harmless for files the image does not take, an
// error for one it does.
var fileTypes = func() map[string]typeCaps {
	const (
		A = 1 << iota // has an arch field
		P             // has a path field
		S             // is a symlink (has a target)
		I             // inherits its path (INHERIT_PATH_DEPTH:N)
	)
	m := map[string]typeCaps{}
	for name, f := range map[string]int{
		"KERNEL_MODULE_SRC": I, "KERNEL_MODULE": 0, "CUDA_ICD": 0, "OPENGL_LIB": A, "WINE_LIB": A,
		"CUDA_LIB": A | P, "OPENCL_LIB": A | P, "OPENCL_WRAPPER_LIB": A | P, "OPENCL_LIB_SYMLINK": A | P | S,
		"OPENCL_WRAPPER_SYMLINK": A | P | S, "TLS_LIB": A | P, "UTILITY_LIB": A, "GBM_BACKEND_LIB": A,
		"DOCUMENTATION": P, "APPLICATION_PROFILE": P, "MANPAGE": P, "EXPLICIT_PATH": P,
		"OPENGL_SYMLINK": A | S, "CUDA_SYMLINK": A | P | S, "UTILITY_LIB_SYMLINK": A | S,
		"GBM_BACKEND_LIB_SYMLINK": A | S, "INSTALLER_BINARY": 0, "UTILITY_BINARY": 0,
		"UTILITY_BIN_SYMLINK": S, "DOT_DESKTOP": P, "ICON": P, "XMODULE_SHARED_LIB": P,
		"GLX_MODULE_SHARED_LIB": P, "GLX_MODULE_SYMLINK": P | S, "VDPAU_LIB": A | P, "VDPAU_SYMLINK": A | P | S,
		"NVCUVID_LIB": A, "NVCUVID_LIB_SYMLINK": A | S, "ENCODEAPI_LIB": A, "ENCODEAPI_LIB_SYMLINK": A | S,
		"VGX_LIB": 0, "VGX_LIB_SYMLINK": S, "GRID_LIB": P, "GRID_LIB_SYMLINK": P | S,
		"NVIDIA_MODPROBE": P, "NVIDIA_MODPROBE_MANPAGE": P, "MODULE_SIGNING_KEY": 0,
		"XORG_OUTPUTCLASS_CONFIG": 0, "DKMS_CONF": I, "GLVND_LIB": A, "GLVND_SYMLINK": A | S,
		"GLX_CLIENT_LIB": A, "GLX_CLIENT_SYMLINK": A | S, "VULKAN_ICD_JSON": P, "GLVND_EGL_ICD_JSON": 0,
		"EGL_CLIENT_LIB": A, "EGL_CLIENT_SYMLINK": A | S, "EGL_EXTERNAL_PLATFORM_JSON": 0,
		"FLEXERA_LIB": P, "FLEXERA_LIB_SYMLINK": P | S, "INTERNAL_UTILITY_BINARY": A,
		"INTERNAL_UTILITY_LIB": A, "INTERNAL_UTILITY_DATA": 0, "FIRMWARE": I, "SYSTEMD_UNIT": 0,
		"SYSTEMD_UNIT_SYMLINK": P | S, "SYSTEMD_SLEEP_SCRIPT": 0, "OPENGL_DATA": P,
		"VULKANSC_ICD_JSON": P, "SANDBOXUTILS_FILELIST_JSON": P,
	} {
		m[name] = typeCaps{arch: f&A != 0, path: f&P != 0, symlink: f&S != 0, inherit: f&I != 0}
	}
	return m
}()

// ManifestError is a .manifest line that does not parse.
type ManifestError struct {
	Line int
	Msg  string
}

func (e *ManifestError) Error() string {
	return fmt.Sprintf(".manifest line %d: %s", e.Line, e.Msg)
}

// maxManifest bounds the .manifest read into memory (NVIDIA's is ~60 KiB).
const maxManifest = 4 << 20

// ParseManifest parses a .manifest.
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifest {
		return nil, &ManifestError{Line: 1, Msg: fmt.Sprintf("%d bytes; a manifest is at most %d", len(b), maxManifest)}
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < ManifestHeaderLines+1 {
		return nil, &ManifestError{Line: len(lines), Msg: fmt.Sprintf("ends inside the %d header lines", ManifestHeaderLines)}
	}
	m := &Manifest{Description: strings.TrimSpace(lines[0]), Version: strings.TrimSpace(lines[1]), Modules: strings.Fields(lines[3])}
	if m.Description == "" {
		return nil, &ManifestError{Line: 1, Msg: "empty description"}
	}
	if !versionRe.MatchString(m.Version) {
		return nil, &ManifestError{Line: 2, Msg: fmt.Sprintf("want the driver version, e.g. 580.142, got %q", clip(m.Version))}
	}
	seen := map[string]int{}
	for i := ManifestHeaderLines; i < len(lines); i++ {
		text := strings.TrimRight(lines[i], "\r")
		if strings.TrimSpace(text) == "" {
			break // nvidia-installer stops at the first empty line too
		}
		e, err := parseEntry(i+1, text)
		if err != nil {
			return nil, err
		}
		key := e.Arch + " " + e.File
		if prev, ok := seen[key]; ok {
			return nil, &ManifestError{Line: e.Line, Msg: fmt.Sprintf("%s listed twice (also line %d)", e.File, prev)}
		}
		seen[key] = e.Line
		m.Entries = append(m.Entries, e)
	}
	return m, nil
}

func parseEntry(line int, text string) (Entry, error) {
	bad := func(format string, args ...any) (Entry, error) {
		return Entry{}, &ManifestError{Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	w := strings.Fields(text)
	if len(w) < 3 {
		return bad("want FILE MODE TYPE ..., got %q", clip(text))
	}
	e := Entry{Line: line, File: w[0], Type: w[2]}
	if !safePath(e.File) {
		return bad("file %q leaves the payload", clip(e.File))
	}
	mode, err := strconv.ParseUint(w[1], 8, 32)
	if err != nil || mode > 0o7777 {
		return bad("mode: want octal like 0755, got %q", clip(w[1]))
	}
	e.Mode = fs.FileMode(mode).Perm()
	caps, ok := fileTypes[e.Type]
	if !ok {
		// A type newer than this table: its fields cannot be split, so the entry
		// is kept unread; take() refuses it only if it names a file the image takes.
		if !typeRe.MatchString(e.Type) {
			return bad("file type: want an upper-case name like CUDA_LIB, got %q", clip(e.Type))
		}
		e.Unknown = true
		return e, nil
	}
	w = w[3:]
	next := func(what string) (string, bool) {
		if len(w) == 0 || strings.HasPrefix(w[0], "MODULE:") {
			return "", false
		}
		v := w[0]
		w = w[1:]
		return v, true
	}
	if caps.arch {
		v, ok := next("arch")
		if !ok || (v != "NATIVE" && v != "COMPAT32") {
			return bad("%s: want NATIVE or COMPAT32 after the type, got %q", e.Type, clip(v))
		}
		e.Arch = v
	}
	switch {
	case caps.path:
		v, ok := next("path")
		if !ok {
			return bad("%s: missing its path field", e.Type)
		}
		e.Path = v
	case caps.inherit:
		v, ok := next("depth")
		n, err := strconv.Atoi(strings.TrimPrefix(v, "INHERIT_PATH_DEPTH:"))
		if !ok || !strings.HasPrefix(v, "INHERIT_PATH_DEPTH:") || err != nil || n < 0 || n > 16 {
			return bad("%s: want INHERIT_PATH_DEPTH:N, got %q", e.Type, clip(v))
		}
		if strings.Count(e.File, "/") < n {
			return bad("%s: INHERIT_PATH_DEPTH:%d drops more directories than %q has", e.Type, n, clip(e.File))
		}
		e.InheritDepth = n
	}
	if caps.symlink {
		v, ok := next("target")
		if !ok {
			return bad("%s: missing its symlink target", e.Type)
		}
		if strings.HasPrefix(v, "/") || strings.Contains(v, "..") {
			return bad("%s: target %q leaves its directory", e.Type, clip(v))
		}
		e.Target = v
	}
	for _, x := range w {
		if !strings.HasPrefix(x, "MODULE:") {
			return bad("unexpected field %q", clip(x))
		}
	}
	return e, nil
}

// InstallPath is where nvidia-installer puts a FIRMWARE entry under
// /lib/firmware/nvidia/<version>/: its file name less InheritDepth directories.
func (e Entry) InstallPath() string {
	p := e.File
	for range e.InheritDepth {
		_, p, _ = strings.Cut(p, "/")
	}
	return p
}

func safePath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\\") {
		return false
	}
	for _, part := range strings.Split(strings.TrimPrefix(p, "./"), "/") {
		if part == ".." || part == "" {
			return false
		}
	}
	return true
}
