package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

const msNoSuidNoDevNoExec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// mountSpec is one early mount.
type mountSpec struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

// earlyMounts are made in order: devtmpfs before /dev/pts and /dev/shm, which live in it.
func earlyMounts() []mountSpec {
	return []mountSpec{
		{"proc", "/proc", "proc", msNoSuidNoDevNoExec, ""},
		{"sysfs", "/sys", "sysfs", msNoSuidNoDevNoExec, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666"},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	}
}

// mountAll makes the early mounts, creating mount points as needed. EBUSY (already
// mounted, e.g. devtmpfs by CONFIG_DEVTMPFS_MOUNT on a disk root) is not an error.
func (m *machine) mountAll() []error {
	var errs []error
	for _, s := range earlyMounts() {
		target := m.path(s.target)
		if err := os.MkdirAll(target, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("mount %s: %w", s.target, err))
			continue
		}
		if err := m.mount(s.source, target, s.fstype, s.flags, s.data); err != nil && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("mount %s on %s: %w", s.fstype, s.target, err))
		}
	}
	return errs
}

// openConsole opens /dev/console and makes it stdin, stdout and stderr, so that Go's own
// crash output and every child's output reach the console. Without an initramfs
// /dev/console node the kernel started us with no descriptors at all.
func openConsole(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	for i := 0; i < 3; i++ {
		if fd != i {
			if err := unix.Dup3(fd, i, 0); err != nil {
				return nil, fmt.Errorf("dup console to fd %d: %w", i, err)
			}
		}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// handOff is the real last act of PID 1. It never returns: PID 1 exiting panics the kernel.
func handOff(m *machine, action string) {
	switch action {
	case actPoweroff, actReboot, actHalt:
		cmd := map[string]int{actPoweroff: unix.LINUX_REBOOT_CMD_POWER_OFF, actReboot: unix.LINUX_REBOOT_CMD_RESTART, actHalt: unix.LINUX_REBOOT_CMD_HALT}[action]
		m.say("%s", action)
		unix.Sync() // the report on the FAT partition must reach the medium
		if err := unix.Reboot(cmd); err != nil {
			m.say("%s failed: %v", action, err)
		}
	default:
		if _, err := os.Stat("/bin/sh"); err != nil {
			m.say("no shell in this image; halting")
			unix.Sync()
			_ = unix.Reboot(unix.LINUX_REBOOT_CMD_HALT)
			break
		}
		shellLoop(m)
	}
	idle()
}

// shellLoop keeps a login-less shell on the console. It runs /bin/sh as a child rather
// than exec'ing it: PID 1 stays ours, so an "exit" in the shell gives a new shell
// instead of a kernel panic, and orphaned processes are still reaped.
func shellLoop(m *machine) {
	for {
		cmd := exec.Command("/bin/sh", "-l")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(checkEnv(nil), "TERM=linux", "PS1=peerboot# ")
		cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Start(); err != nil {
			m.say("starting /bin/sh: %v; halting", err)
			unix.Sync()
			_ = unix.Reboot(unix.LINUX_REBOOT_CMD_HALT)
			return
		}
		reapUntil(cmd.Process.Pid)
		m.say("shell exited; starting a new one")
		time.Sleep(time.Second)
	}
}

// reapUntil waits for any child, reaping orphans, until pid itself exits.
func reapUntil(pid int) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if got == pid || errors.Is(err, unix.ECHILD) {
			return
		}
	}
}

// idle is where PID 1 rests when there is nothing left to do. It sleeps rather than
// blocking on select{}: the Go runtime would call that a deadlock and exit.
func idle() {
	for {
		for {
			var ws unix.WaitStatus
			if pid, _ := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		time.Sleep(time.Second)
	}
}
