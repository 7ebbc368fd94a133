// Package opencount counts the opens of the files in a directory, by anyone in
// the process or outside it, through the kernel's inotify: a test that says "each
// file is read once" counts real opens, whatever code path made them.
package opencount

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Counter watches one directory.
type Counter struct {
	fd     int
	counts map[string]int
}

// Watch starts counting the opens of the files directly in dir; the watch ends
// with the test.
func Watch(tb testing.TB, dir string) *Counter {
	tb.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		tb.Fatalf("inotify: %v", err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	// IN_CLOSE_NOWRITE beside IN_OPEN: inotify merges an event identical to the
	// unread one before it, so two opens in a row would count as one; a close
	// between them keeps them apart.
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN|unix.IN_CLOSE_NOWRITE|unix.IN_CLOSE_WRITE); err != nil {
		tb.Fatalf("inotify watch %s: %v", dir, err)
	}
	return &Counter{fd: fd, counts: map[string]int{}}
}

// Opens returns how many times each file (by name in the directory) was opened
// since Watch. The events of opens that returned are queued already, so what a
// call made before Opens is counted.
func (c *Counter) Opens(tb testing.TB) map[string]int {
	tb.Helper()
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(c.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			tb.Fatalf("inotify read: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameStart := off + unix.SizeofInotifyEvent
			name := buf[nameStart : nameStart+int(ev.Len)]
			for i, b := range name {
				if b == 0 {
					name = name[:i]
					break
				}
			}
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				tb.Fatal("inotify queue overflowed: opens lost")
			}
			if ev.Mask&unix.IN_OPEN != 0 && len(name) > 0 {
				c.counts[string(name)]++
			}
			off = nameStart + int(ev.Len)
		}
	}
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}
