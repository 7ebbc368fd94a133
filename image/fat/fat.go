// Package fat writes fresh FAT16/FAT32 filesystems, deterministically.
//
// It exists because peerboot's images must be bit-for-bit reproducible: the
// same inputs have to give the same bytes, so every field that a general
// purpose formatter fills from the clock or from a random source (volume id,
// timestamps, free-cluster hints) comes from Params instead. It only does what
// the image builder needs: format a filesystem of a given size and lay down a
// fixed set of directories and files, once. Reading one is image/fatread's.
//
// Layout choices (all fixed so output depends on Params alone):
//   - 512-byte sectors, two FATs, media descriptor 0xF8;
//   - FAT32: 32 reserved sectors, FSInfo in sector 1, backup boot sector in
//     sector 6 (backup FSInfo in 7), root directory starts at cluster 2;
//   - FAT16: 1 reserved sector, 512 root directory entries;
//   - clusters are handed out in a pre-order walk of the tree with entries
//     sorted by name, each object contiguous: directories from the start of
//     the data area up, files from its end down. A big file that keeps its
//     size (the UKI: image.WriteUKI pads the initrd's room to whole MiB) then
//     keeps its clusters and is the volume's last data, so a rebuild that
//     changes only that file leaves every byte before it as it was and the
//     store resumes the disk's hash there (issue 34).
package fat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/peerboot/peerboot/image/fatread"
)

// Type selects the FAT variant: fatread's, so that a volume read can be written
// again as the same variant.
type Type = fatread.Type

const (
	// Auto picks FAT32 when the size allows the 65525 clusters FAT32 needs,
	// FAT16 otherwise.
	Auto  Type = 0
	FAT16      = fatread.FAT16
	FAT32      = fatread.FAT32
)

// Params describes the filesystem to write.
type Params struct {
	Size     int64 // bytes; a multiple of 512
	Type     Type
	Label    string // volume label, at most 11 characters; "" means NO NAME
	VolumeID uint32
	// Epoch (Unix seconds) is stamped into every directory entry. Dates before
	// 1980 (the FAT epoch) are clamped to 1980-01-01.
	Epoch int64
	// HiddenSectors is the partition's start LBA, recorded in the BPB for
	// boot code that wants it.
	HiddenSectors uint32
	// Files maps slash-separated paths ("EFI/BOOT/BOOTX64.EFI") to contents.
	// Parent directories are created as needed; a key ending in "/" creates an
	// empty directory (its value must be empty).
	Files map[string][]byte
}

const (
	sectorSize = fatread.SectorSize
	dirEntSize = fatread.DirEntrySize

	// Cluster-count limits (fatread's, and the largest FAT32 count).
	minFAT16Clusters = fatread.MinFAT16Clusters
	minFAT32Clusters = fatread.MinFAT32Clusters
	maxFAT32Clusters = 0x0FFFFFF5

	fat16RootEntries = 512
	fat32Reserved    = 32
	fat16Reserved    = 1
	numFATs          = 2
	mediaFixed       = 0xF8

	attrVolumeID = fatread.AttrVolumeID
	attrDir      = fatread.AttrDir
	attrArchive  = 0x20
	attrLFN      = fatread.AttrLFN
)

// geometry is the computed on-disk layout.
type geometry struct {
	typ          Type
	totalSectors uint32
	secPerClus   uint32
	reserved     uint32
	fatSectors   uint32
	rootDirSects uint32 // FAT16 only
	dataStart    uint32 // first sector of cluster 2
	clusters     uint32 // data clusters
	clusterSize  uint32 // bytes
}

// layout computes the geometry for a type and sectors-per-cluster, iterating
// because the FAT's own size depends on the cluster count it must describe.
func layout(typ Type, total, spc uint32) geometry {
	g := geometry{typ: typ, totalSectors: total, secPerClus: spc, clusterSize: spc * sectorSize}
	entryBytes := uint32(2)
	if typ == FAT32 {
		g.reserved = fat32Reserved
		entryBytes = 4
	} else {
		g.reserved = fat16Reserved
		g.rootDirSects = fat16RootEntries * dirEntSize / sectorSize
	}
	var fat uint32 = 1
	for {
		meta := g.reserved + g.rootDirSects + numFATs*fat
		if meta >= total {
			g.fatSectors, g.clusters = fat, 0
			return g
		}
		clusters := (total - meta) / spc
		need := ((clusters+2)*entryBytes + sectorSize - 1) / sectorSize
		if need <= fat {
			g.fatSectors = fat
			g.clusters = clusters
			g.dataStart = meta
			return g
		}
		fat = need
	}
}

// fat32ClusterSize follows the Microsoft default table (smaller clusters on
// smaller volumes) so that typical ESP sizes look like what other tools make.
func fat32SecPerClus(total uint32) uint32 {
	switch {
	case total <= 532480: // 260 MiB
		return 1
	case total <= 16777216: // 8 GiB
		return 8
	case total <= 33554432: // 16 GiB
		return 16
	case total <= 67108864: // 32 GiB
		return 32
	}
	return 64
}

func chooseGeometry(typ Type, size int64) (geometry, error) {
	if size <= 0 || size%sectorSize != 0 {
		return geometry{}, fmt.Errorf("fat: size %d is not a positive multiple of %d", size, sectorSize)
	}
	if size/sectorSize > 0xFFFFFFFF {
		return geometry{}, fmt.Errorf("fat: size %d is too large", size)
	}
	total := uint32(size / sectorSize)
	try32 := func() (geometry, error) {
		g := layout(FAT32, total, fat32SecPerClus(total))
		// Small volumes may still fall short with the table's cluster size;
		// halve it down to one sector before giving up.
		for g.clusters < minFAT32Clusters && g.secPerClus > 1 {
			g = layout(FAT32, total, g.secPerClus/2)
		}
		if g.clusters < minFAT32Clusters {
			return g, fmt.Errorf("fat: %d bytes is too small for FAT32 (needs %d clusters, fits %d)", size, minFAT32Clusters, g.clusters)
		}
		if g.clusters > maxFAT32Clusters {
			return g, fmt.Errorf("fat: %d bytes is too large for FAT32", size)
		}
		return g, nil
	}
	try16 := func() (geometry, error) {
		for spc := uint32(1); spc <= 128; spc *= 2 {
			g := layout(FAT16, total, spc)
			if g.clusters < minFAT16Clusters {
				return g, fmt.Errorf("fat: %d bytes is too small for FAT16 (needs %d clusters)", size, minFAT16Clusters)
			}
			if g.clusters < minFAT32Clusters {
				return g, nil
			}
		}
		return geometry{}, fmt.Errorf("fat: %d bytes is too large for FAT16", size)
	}
	switch typ {
	case FAT32:
		return try32()
	case FAT16:
		return try16()
	case Auto:
		if g, err := try32(); err == nil {
			return g, nil
		}
		return try16()
	}
	return geometry{}, fmt.Errorf("fat: unknown type %d", typ)
}

// node is one file or directory of the tree to write.
type node struct {
	name     string // long (real) name
	dir      bool
	data     []byte
	children []*node

	short   [11]byte
	ntCase  byte // NT case bits: 0x08 base lower, 0x10 ext lower
	lfn     bool // needs long-name entries
	cluster uint32
	nclus   uint32
}

// entries is how many 32-byte slots the node's own entry takes in its parent.
func (n *node) entries() int {
	if !n.lfn {
		return 1
	}
	return 1 + (len(utf16.Encode([]rune(n.name)))+12)/13
}

func buildTree(files map[string][]byte) (*node, error) {
	root := &node{dir: true}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	// Sorted so errors (and everything else) do not depend on map order.
	sort.Strings(paths)
	for _, p := range paths {
		isDir := strings.HasSuffix(p, "/")
		clean := strings.TrimSuffix(p, "/")
		if isDir && len(files[p]) != 0 {
			return nil, fmt.Errorf("fat: %q names a directory but has contents", p)
		}
		parts := strings.Split(clean, "/")
		cur := root
		for i, part := range parts {
			if err := validName(part); err != nil {
				return nil, fmt.Errorf("fat: path %q: %w", p, err)
			}
			last := i == len(parts)-1
			child := cur.find(part)
			if child == nil {
				child = &node{name: part, dir: !last || isDir}
				if !child.dir {
					child.data = files[p]
				}
				cur.children = append(cur.children, child)
			} else if child.name != part {
				// FAT names are case-insensitive: two spellings would collide.
				return nil, fmt.Errorf("fat: path %q collides with %q (names are case-insensitive)", p, child.name)
			} else if !child.dir || (last && !isDir) {
				return nil, fmt.Errorf("fat: path %q conflicts with another entry", p)
			}
			cur = child
		}
	}
	return root, nil
}

func (n *node) find(name string) *node {
	for _, c := range n.children {
		if strings.EqualFold(c.name, name) {
			return c
		}
	}
	return nil
}

func validName(s string) error {
	if s == "" || s == "." || s == ".." {
		return fmt.Errorf("invalid path component %q", s)
	}
	if len(utf16.Encode([]rune(s))) > 255 {
		return fmt.Errorf("name %q is longer than 255 characters", s)
	}
	for _, r := range s {
		if r < 0x20 || strings.ContainsRune(`"*/:<>?\|`, r) || r == 0x7F {
			return fmt.Errorf("name %q has a character FAT does not allow", s)
		}
	}
	if strings.HasSuffix(s, " ") || strings.HasSuffix(s, ".") {
		// Windows and Linux strip these, so the name would not round-trip.
		return fmt.Errorf("name %q ends in a space or dot", s)
	}
	return nil
}

// shortChar reports whether c may appear in an 8.3 name as-is.
func shortChar(c byte) bool {
	return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strings.IndexByte("$%'-_@~`!(){}^#&", c) >= 0
}

// plainShort tries to store name as an 8.3 entry alone. Lower-case parts are
// allowed when a part is all one case, through the NT case bits that Windows,
// Linux and mtools all honour; anything else needs a long name.
func plainShort(name string) (sn [11]byte, nt byte, ok bool) {
	base, ext := name, ""
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		base, ext = name[:i], name[i+1:]
	}
	if len(base) < 1 || len(base) > 8 || len(ext) > 3 || strings.Contains(base, ".") {
		return sn, 0, false
	}
	conv := func(part string, lowerBit byte) (string, byte, bool) {
		lower, upper := false, false
		for i := 0; i < len(part); i++ {
			c := part[i]
			switch {
			case c >= 'a' && c <= 'z':
				lower = true
			case c >= 'A' && c <= 'Z':
				upper = true
			case !shortChar(c):
				return "", 0, false
			}
		}
		if lower && upper {
			return "", 0, false
		}
		if lower {
			return strings.ToUpper(part), lowerBit, true
		}
		return part, 0, true
	}
	b, nb, ok1 := conv(base, 0x08)
	e, ne, ok2 := conv(ext, 0x10)
	if !ok1 || !ok2 {
		return sn, 0, false
	}
	copy(sn[:], fmt.Sprintf("%-8s%-3s", b, e))
	return sn, nb | ne, true
}

// aliasShort derives the numeric-tail alias ("LONGNA~1.TXT") for a long name,
// the first one not yet used in the directory.
func aliasShort(name string, used map[[11]byte]bool) ([11]byte, error) {
	clean := func(s string) string {
		var b strings.Builder
		for _, r := range strings.ToUpper(s) {
			switch {
			case r == ' ' || r == '.':
				// dropped, as the specification's basis-name rules do
			case r < 0x80 && shortChar(byte(r)):
				b.WriteRune(r)
			default:
				b.WriteByte('_')
			}
		}
		return b.String()
	}
	trimmed := strings.TrimLeft(name, ".")
	base, ext := trimmed, ""
	if i := strings.LastIndexByte(trimmed, '.'); i >= 0 {
		base, ext = trimmed[:i], trimmed[i+1:]
	}
	b, e := clean(base), clean(ext)
	if len(e) > 3 {
		e = e[:3]
	}
	for n := 1; n < 1000000; n++ {
		tail := fmt.Sprintf("~%d", n)
		bb := b
		if len(bb)+len(tail) > 8 {
			bb = bb[:8-len(tail)]
		}
		var sn [11]byte
		copy(sn[:], fmt.Sprintf("%-8s%-3s", bb+tail, e))
		if !used[sn] {
			return sn, nil
		}
	}
	return [11]byte{}, fmt.Errorf("fat: no free short name for %q", name)
}

// assignNames sorts every directory and gives each entry its short name.
func assignNames(d *node) error {
	sort.Slice(d.children, func(i, j int) bool { return d.children[i].name < d.children[j].name })
	used := map[[11]byte]bool{}
	// Plain 8.3 names first so an alias never takes a name a real file owns.
	for _, c := range d.children {
		if sn, nt, ok := plainShort(c.name); ok {
			c.short, c.ntCase = sn, nt
			used[sn] = true
		} else {
			c.lfn = true
		}
	}
	for _, c := range d.children {
		if c.lfn {
			sn, err := aliasShort(c.name, used)
			if err != nil {
				return err
			}
			c.short = sn
			used[sn] = true
		}
		if c.dir {
			if err := assignNames(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// dirBytes is the size of a directory's entry table.
func dirBytes(d *node, isRoot bool, hasLabel bool) int {
	n := 0
	if isRoot {
		if hasLabel {
			n++
		}
	} else {
		n += 2 // "." and ".."
	}
	for _, c := range d.children {
		n += c.entries()
	}
	return n * dirEntSize
}

// fatTime converts Unix seconds to FAT date and time words.
func fatTime(epoch int64) (date, tim uint16, tenths byte) {
	t := time.Unix(epoch, 0).UTC()
	if t.Year() < 1980 {
		t = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if t.Year() > 2107 {
		t = time.Date(2107, 12, 31, 23, 59, 58, 0, time.UTC)
	}
	date = uint16(t.Year()-1980)<<9 | uint16(t.Month())<<5 | uint16(t.Day())
	tim = uint16(t.Hour())<<11 | uint16(t.Minute())<<5 | uint16(t.Second()/2)
	// The creation time has 10 ms resolution: carry the odd second there.
	tenths = byte(t.Second()%2) * 100
	return
}

type stamp struct {
	date, time uint16
	tenths     byte
}

func putShortEntry(b []byte, name [11]byte, attr, nt byte, cluster, size uint32, st stamp) {
	copy(b[0:11], name[:])
	b[11] = attr
	b[12] = nt
	b[13] = st.tenths
	binary.LittleEndian.PutUint16(b[14:], st.time)
	binary.LittleEndian.PutUint16(b[16:], st.date)
	binary.LittleEndian.PutUint16(b[18:], st.date)
	binary.LittleEndian.PutUint16(b[20:], uint16(cluster>>16))
	binary.LittleEndian.PutUint16(b[22:], st.time)
	binary.LittleEndian.PutUint16(b[24:], st.date)
	binary.LittleEndian.PutUint16(b[26:], uint16(cluster))
	binary.LittleEndian.PutUint32(b[28:], size)
}

// putLFN writes the long-name entries for n (last fragment first, as the
// format requires) and returns how many bytes it used.
func putLFN(b []byte, n *node) int {
	u := utf16.Encode([]rune(n.name))
	count := (len(u) + 12) / 13
	// Pad: one 0x0000 terminator unless the name fills the last slot, then 0xFFFF.
	padded := make([]uint16, count*13)
	for i := range padded {
		switch {
		case i < len(u):
			padded[i] = u[i]
		case i == len(u):
			padded[i] = 0
		default:
			padded[i] = 0xFFFF
		}
	}
	sum := fatread.LFNChecksum(n.short)
	off := 0
	for k := count; k >= 1; k-- {
		e := b[off : off+dirEntSize]
		ord := byte(k)
		if k == count {
			ord |= 0x40
		}
		e[0] = ord
		chunk := padded[(k-1)*13 : k*13]
		for i := 0; i < 5; i++ {
			binary.LittleEndian.PutUint16(e[1+2*i:], chunk[i])
		}
		e[11] = attrLFN
		e[12] = 0
		e[13] = sum
		for i := 0; i < 6; i++ {
			binary.LittleEndian.PutUint16(e[14+2*i:], chunk[5+i])
		}
		binary.LittleEndian.PutUint16(e[26:], 0)
		for i := 0; i < 2; i++ {
			binary.LittleEndian.PutUint16(e[28+2*i:], chunk[11+i])
		}
		off += dirEntSize
	}
	return off
}

func labelBytes(label string) ([11]byte, bool, error) {
	var lb [11]byte
	if label == "" {
		copy(lb[:], "NO NAME    ")
		return lb, false, nil
	}
	up := strings.ToUpper(label)
	if len(up) > 11 {
		return lb, false, fmt.Errorf("fat: label %q is longer than 11 characters", label)
	}
	for i := 0; i < len(up); i++ {
		if c := up[i]; c != ' ' && !shortChar(c) {
			return lb, false, fmt.Errorf("fat: label %q has character %q", label, c)
		}
	}
	copy(lb[:], fmt.Sprintf("%-11s", up))
	return lb, true, nil
}

// Write formats a filesystem into w at offsets [0, p.Size) and returns the
// type it chose. Clusters that hold no data are not written: the caller must
// hand in zeroed space (a freshly truncated file, which also keeps it sparse)
// for the result to be reproducible.
// ErrNoSpace is Write's error when the files do not fit in p.Size.
var ErrNoSpace = errors.New("fat: files do not fit in the filesystem")

func Write(w io.WriterAt, p Params) (Type, error) {
	g, err := chooseGeometry(p.Type, p.Size)
	if err != nil {
		return 0, err
	}
	label, hasLabel, err := labelBytes(p.Label)
	if err != nil {
		return 0, err
	}
	root, err := buildTree(p.Files)
	if err != nil {
		return 0, err
	}
	if err := assignNames(root); err != nil {
		return 0, err
	}
	date, tim, tenths := fatTime(p.Epoch)
	st := stamp{date: date, time: tim, tenths: tenths}

	// Allocate clusters: pre-order, sorted, contiguous per object;
	// directories from next up, files from top down.
	next, top := uint32(2), g.clusters+2 // free clusters are [next, top)
	alloc := func(bytes int, file bool) (uint32, uint32, error) {
		if bytes == 0 {
			return 0, 0, nil
		}
		n := uint32((int64(bytes) + int64(g.clusterSize) - 1) / int64(g.clusterSize))
		if n > top-next || int64(n)*int64(g.clusterSize) < int64(bytes) {
			return 0, 0, ErrNoSpace
		}
		if file {
			top -= n
			return top, n, nil
		}
		start := next
		next += n
		return start, n, nil
	}
	rootBytes := dirBytes(root, true, hasLabel)
	if g.typ == FAT16 {
		if rootBytes > fat16RootEntries*dirEntSize {
			return 0, fmt.Errorf("fat: root directory needs %d entries, FAT16 has %d", rootBytes/dirEntSize, fat16RootEntries)
		}
	} else if root.cluster, root.nclus, err = alloc(max(rootBytes, 1), false); err != nil {
		return 0, err
	}
	var walk func(d *node) error
	walk = func(d *node) error {
		for _, c := range d.children {
			var size int
			if c.dir {
				size = dirBytes(c, false, false)
			} else {
				if int64(len(c.data)) > 0xFFFFFFFF {
					return fmt.Errorf("fat: %q is larger than 4 GiB", c.name)
				}
				size = len(c.data)
			}
			if c.cluster, c.nclus, err = alloc(size, !c.dir); err != nil {
				return err
			}
		}
		for _, c := range d.children {
			if c.dir {
				if err := walk(c); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return 0, err
	}

	// Touch the last byte first, so that a plain file grows to Size; done
	// before any data lands so it cannot clobber a file's last cluster.
	if _, err := w.WriteAt([]byte{0}, p.Size-1); err != nil {
		return 0, fmt.Errorf("fat: extend to size: %w", err)
	}

	// The system area: reserved sectors, both FATs and (FAT16) the fixed root.
	sys := make([]byte, int(g.dataStart)*sectorSize)
	boot := bootSector(g, p, label)
	copy(sys, boot)
	if g.typ == FAT32 {
		fsinfo := fsInfo(top - next)
		copy(sys[1*sectorSize:], fsinfo)
		copy(sys[6*sectorSize:], boot)
		copy(sys[7*sectorSize:], fsinfo)
	}
	fat := sys[g.reserved*sectorSize : (g.reserved+g.fatSectors)*sectorSize]
	setFAT := func(i, v uint32) {
		if g.typ == FAT32 {
			binary.LittleEndian.PutUint32(fat[4*i:], v)
		} else {
			binary.LittleEndian.PutUint16(fat[2*i:], uint16(v))
		}
	}
	eoc := uint32(0xFFFF)
	if g.typ == FAT32 {
		eoc = 0x0FFFFFFF
		setFAT(0, 0x0FFFFF00|mediaFixed)
	} else {
		setFAT(0, 0xFF00|mediaFixed)
	}
	// Entry 1 all ones: end-of-chain marker with the "clean" and "no I/O
	// error" bits set, i.e. a volume that was unmounted cleanly.
	setFAT(1, eoc)
	chain := func(start, n uint32) {
		for i := uint32(0); i < n; i++ {
			if i == n-1 {
				setFAT(start+i, eoc)
			} else {
				setFAT(start+i, start+i+1)
			}
		}
	}
	var chainAll func(d *node)
	chainAll = func(d *node) {
		for _, c := range d.children {
			chain(c.cluster, c.nclus)
			if c.dir {
				chainAll(c)
			}
		}
	}
	chain(root.cluster, root.nclus)
	chainAll(root)
	for i := uint32(1); i < numFATs; i++ {
		copy(sys[(g.reserved+i*g.fatSectors)*sectorSize:], fat)
	}

	// Directory tables.
	fill := func(d *node, buf []byte, isRoot bool, parent uint32) {
		off := 0
		if isRoot {
			if hasLabel {
				putShortEntry(buf[off:], label, attrVolumeID, 0, 0, 0, st)
				off += dirEntSize
			}
		} else {
			var dot, dotdot [11]byte
			copy(dot[:], ".          ")
			copy(dotdot[:], "..         ")
			putShortEntry(buf[off:], dot, attrDir, 0, d.cluster, 0, st)
			off += dirEntSize
			// ".." points at cluster 0 when the parent is the root, even on
			// FAT32 where the root has a real cluster: the format says so and
			// fsck.vfat checks it.
			putShortEntry(buf[off:], dotdot, attrDir, 0, parent, 0, st)
			off += dirEntSize
		}
		for _, c := range d.children {
			if c.lfn {
				off += putLFN(buf[off:], c)
			}
			attr, size := byte(attrArchive), uint32(len(c.data))
			if c.dir {
				attr, size = attrDir, 0
			}
			putShortEntry(buf[off:], c.short, attr, c.ntCase, c.cluster, size, st)
			off += dirEntSize
		}
	}
	clusterOff := func(c uint32) int64 {
		return int64(g.dataStart)*sectorSize + int64(c-2)*int64(g.clusterSize)
	}
	if g.typ == FAT16 {
		rootStart := (g.reserved + numFATs*g.fatSectors) * sectorSize
		fill(root, sys[rootStart:rootStart+g.rootDirSects*sectorSize], true, 0)
	}
	if _, err := w.WriteAt(sys, 0); err != nil {
		return 0, fmt.Errorf("fat: write system area: %w", err)
	}
	if g.typ == FAT32 {
		buf := make([]byte, int(root.nclus*g.clusterSize))
		fill(root, buf, true, 0)
		if _, err := w.WriteAt(buf, clusterOff(root.cluster)); err != nil {
			return 0, fmt.Errorf("fat: write root directory: %w", err)
		}
	}
	var writeAll func(d *node, self uint32) error
	writeAll = func(d *node, self uint32) error {
		for _, c := range d.children {
			if c.nclus == 0 {
				continue
			}
			if c.dir {
				buf := make([]byte, int(c.nclus*g.clusterSize))
				fill(c, buf, false, self)
				if _, err := w.WriteAt(buf, clusterOff(c.cluster)); err != nil {
					return fmt.Errorf("fat: write directory %q: %w", c.name, err)
				}
				if err := writeAll(c, c.cluster); err != nil {
					return err
				}
				continue
			}
			if _, err := w.WriteAt(c.data, clusterOff(c.cluster)); err != nil {
				return fmt.Errorf("fat: write %q: %w", c.name, err)
			}
			// Zero the tail of the last cluster so stale bytes in a reused
			// file cannot leak into the image.
			if pad := int(c.nclus*g.clusterSize) - len(c.data); pad > 0 {
				if _, err := w.WriteAt(make([]byte, pad), clusterOff(c.cluster)+int64(len(c.data))); err != nil {
					return fmt.Errorf("fat: write %q: %w", c.name, err)
				}
			}
		}
		return nil
	}
	// Children of the root record ".." as 0 (see fill).
	if err := writeAll(root, 0); err != nil {
		return 0, err
	}
	return g.typ, nil
}

func bootSector(g geometry, p Params, label [11]byte) []byte {
	b := make([]byte, sectorSize)
	le16 := binary.LittleEndian.PutUint16
	le32 := binary.LittleEndian.PutUint32
	copy(b[3:11], "MSWIN4.1") // the OEM name the specification recommends for compatibility
	le16(b[11:], sectorSize)
	b[13] = byte(g.secPerClus)
	le16(b[14:], uint16(g.reserved))
	b[16] = numFATs
	b[21] = mediaFixed
	// CHS geometry is meaningless for these images; 32/64 is what mkfs.fat
	// uses for image files and keeps mtools' consistency checks quiet.
	le16(b[24:], 32)
	le16(b[26:], 64)
	le32(b[28:], p.HiddenSectors)
	if g.totalSectors < 0x10000 && g.typ == FAT16 {
		le16(b[19:], uint16(g.totalSectors))
	} else {
		le32(b[32:], g.totalSectors)
	}
	var ext []byte
	if g.typ == FAT32 {
		b[0], b[1], b[2] = 0xEB, 0x58, 0x90
		le32(b[36:], g.fatSectors)
		le32(b[44:], 2) // root cluster
		le16(b[48:], 1) // FSInfo sector
		le16(b[50:], 6) // backup boot sector
		ext = b[64:]
		copy(b[82:90], "FAT32   ")
	} else {
		b[0], b[1], b[2] = 0xEB, 0x3C, 0x90
		le16(b[17:], fat16RootEntries)
		le16(b[22:], uint16(g.fatSectors))
		ext = b[36:]
		copy(b[54:62], "FAT16   ")
	}
	ext[0] = 0x80 // drive number: fixed disk
	ext[2] = 0x29 // extended boot signature: the next three fields are valid
	le32(ext[3:], p.VolumeID)
	copy(ext[7:18], label[:])
	// Boot code, reached through the jump above if a BIOS ever runs this
	// sector: "int 18h" (no bootable disk) then halt forever.
	code := b[2+int(b[1]):]
	copy(code, []byte{0xCD, 0x18, 0xF4, 0xEB, 0xFD})
	b[510], b[511] = 0x55, 0xAA
	return b
}

func fsInfo(free uint32) []byte {
	b := make([]byte, sectorSize)
	binary.LittleEndian.PutUint32(b[0:], 0x41615252)
	binary.LittleEndian.PutUint32(b[484:], 0x61417272)
	binary.LittleEndian.PutUint32(b[488:], free)
	// Next-free hint left as "unknown": a true value is not needed and this
	// keeps the sector independent of allocation details.
	binary.LittleEndian.PutUint32(b[492:], 0xFFFFFFFF)
	binary.LittleEndian.PutUint32(b[508:], 0xAA550000)
	return b
}
