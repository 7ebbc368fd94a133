// Package flash writes a disk image to a USB stick (or any whole disk), safely:
// it refuses devices that are in use, part of the running system, partitions
// or too small, checks what it wrote by reading it back, and can grow the
// PEERBOOT report partition to fill the stick. Reading back the reports a
// booted stick collected is package reportdisk's.
package flash

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/progress"
)

// Env names the kernel interfaces the checks read; tests point Proc at a
// fake /proc to stage a root filesystem or a swap area on a loop device.
type Env struct {
	Proc string // default /proc
	Sys  string // default /sys
}

func (e Env) proc() string { return or(e.Proc, "/proc") }
func (e Env) sys() string  { return or(e.Sys, "/sys") }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Device is a whole disk as sysfs describes it.
type Device struct {
	Path         string // the path given, symlinks resolved (for messages: the disk is the open descriptor)
	Name         string // kernel name, e.g. sdb
	Dev          string // major:minor
	Size         int64  // bytes
	LogicalBlock int
	Removable    bool
	ReadOnly     bool
	Model        string // vendor and model, or a loop device's backing file
	Serial       string
	Transport    string // usb, nvme, loop, ... when sysfs tells
	// Parts maps major:minor to the kernel name of the disk and each of its partitions.
	Parts map[string]string

	sysdev  string // its directory in sysfs
	backing string // major:minor of a loop device's backing file when that is a block device
	via     string // for a backing device: the loop device over it that flash would write
}

// String is the one line shown before asking for confirmation.
func (d *Device) String() string {
	s := d.Path
	if filepath.Base(d.Path) != d.Name {
		s += " (/dev/" + d.Name + ")" // a by-id link or a node of another name
	}
	s += ": " + or(d.Model, "unknown model")
	if d.Serial != "" {
		s += ", serial " + d.Serial
	}
	s += ", " + progress.Bytes(d.Size)
	if d.Transport != "" {
		s += ", " + d.Transport
	}
	if d.Removable {
		s += ", removable"
	} else {
		s += ", not removable"
	}
	return s
}

// Refused is a safety check that failed; flashing did not start.
type Refused struct {
	Device  string
	Reasons []string
}

func (e *Refused) Error() string {
	return fmt.Sprintf("refusing to write to %s: %s", e.Device, strings.Join(e.Reasons, "; "))
}

// isBlockDevice refuses, before anything opens it, a path that is not a
// block device now: opening a tty or a tape drive has effects of its own.
// It is only a courtesy; inspect's fstat of the open descriptor decides.
func isBlockDevice(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("device %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return &Refused{Device: path, Reasons: []string{"it is not a block device (give a whole disk such as /dev/sdb)"}}
	}
	return nil
}

// openDisk opens the disk at path once, for everything flash does to it:
// read-write, O_EXCL (the kernel refuses it while mounted or claimed, and
// nothing can mount or claim it while it stays open), with O_DIRECT when the
// device allows it. The path is never opened again, so re-pointing it (a
// replaced node, a loop device re-attached) after the checks changes nothing.
func openDisk(path string) (f *os.File, direct bool, err error) {
	const flags = os.O_RDWR | unix.O_EXCL | unix.O_NOCTTY
	f, err = os.OpenFile(path, flags|unix.O_DIRECT, 0)
	if errors.Is(err, unix.EINVAL) {
		f, err = os.OpenFile(path, flags, 0)
		return f, false, err
	}
	return f, err == nil, err
}

// inspect reads what sysfs knows about the disk open as f. It finds the disk
// by the descriptor's own device number (fstat, then /sys/dev/block/MAJ:MIN),
// never by the path: the checks are about the disk that will be written.
// A descriptor that is not a block device, or is a partition, is refused.
func inspect(f *os.File, path string, env Env) (*Device, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("device %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return nil, &Refused{Device: path, Reasons: []string{"it is not a block device (give a whole disk such as /dev/sdb)"}}
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	sysdev, err := filepath.EvalSymlinks(filepath.Join(env.sys(), "dev/block", dev))
	if err != nil {
		return nil, fmt.Errorf("device %s (%s): not in sysfs: %w", path, dev, err)
	}
	if _, err := os.Stat(filepath.Join(sysdev, "partition")); err == nil {
		disk := filepath.Base(filepath.Dir(sysdev))
		return nil, &Refused{Device: path, Reasons: []string{fmt.Sprintf("it is a partition, not a whole disk: give /dev/%s (every partition on it is overwritten)", disk)}}
	}
	// The path as the person knows it, for messages only.
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	d := sysDevice(sysdev, dev)
	d.Path = real
	sectors, err := readInt(filepath.Join(sysdev, "size"))
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", path, err)
	}
	d.Size = sectors * 512 // sysfs counts 512-byte units whatever the block size
	if n, err := readInt(filepath.Join(sysdev, "queue/logical_block_size")); err == nil {
		d.LogicalBlock = int(n)
	} else {
		d.LogicalBlock = 512
	}
	d.Removable = readString(filepath.Join(sysdev, "removable")) == "1"
	d.ReadOnly = readString(filepath.Join(sysdev, "ro")) == "1"
	d.Model = strings.TrimSpace(readString(filepath.Join(sysdev, "device/vendor")) + " " + readString(filepath.Join(sysdev, "device/model")))
	if bf := readString(filepath.Join(sysdev, "loop/backing_file")); bf != "" {
		d.Model = "loop device backed by " + bf
		d.Transport = "loop"
		var bst unix.Stat_t
		if unix.Stat(bf, &bst) == nil && bst.Mode&unix.S_IFMT == unix.S_IFBLK {
			d.backing = fmt.Sprintf("%d:%d", unix.Major(bst.Rdev), unix.Minor(bst.Rdev))
		}
	}
	d.Serial = findSerial(sysdev)
	if d.Transport == "" {
		if hw, err := filepath.EvalSymlinks(filepath.Join(sysdev, "device")); err == nil {
			switch {
			case strings.Contains(hw, "/usb"):
				d.Transport = "usb"
			case strings.Contains(hw, "/nvme"):
				d.Transport = "nvme"
			case strings.Contains(hw, "/mmc"):
				d.Transport = "mmc"
			}
		}
	}
	return d, nil
}

// sysDevice is the block device at sysdev (major:minor dev) with its
// partitions, as far as the in-use checks need it.
func sysDevice(sysdev, dev string) *Device {
	d := &Device{Name: filepath.Base(sysdev), Dev: dev, Parts: map[string]string{dev: filepath.Base(sysdev)}, sysdev: sysdev}
	ents, _ := os.ReadDir(sysdev)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), d.Name) {
			continue
		}
		if pd := readString(filepath.Join(sysdev, e.Name(), "dev")); pd != "" {
			d.Parts[pd] = e.Name()
		}
	}
	return d
}

// findSerial looks for a serial number on the disk and then up its parents:
// SCSI/NVMe disks have one on the device, USB sticks on the USB device above.
func findSerial(sysdev string) string {
	if s := readString(filepath.Join(sysdev, "device/serial")); s != "" {
		return s
	}
	if s := readString(filepath.Join(sysdev, "serial")); s != "" {
		return s
	}
	hw, err := filepath.EvalSymlinks(filepath.Join(sysdev, "device"))
	if err != nil {
		return ""
	}
	for i := 0; i < 8 && hw != "/" && hw != "."; i++ {
		if s := readString(filepath.Join(hw, "serial")); s != "" {
			return s
		}
		hw = filepath.Dir(hw)
	}
	return ""
}

// Check runs every safety check for writing imageSize bytes and returns all
// the reasons to refuse at once (nil when it is safe).
func (d *Device) Check(imageSize int64, force bool, env Env) error {
	var why []string
	in := d.inUse(env)
	why = append(why, in...)
	// A loop device over a block device writes through to it, unclaimed:
	// whatever uses that device is in the way just the same.
	if d.backing != "" {
		if sysdev, err := filepath.EvalSymlinks(filepath.Join(env.sys(), "dev/block", d.backing)); err == nil {
			b := sysDevice(sysdev, d.backing)
			b.via = d.Name
			for _, r := range b.inUse(env) {
				why = append(why, fmt.Sprintf("it is a loop device over /dev/%s, and %s", b.Name, r))
			}
		}
	}
	if d.ReadOnly {
		why = append(why, "it is read-only (a write-protect switch?)")
	}
	if imageSize > d.Size {
		why = append(why, fmt.Sprintf("the image (%s, %d bytes) is larger than the device (%s, %d bytes)", progress.Bytes(imageSize), imageSize, progress.Bytes(d.Size), d.Size))
	}
	if !force && !d.Removable {
		why = append(why, "it is not a removable disk (sysfs removable=0): pass --force if it really is the stick you mean")
	}
	if !force && d.LogicalBlock != 512 {
		why = append(why, fmt.Sprintf("its logical block size is %d: the image's GPT is laid out for 512-byte sectors and would not be found (--force writes it anyway)", d.LogicalBlock))
	}
	if len(why) > 0 {
		return &Refused{Device: d.Path, Reasons: why}
	}
	return nil
}

// inUse names every way the disk or a partition of it is in use: mounted
// (the running root called out), swap, or held by device-mapper/md.
func (d *Device) inUse(env Env) []string {
	var why []string
	mounts, err := readMountinfo(filepath.Join(env.proc(), "self/mountinfo"))
	if err != nil {
		return []string{fmt.Sprintf("cannot tell whether it is mounted: %v", err)}
	}
	for _, m := range mounts {
		part, ok := d.Parts[m.dev]
		if !ok {
			part, ok = d.owns(m.source)
		}
		if !ok {
			continue
		}
		if m.point == "/" {
			why = append(why, fmt.Sprintf("/dev/%s holds the running root filesystem", part))
		} else {
			why = append(why, fmt.Sprintf("/dev/%s is mounted at %s (unmount it first)", part, m.point))
		}
	}
	swaps, err := os.ReadFile(filepath.Join(env.proc(), "swaps"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		why = append(why, fmt.Sprintf("cannot tell whether it holds swap: %v", err))
	}
	for i, line := range strings.Split(string(swaps), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) == 0 {
			continue
		}
		if part, ok := d.owns(unescape(f[0])); ok {
			why = append(why, fmt.Sprintf("/dev/%s is an active swap area (swapoff it first)", part))
		}
	}
	sys := env.sys()
	for _, part := range d.Parts {
		dir := d.sysdev
		if part != d.Name {
			dir = filepath.Join(dir, part)
		}
		hs, _ := os.ReadDir(filepath.Join(dir, "holders"))
		for _, h := range hs {
			why = append(why, fmt.Sprintf("/dev/%s is in use by %s (device-mapper, LVM, RAID or a crypt volume)", part, h.Name()))
		}
	}
	// A loop device over the disk or a partition uses it without claiming
	// it or showing in holders/, so O_EXCL lets flash in under whatever is
	// mounted from the loop device.
	loops, _ := filepath.Glob(filepath.Join(sys, "block", "loop*", "loop", "backing_file"))
	for _, bf := range loops {
		if part, ok := d.owns(readString(bf)); ok {
			loop := filepath.Base(filepath.Dir(filepath.Dir(bf)))
			if loop == d.via {
				continue
			}
			why = append(why, fmt.Sprintf("/dev/%s backs the loop device /dev/%s (losetup -d /dev/%s first)", part, loop, loop))
		}
	}
	return why
}

// owns says whether a /dev path is the disk or one of its partitions.
func (d *Device) owns(path string) (string, bool) {
	if !strings.HasPrefix(path, "/dev/") {
		return "", false
	}
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", false
	}
	part, ok := d.Parts[fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))]
	return part, ok
}

type mount struct{ dev, point, source string }

// readMountinfo parses /proc/self/mountinfo: field 3 is the device, field 5
// the mount point, and after the " - " separator come the type and source.
func readMountinfo(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 5 {
			continue
		}
		m := mount{dev: fl[2], point: unescape(fl[4])}
		for i, x := range fl {
			if x == "-" && i+2 < len(fl) {
				m.source = unescape(fl[i+2])
				break
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescape undoes the octal escapes (\040 for a space) of /proc mount tables.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readString(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}
