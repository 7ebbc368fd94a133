// Package dl is where the self-test's C libraries come from: a shared object
// through dlopen, or a FAKE stand-in that tests pass instead (selftest/gpufake).
// It is the one seam under selftest/cuda, selftest/nccl and selftest/nvml:
// everything above their func fields is the same code either way.
package dl

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// Library binds C entry points. Bind sets *fn, a pointer to a func field, to
// the named symbol; a library without it returns an error.
type Library interface {
	Name() string
	Bind(name string, fn any) error
}

// Open dlopens path with every symbol resolved at load and exported globally
// (RTLD_NOW|RTLD_GLOBAL: libnccl finds the libcuda the engine loaded). Loading
// a library twice shares it; dlopen counts references.
func Open(path string) (Library, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	return shared{name: path, h: h}, nil
}

// shared is a dlopened shared object.
type shared struct {
	name string
	h    uintptr
}

func (l shared) Name() string { return l.name }

// Bind looks the symbol up before registering it: purego.RegisterFunc on a
// zero address would crash at the first call, and a missing symbol is a finding.
func (l shared) Bind(name string, fn any) error {
	sym, err := purego.Dlsym(l.h, name)
	if err != nil {
		return fmt.Errorf("dlsym %s: %w", name, err)
	}
	if sym == 0 {
		return fmt.Errorf("dlsym %s: no address", name)
	}
	purego.RegisterFunc(fn, sym)
	return nil
}
