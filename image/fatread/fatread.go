// Package fatread reads existing FAT16 and FAT32 filesystems: enough to list the
// reports a booted image left on its PEERBOOT partition, to find that partition by
// its label (the node's init), and to carry files over when it is re-created bigger
// (flash). It is apart from image/fat, the writer, so that the init links a reader
// and no writer.
package fatread

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
	"unicode/utf16"
)

// FS reads an existing FAT16 or FAT32 filesystem: enough to list the reports
// a booted image left on its PEERBOOT partition and to carry files over when
// that partition is re-created bigger. It reads outside bytes (a stick that
// has been in another machine), so every offset and chain is bounds-checked
// and a cluster chain that loops is an error, not a hang.
type FS struct {
	r        io.ReaderAt
	typ      Type
	bps      int64 // bytes per sector
	spc      int64 // sectors per cluster
	fatStart int64 // byte offset of the first FAT
	fatBytes int64 // size of one FAT
	rootOff  int64 // FAT16: byte offset of the fixed root directory
	rootLen  int64 // FAT16: its size in bytes
	rootClus uint32
	dataOff  int64 // byte offset of cluster 2
	clusters uint32
	label    string
	volumeID uint32

	cacheOff int64 // one-sector cache of the FAT
	cache    []byte
}

// Entry is one file or directory found by ReadDir.
type Entry struct {
	Name     string // the long name when there is one
	Dir      bool
	Size     int64
	Modified time.Time // UTC; FAT stores local time without a zone
	cluster  uint32
}

// ErrNotFAT means the boot sector is not a FAT16 or FAT32 one.
var ErrNotFAT = errors.New("not a FAT16 or FAT32 filesystem")

// Open reads the boot sector of the filesystem r holds at offsets [0, size).
func Open(r io.ReaderAt, size int64) (*FS, error) {
	b := make([]byte, SectorSize)
	if _, err := r.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("reading the boot sector: %w", err)
	}
	if b[510] != 0x55 || b[511] != 0xAA {
		return nil, fmt.Errorf("%w: no boot sector signature", ErrNotFAT)
	}
	le16 := func(o int) int64 { return int64(binary.LittleEndian.Uint16(b[o:])) }
	le32 := func(o int) int64 { return int64(binary.LittleEndian.Uint32(b[o:])) }
	fs := &FS{r: r, bps: le16(11), spc: int64(b[13]), cacheOff: -1}
	switch fs.bps {
	case 512, 1024, 2048, 4096:
	default:
		return nil, fmt.Errorf("%w: %d bytes per sector", ErrNotFAT, fs.bps)
	}
	if fs.spc == 0 || fs.spc&(fs.spc-1) != 0 {
		return nil, fmt.Errorf("%w: %d sectors per cluster", ErrNotFAT, fs.spc)
	}
	reserved, nfats, rootEnts := le16(14), int64(b[16]), le16(17)
	total := le16(19)
	if total == 0 {
		total = le32(32)
	}
	fatSz := le16(22)
	if fatSz == 0 {
		fatSz = le32(36)
	}
	if reserved == 0 || nfats == 0 || fatSz == 0 || total == 0 {
		return nil, fmt.Errorf("%w: a zero BPB field", ErrNotFAT)
	}
	rootSecs := (rootEnts*DirEntrySize + fs.bps - 1) / fs.bps
	meta := reserved + nfats*fatSz + rootSecs
	if meta >= total || total*fs.bps > size {
		return nil, fmt.Errorf("%w: %d sectors do not fit in %d bytes", ErrNotFAT, total, size)
	}
	clusters := (total - meta) / fs.spc
	fs.clusters = uint32(clusters)
	fs.fatStart = reserved * fs.bps
	fs.fatBytes = fatSz * fs.bps
	fs.dataOff = meta * fs.bps
	extOff := 36
	switch {
	case clusters < MinFAT16Clusters:
		return nil, fmt.Errorf("%w: FAT12 (%d clusters) is not supported", ErrNotFAT, clusters)
	case clusters < MinFAT32Clusters:
		fs.typ = FAT16
		fs.rootOff = (reserved + nfats*fatSz) * fs.bps
		fs.rootLen = rootSecs * fs.bps
		if fs.fatBytes < (clusters+2)*2 {
			return nil, fmt.Errorf("%w: FAT too small for %d clusters", ErrNotFAT, clusters)
		}
	default:
		fs.typ = FAT32
		fs.rootClus = uint32(le32(44))
		extOff = 64
		if fs.fatBytes < (clusters+2)*4 {
			return nil, fmt.Errorf("%w: FAT too small for %d clusters", ErrNotFAT, clusters)
		}
	}
	if b[extOff+2] == 0x29 {
		fs.volumeID = binary.LittleEndian.Uint32(b[extOff+3:])
		fs.label = strings.TrimRight(string(b[extOff+7:extOff+18]), " \x00")
	}
	return fs, nil
}

// Type is a FAT variant.
type Type int

// The variants; 0 is image/fat's Auto (the writer picks).
const (
	FAT16 Type = 1 + iota
	FAT32
)

func (t Type) String() string {
	switch t {
	case FAT16:
		return "FAT16"
	case FAT32:
		return "FAT32"
	}
	return "auto"
}

// On-disk constants the reader and image/fat's writer share (Microsoft FAT
// specification): the FAT type is decided by the count of data clusters alone,
// so a volume must fall inside its type's range or every reader mis-detects it.
const (
	SectorSize       = 512 // the writer's; a volume read may use larger ones
	DirEntrySize     = 32
	MinFAT16Clusters = 4085
	MinFAT32Clusters = 65525

	// Directory entry attributes.
	AttrVolumeID = 0x08
	AttrDir      = 0x10
	AttrLFN      = 0x0F
)

// Type is FAT16 or FAT32.
func (fs *FS) Type() Type { return fs.typ }

// Label is the volume label from the boot sector ("" when it has none).
func (fs *FS) Label() string { return fs.label }

// VolumeID is the volume serial number.
func (fs *FS) VolumeID() uint32 { return fs.volumeID }

func (fs *FS) clusterSize() int64 { return fs.spc * fs.bps }

// ClusterSize is the volume's allocation unit in bytes: a file takes
// ceil(size / ClusterSize) clusters.
func (fs *FS) ClusterSize() int64 { return fs.clusterSize() }

// next returns the FAT entry of cluster c.
func (fs *FS) next(c uint32) (uint32, error) {
	width := int64(2)
	if fs.typ == FAT32 {
		width = 4
	}
	off := fs.fatStart + int64(c)*width
	sec := off - off%fs.bps
	if sec != fs.cacheOff {
		if fs.cache == nil {
			fs.cache = make([]byte, fs.bps)
		}
		if _, err := fs.r.ReadAt(fs.cache, sec); err != nil {
			fs.cacheOff = -1
			return 0, fmt.Errorf("reading the FAT: %w", err)
		}
		fs.cacheOff = sec
	}
	e := fs.cache[off-sec:]
	if fs.typ == FAT32 {
		return binary.LittleEndian.Uint32(e) & 0x0FFFFFFF, nil
	}
	v := uint32(binary.LittleEndian.Uint16(e))
	if v >= 0xFFF7 {
		v |= 0x0FFF0000 // map FAT16 bad/end markers onto FAT32's
	}
	return v, nil
}

// chain reads the clusters of an object starting at first, at most limit bytes
// (limit < 0: until the end of the chain).
func (fs *FS) chain(first uint32, limit int64) ([]byte, error) {
	var out []byte
	cs := fs.clusterSize()
	seen := uint32(0)
	for c := first; ; {
		if c < 2 || c >= fs.clusters+2 {
			return nil, fmt.Errorf("cluster chain points at cluster %d, outside 2..%d", c, fs.clusters+1)
		}
		if seen++; seen > fs.clusters {
			return nil, errors.New("cluster chain loops")
		}
		n := cs
		if limit >= 0 && int64(len(out))+n > limit {
			n = limit - int64(len(out))
		}
		buf := make([]byte, n)
		if _, err := fs.r.ReadAt(buf, fs.dataOff+int64(c-2)*cs); err != nil {
			return nil, fmt.Errorf("reading cluster %d: %w", c, err)
		}
		out = append(out, buf...)
		if limit >= 0 && int64(len(out)) >= limit {
			return out, nil
		}
		nx, err := fs.next(c)
		if err != nil {
			return nil, err
		}
		if nx >= 0x0FFFFFF8 {
			if limit >= 0 {
				return nil, fmt.Errorf("cluster chain ends after %d bytes, file size is %d", len(out), limit)
			}
			return out, nil
		}
		c = nx
	}
}

// ReadDir lists a directory ("" or "/" is the root), skipping the volume
// label, "." and "..", and deleted entries.
func (fs *FS) ReadDir(dir string) ([]Entry, error) {
	var raw []byte
	var err error
	if e, ok, ferr := fs.lookup(dir); ferr != nil {
		return nil, ferr
	} else if !ok {
		if fs.typ == FAT16 {
			raw = make([]byte, fs.rootLen)
			if _, err = fs.r.ReadAt(raw, fs.rootOff); err != nil {
				return nil, fmt.Errorf("reading the root directory: %w", err)
			}
		} else if raw, err = fs.chain(fs.rootClus, -1); err != nil {
			return nil, fmt.Errorf("root directory: %w", err)
		}
	} else if !e.Dir {
		return nil, fmt.Errorf("%s is not a directory", dir)
	} else if raw, err = fs.chain(e.cluster, -1); err != nil {
		return nil, fmt.Errorf("directory %s: %w", dir, err)
	}
	return parseDir(raw), nil
}

// lookup finds the entry for p; ok is false for the root itself.
func (fs *FS) lookup(p string) (Entry, bool, error) {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return Entry{}, false, nil
	}
	parent, name := path.Split(p)
	ents, err := fs.ReadDir(parent)
	if err != nil {
		return Entry{}, false, err
	}
	for _, e := range ents {
		if strings.EqualFold(e.Name, name) {
			return e, true, nil
		}
	}
	return Entry{}, false, fmt.Errorf("%s: %w", p, errNotExist)
}

var errNotExist = errors.New("no such file or directory")

// IsNotExist reports whether err says a path was not found.
func IsNotExist(err error) bool { return errors.Is(err, errNotExist) }

// ReadFile returns a file's contents.
func (fs *FS) ReadFile(p string) ([]byte, error) {
	e, ok, err := fs.lookup(p)
	if err != nil {
		return nil, err
	}
	if !ok || e.Dir {
		return nil, fmt.Errorf("%s is a directory", p)
	}
	if e.Size == 0 {
		return []byte{}, nil
	}
	b, err := fs.chain(e.cluster, e.Size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return b, nil
}

// Files returns every file and directory in the form Params.Files takes:
// contents by slash-separated path, and an empty directory as "dir/". With it
// a filesystem can be written again elsewhere, at another size.
func (fs *FS) Files() (map[string][]byte, error) {
	out := map[string][]byte{}
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		if depth > 64 {
			return fmt.Errorf("%s: directories nested more than 64 deep", dir)
		}
		ents, err := fs.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(ents) == 0 && dir != "" {
			out[dir+"/"] = nil
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name)
			if e.Dir {
				if err := walk(p, depth+1); err != nil {
					return err
				}
				continue
			}
			b, err := fs.ReadFile(p)
			if err != nil {
				return err
			}
			out[p] = b
		}
		return nil
	}
	return out, walk("", 0)
}

// parseDir decodes a directory table, pairing long-name entries with the short
// entry they precede (checked by checksum; a mismatch falls back to the short name).
func parseDir(raw []byte) []Entry {
	var out []Entry
	var lfn []uint16
	var lfnSum byte
	lfnOK := false
	for off := 0; off+DirEntrySize <= len(raw); off += DirEntrySize {
		e := raw[off : off+DirEntrySize]
		if e[0] == 0x00 {
			break
		}
		if e[0] == 0xE5 {
			lfnOK = false
			continue
		}
		attr := e[11]
		if attr&0x3F == AttrLFN {
			ord := e[0] & 0x1F
			if e[0]&0x40 != 0 {
				lfn = make([]uint16, int(ord)*13)
				lfnSum, lfnOK = e[13], ord > 0
			} else if !lfnOK || e[13] != lfnSum {
				lfnOK = false
				continue
			}
			if ord == 0 || int(ord)*13 > len(lfn) {
				lfnOK = false
				continue
			}
			chunk := lfn[(int(ord)-1)*13:]
			for i := 0; i < 5; i++ {
				chunk[i] = binary.LittleEndian.Uint16(e[1+2*i:])
			}
			for i := 0; i < 6; i++ {
				chunk[5+i] = binary.LittleEndian.Uint16(e[14+2*i:])
			}
			for i := 0; i < 2; i++ {
				chunk[11+i] = binary.LittleEndian.Uint16(e[28+2*i:])
			}
			continue
		}
		useLFN := lfnOK
		lfnOK = false
		if attr&AttrVolumeID != 0 {
			continue
		}
		var sn [11]byte
		copy(sn[:], e[0:11])
		if sn[0] == 0x05 {
			sn[0] = 0xE5 // the escape for a real leading 0xE5
		}
		if string(sn[:]) == ".          " || string(sn[:]) == "..         " {
			continue
		}
		name := ""
		if useLFN && LFNChecksum(sn) == lfnSum {
			u := lfn
			for i, c := range u {
				if c == 0 {
					u = u[:i]
					break
				}
			}
			name = string(utf16.Decode(u))
		}
		if name == "" {
			name = shortName(sn, e[12])
		}
		cluster := uint32(binary.LittleEndian.Uint16(e[26:])) | uint32(binary.LittleEndian.Uint16(e[20:]))<<16
		date, tim := binary.LittleEndian.Uint16(e[24:]), binary.LittleEndian.Uint16(e[22:])
		out = append(out, Entry{
			Name:     name,
			Dir:      attr&AttrDir != 0,
			Size:     int64(binary.LittleEndian.Uint32(e[28:])),
			Modified: fromFATTime(date, tim),
			cluster:  cluster,
		})
	}
	return out
}

func shortName(sn [11]byte, nt byte) string {
	base := strings.TrimRight(string(sn[:8]), " ")
	ext := strings.TrimRight(string(sn[8:]), " ")
	if nt&0x08 != 0 {
		base = strings.ToLower(base)
	}
	if nt&0x10 != 0 {
		ext = strings.ToLower(ext)
	}
	if ext == "" {
		return base
	}
	return base + "." + ext
}

func fromFATTime(date, tim uint16) time.Time {
	if date == 0 {
		return time.Time{}
	}
	return time.Date(1980+int(date>>9), time.Month(date>>5&0x0F), int(date&0x1F),
		int(tim>>11), int(tim>>5&0x3F), int(tim&0x1F)*2, 0, time.UTC)
}

// LFNChecksum is the checksum of a short name that its long-name entries carry.
func LFNChecksum(sn [11]byte) byte {
	var s byte
	for _, c := range sn {
		s = (s&1)<<7 + s>>1 + c
	}
	return s
}
