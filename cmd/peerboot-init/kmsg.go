package main

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelLog yields the kernel messages logged since the previous call.
type kernelLog interface {
	Drain() []string
}

// kmsg reads /dev/kmsg without blocking. It starts at the end of the ring, so the
// first Drain returns only what happened since the init opened it.
type kmsg struct{ f *os.File }

func openKmsg(path string) (*kmsg, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// SEEK_END on /dev/kmsg moves past the last record: boot messages are not ours.
	if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "seek", Path: path, Err: err}
	}
	return &kmsg{f: os.NewFile(uintptr(fd), path)}, nil
}

func (k *kmsg) Drain() []string {
	lines := []string{}
	buf := make([]byte, 8192) // one read returns one record; records are < 8 KiB
	for range 10000 {         // bounded: a kernel logging in a loop must not pin us here
		n, err := unix.Read(int(k.f.Fd()), buf)
		if errors.Is(err, unix.EPIPE) {
			continue // records were overwritten before we read them; go on with the next
		}
		if err != nil || n <= 0 {
			break // EAGAIN: nothing more for now
		}
		if msg, ok := parseKmsgRecord(string(buf[:n])); ok {
			lines = append(lines, msg)
		}
	}
	return lines
}

// parseKmsgRecord takes "prio,seq,usec,flags[,...];message\n[ KEY=value\n...]" and returns
// the message, with the kernel's \xNN escapes for control characters left as they are.
func parseKmsgRecord(rec string) (string, bool) {
	head, rest, ok := strings.Cut(rec, ";")
	if !ok || !strings.Contains(head, ",") {
		return "", false
	}
	msg, _, _ := strings.Cut(rest, "\n") // continuation lines are device metadata
	return msg, true
}

// noKmsg stands in when /dev/kmsg cannot be opened: loads still happen, unlogged.
type noKmsg struct{}

func (noKmsg) Drain() []string { return []string{} }
