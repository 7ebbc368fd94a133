// Package ncclinfo reads what an NCCL library is without loading it: its version and
// the CUDA it was built with (the "NCCL version 2.29.7+cuda12.4" string NCCL prints at
// init) and, through package fatbin, the GPU architectures its kernels cover. The build
// checks the library it lays into an image against the platform's GPUs with it, and
// tests read the image's libnccl.so.2 with it.
package ncclinfo

import (
	"debug/elf"
	"fmt"
	"os"
	"regexp"

	"github.com/peerboot/peerboot/fatbin"
)

// Info is one libnccl.so.
type Info struct {
	Version string // e.g. "2.29.7"
	CUDA    string // the CUDA toolkit it was built with, e.g. "12.4"
	Fatbins []fatbin.Fatbin
}

var versionRe = regexp.MustCompile(`NCCL version ([0-9]+\.[0-9]+\.[0-9]+)\+cuda([0-9]+\.[0-9]+)\x00`)

// maxRodata bounds the read of the section the version string sits in.
const maxRodata = 256 << 20

// Read reads an NCCL shared library (a path, symlinks followed).
func Read(path string) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer ef.Close()
	info := &Info{}
	if s := ef.Section(".rodata"); s != nil && s.Size <= maxRodata {
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("%s: reading .rodata: %w", path, err)
		}
		if m := versionRe.FindSubmatch(data); m != nil {
			info.Version, info.CUDA = string(m[1]), string(m[2])
		}
	}
	if info.Version == "" {
		return nil, fmt.Errorf("%s: no \"NCCL version X+cudaY\" string: not an NCCL library", path)
	}
	if info.Fatbins, err = fatbin.ReadELF(f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// Check is what the library offers a GPU of compute capability sm (90 for sm_90).
func (i *Info) Check(sm int) fatbin.Coverage { return fatbin.Check(i.Fatbins, sm) }

// String is "NCCL 2.29.7 (built with CUDA 12.4)".
func (i *Info) String() string {
	return fmt.Sprintf("NCCL %s (built with CUDA %s)", i.Version, i.CUDA)
}

// ParseVersionString reads NCCL's own "2.29.7+cuda12.4" form (its init banner).
func ParseVersionString(s string) (version, cuda string, ok bool) {
	m := versionRe.FindStringSubmatch("NCCL version " + s + "\x00")
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}
