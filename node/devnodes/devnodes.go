// Package devnodes makes the /dev/nvidia* character devices nvidia-modprobe would: the
// driver registers its majors but creates no nodes, and devtmpfs only makes what a
// driver announces.
package devnodes

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// nvidiaMajor is the character major nvidia.ko registers (NV_MAJOR_DEVICE_NUMBER); it is
// fixed, but /proc/devices is asked first in case a build changes it.
const nvidiaMajor = 195

// Node is one character device to create under /dev.
type Node struct {
	Name         string
	Major, Minor uint32
}

// Nvidia plans the /dev/nvidia* nodes for the modules that loaded: proc is the /proc
// directory, loaded the kernel names of the modules that loaded.
func Nvidia(proc string, loaded map[string]bool) ([]Node, error) {
	if !loaded["nvidia"] {
		return nil, nil
	}
	majors, err := charMajors(filepath.Join(proc, "devices"))
	if err != nil {
		return nil, err
	}
	nv := uint32(nvidiaMajor)
	for _, name := range []string{"nvidia-frontend", "nvidia"} {
		if m, ok := majors[name]; ok {
			nv = m
			break
		}
	}
	gpus, err := os.ReadDir(filepath.Join(proc, "driver", "nvidia", "gpus"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("counting GPUs: %w", err)
	}
	nodes := []Node{{"nvidiactl", nv, 255}}
	for i := range gpus {
		nodes = append(nodes, Node{fmt.Sprintf("nvidia%d", i), nv, uint32(i)})
	}
	if loaded["nvidia_modeset"] {
		nodes = append(nodes, Node{"nvidia-modeset", nv, 254})
	}
	if loaded["nvidia_uvm"] {
		uvm, ok := majors["nvidia-uvm"]
		if !ok {
			return nodes, fmt.Errorf("nvidia-uvm loaded but has no major in %s", filepath.Join(proc, "devices"))
		}
		nodes = append(nodes, Node{"nvidia-uvm", uvm, 0}, Node{"nvidia-uvm-tools", uvm, 1})
	}
	return nodes, nil
}

// charMajors reads the "Character devices:" section of /proc/devices.
func charMajors(path string) (map[string]uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint32{}
	inChar := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
		case strings.HasSuffix(line, "devices:"):
			inChar = false
		case inChar:
			f := strings.Fields(line)
			if len(f) == 2 {
				if n, err := strconv.ParseUint(f[0], 10, 32); err == nil {
					out[f[1]] = uint32(n)
				}
			}
		}
	}
	return out, sc.Err()
}

// Make creates the nodes under dev, world read-write as nvidia-modprobe leaves
// them (the appliance has one user), replacing stale ones.
func Make(dev string, nodes []Node, mknod func(path string, mode uint32, dev int) error) error {
	var errs []error
	for _, n := range nodes {
		p := filepath.Join(dev, n.Name)
		_ = os.Remove(p)
		if err := mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(n.Major, n.Minor))); err != nil {
			errs = append(errs, fmt.Errorf("mknod %s: %w", p, err))
			continue
		}
		// mknod is subject to the umask; chmod makes the mode what we said.
		_ = os.Chmod(p, 0o666)
	}
	return errors.Join(errs...)
}
