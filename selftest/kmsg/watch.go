package kmsg

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/selftest"
)

// maxReadsPerDrain bounds one Events call: a kernel logging in a loop must not keep the
// self-test in here. What is left is read by the next call.
const maxReadsPerDrain = 10000

// Watch follows the kernel log from the moment Start opened it. It is not safe for
// concurrent use.
//
// Against the real /dev/kmsg every read(2) returns exactly one record
// ("prio,seq,usec,flags;message\n" plus " KEY=value" lines), a read with nothing new
// fails with EAGAIN, and a reader that fell behind the ring buffer gets EPIPE once and
// then continues at the oldest record still there. Watch also works on a regular file or
// a pipe (how the tests drive it): there a read may return several lines or part of
// one, the end of the data reads as 0 bytes, and lines are reassembled across reads.
type Watch struct {
	path    string
	fd      int
	partial []byte // a line not yet ended (files and pipes only; kmsg records are whole)
	lost    int
	c       collector
}

// Start opens path (normally /dev/kmsg) read-only and non-blocking and moves to its
// end, so that Events returns only records logged after Start: the boot's own messages
// are not this run's. A pipe cannot seek and is read from where it is.
//
// The file descriptor is used directly, never through an *os.File: the runtime would
// register a pollable /dev/kmsg with its poller, and a read would then wait for the
// next record instead of answering EAGAIN.
func Start(path string) (*Watch, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the kernel log %s: %w", path, err)
	}
	if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil && !errors.Is(err, unix.ESPIPE) {
		unix.Close(fd)
		return nil, fmt.Errorf("moving to the end of the kernel log %s: %w", path, err)
	}
	return &Watch{path: path, fd: fd}, nil
}

// Events returns the events among the records logged since the previous call (or since
// Start), never nil. Records the kernel overwrote before they were read are skipped
// (Lost counts the gaps). On a read error it returns the events read before it with the
// error; the Watch stays usable.
func (w *Watch) Events() ([]selftest.KEvent, error) {
	err := w.drain(w.c.add)
	return w.c.events(), err
}

// Messages returns the text of every record logged since the previous call, without
// the record header and the device dictionary lines, never nil: what the init keeps
// beside each module load. Errors are as for Events.
func (w *Watch) Messages() ([]string, error) {
	out := []string{}
	err := w.drain(func(line string) {
		if msg := message(line); msg != "" {
			out = append(out, msg)
		}
	})
	return out, err
}

// drain reads what is there now and hands every complete line to add.
func (w *Watch) drain(add func(string)) error {
	if w.fd < 0 {
		return fmt.Errorf("reading the kernel log %s: the watch is closed", w.path)
	}
	// 16 KiB holds any record: the kernel caps one at 8 KiB with its dictionary, and a
	// read into a buffer smaller than the record fails with EINVAL.
	buf := make([]byte, 16<<10)
	for range maxReadsPerDrain {
		n, err := unix.Read(w.fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EPIPE) {
			w.lost++
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the kernel log %s: %w", w.path, err)
		}
		if n <= 0 {
			return nil // end of a regular file, or a pipe whose writer closed
		}
		w.feed(buf[:n], add)
	}
	return nil
}

// feed splits what one read returned into lines; an unfinished last line waits for the
// next read.
func (w *Watch) feed(b []byte, add func(string)) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(w.partial)+len(b) <= scanLineMax {
				w.partial = append(w.partial, b...)
			}
			return
		}
		line := b[:i]
		if len(w.partial) > 0 {
			line = append(w.partial, line...)
			w.partial = w.partial[:0]
		}
		add(string(line))
		b = b[i+1:]
	}
}

// Lost is how many times the kernel reported records overwritten before Watch read
// them (EPIPE). Non-zero means events may be missing from what Events returned.
func (w *Watch) Lost() int { return w.lost }

// Close releases the file descriptor. Events after Close returns an error.
func (w *Watch) Close() error {
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	if err != nil {
		return fmt.Errorf("closing the kernel log %s: %w", w.path, err)
	}
	return nil
}

// Backlog returns the text of every record the kernel log holds now, oldest first,
// without record headers: the lines logged before a Watch started (the driver's
// per-GPU lines at BAR1 setup are logged when the GPU is first opened, which may be
// long before the self-test runs). A regular file (tests) is read whole.
func Backlog(path string) ([]string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the kernel log %s: %w", path, err)
	}
	w := &Watch{path: path, fd: fd}
	defer w.Close()
	out := []string{}
	err = w.drain(func(line string) {
		if msg := message(line); msg != "" {
			out = append(out, msg)
		}
	})
	return out, err
}
