package netboot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/peerboot/peerboot/output"
)

// TFTP is a read-only TFTP server (RFC 1350, with the blksize, tsize and timeout
// options of RFC 2347-2349) for firmware that can only TFTP a first-stage iPXE:
// it serves the files of one directory (Debian's ipxe package puts ipxe.efi and
// undionly.kpxe in /usr/lib/ipxe) under the same rules as the HTTP files (clean
// relative names, no hidden files, no symlink out of the directory), and a generated
// boot.ipxe that chains to the HTTP server.
type TFTP struct {
	Dir string // first-stage files; "" serves only boot.ipxe
	// Chain is the URL boot.ipxe chains to, e.g. http://10.0.0.1:8080/boot.ipxe?mac=${net0/mac}.
	Chain string
	Log   *slog.Logger
	// Listen opens the socket of one transfer (a new port per transfer, as RFC 1350
	// wants); nil: UDP on the listener's address, port 0.
	Listen func(local net.Addr) (net.PacketConn, error)
	// Timeout per packet and Retries before a transfer is dropped (defaults 2s, 5).
	Timeout time.Duration
	Retries int
	// MaxTimeout is the largest timeout option a client may ask for (default 5s);
	// a larger one is left out of the OACK and Timeout applies.
	MaxTimeout time.Duration
	// UnconfirmedRetries are the resends to a peer that has not acknowledged anything
	// yet (default 1): its address may be forged, and every resend is reflected at it.
	UnconfirmedRetries int
	// MaxTransfers and PerSource bound the transfers in progress, in all and per client
	// address (defaults DefaultTFTPTransfers and DefaultTFTPPerSource); a request past
	// either is dropped unanswered.
	MaxTransfers int
	PerSource    int

	mu       sync.Mutex
	active   map[string]int       // transfers per client address
	inFlight int                  // transfers in all
	files    map[string]*tftpFile // one shared read-only copy of each file served
	dropped  int                  // requests dropped since the last log line
	lastLog  time.Time
}

// tftpFile is one file's bytes as read at stamp; transfers share them, read-only,
// once ready is closed.
type tftpFile struct {
	stamp string
	ready chan struct{}
	data  []byte
	err   error
}

// TFTP opcodes and error codes.
const (
	tftpRRQ   = 1
	tftpWRQ   = 2
	tftpDATA  = 3
	tftpACK   = 4
	tftpERROR = 5
	tftpOACK  = 6

	tftpErrNotFound = 1
	tftpErrAccess   = 2
	tftpErrIllegal  = 4
	tftpErrOption   = 8
)

// Serve answers requests on pc until ctx ends.
func (t *TFTP) Serve(ctx context.Context, pc net.PacketConn) error {
	if t.Log == nil {
		t.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	go func() {
		<-ctx.Done()
		pc.Close()
	}()
	buf := make([]byte, 1500)
	for {
		n, peer, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("tftp: %w", err)
		}
		// The slot is taken before the goroutine exists: a flood of requests costs
		// a counter, not a goroutine, a socket and a file each.
		src := addrHost(peer)
		if !t.acquire(src) {
			continue
		}
		pkt := append([]byte(nil), buf[:n]...)
		go func() {
			defer t.release(src)
			t.handle(ctx, pc.LocalAddr(), peer, pkt)
		}()
	}
}

func addrHost(a net.Addr) string {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// The TFTP transfer bounds a zero TFTP field takes.
const (
	DefaultTFTPTransfers = 64
	DefaultTFTPPerSource = 4
)

// acquire takes a transfer slot for src, or counts the request as dropped.
func (t *TFTP) acquire(src string) bool {
	maxAll, perSource := t.MaxTransfers, t.PerSource
	if maxAll <= 0 {
		maxAll = DefaultTFTPTransfers
	}
	if perSource <= 0 {
		perSource = DefaultTFTPPerSource
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active == nil {
		t.active = map[string]int{}
	}
	if t.inFlight >= maxAll || t.active[src] >= perSource {
		t.dropped++
		if now := time.Now(); now.Sub(t.lastLog) >= time.Second {
			t.Log.Warn("tftp busy: requests dropped", "dropped", t.dropped, "last", src, "transfers", t.inFlight, "from_last", t.active[src],
				"max", maxAll, "per_source", perSource)
			t.dropped, t.lastLog = 0, now
		}
		return false
	}
	t.inFlight++
	t.active[src]++
	return true
}

func (t *TFTP) release(src string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight--
	if t.active[src]--; t.active[src] <= 0 {
		delete(t.active, src)
	}
}

// tftpRequest is a parsed RRQ or WRQ.
type tftpRequest struct {
	op       uint16
	filename string
	mode     string
	options  map[string]string
}

func parseTFTPRequest(p []byte) (*tftpRequest, error) {
	if len(p) < 4 {
		return nil, errors.New("short packet")
	}
	r := &tftpRequest{op: binary.BigEndian.Uint16(p), options: map[string]string{}}
	if r.op != tftpRRQ && r.op != tftpWRQ {
		return nil, fmt.Errorf("opcode %d is not a request", r.op)
	}
	fields := bytes.Split(p[2:], []byte{0})
	if len(fields) < 3 || len(fields[len(fields)-1]) != 0 {
		return nil, errors.New("request not NUL-terminated")
	}
	fields = fields[:len(fields)-1]
	r.filename, r.mode = string(fields[0]), strings.ToLower(string(fields[1]))
	if r.mode != "octet" && r.mode != "netascii" {
		return nil, fmt.Errorf("mode %q: want octet", r.mode)
	}
	for i := 2; i+1 < len(fields); i += 2 {
		r.options[strings.ToLower(string(fields[i]))] = string(fields[i+1])
	}
	return r, nil
}

func (t *TFTP) handle(ctx context.Context, local, peer net.Addr, pkt []byte) {
	listen := t.Listen
	if listen == nil {
		listen = func(local net.Addr) (net.PacketConn, error) {
			host, _, _ := net.SplitHostPort(local.String())
			return net.ListenPacket("udp", net.JoinHostPort(host, "0"))
		}
	}
	conn, err := listen(local)
	if err != nil {
		t.Log.Error("tftp: opening a transfer socket", "error", err.Error())
		return
	}
	defer conn.Close()
	req, err := parseTFTPRequest(pkt)
	if err != nil {
		t.Log.Warn("tftp refused", "remote", peer.String(), "error", err.Error())
		sendTFTPError(conn, peer, tftpErrIllegal, err.Error())
		return
	}
	if req.op == tftpWRQ {
		t.Log.Warn("tftp refused", "remote", peer.String(), "file", req.filename, "error", "write request")
		sendTFTPError(conn, peer, tftpErrAccess, "read-only server")
		return
	}
	data, err := t.open(req.filename)
	if err != nil {
		code := uint16(tftpErrNotFound)
		if errors.Is(err, errRefused) {
			code = tftpErrAccess
		}
		t.Log.Warn("tftp refused", "remote", peer.String(), "file", req.filename, "error", err.Error())
		sendTFTPError(conn, peer, code, err.Error())
		return
	}
	if err := t.send(ctx, conn, peer, req, data); err != nil {
		t.Log.Warn("tftp transfer failed", "remote", peer.String(), "file", req.filename, "error", err.Error())
		return
	}
	t.Log.Info("tftp sent", "remote", peer.String(), "file", req.filename, "bytes", len(data))
}

// open returns a file's bytes: boot.ipxe is generated, the rest come from Dir, read
// once and shared by every transfer until the file changes.
func (t *TFTP) open(name string) ([]byte, error) {
	name = strings.TrimPrefix(name, "/") // firmware often asks for "/undionly.kpxe"
	if name == output.PXEScript && t.Chain != "" {
		return []byte("#!ipxe\ndhcp\nchain " + t.Chain + "\n"), nil
	}
	if err := checkRelPath(name); err != nil {
		return nil, err
	}
	if t.Dir == "" {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	root, err := os.OpenRoot(t.Dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", errRefused, name)
	}
	if fi.Size() > 64<<20 {
		return nil, fmt.Errorf("%w: %s is over 64 MiB: serve it over HTTP", errRefused, name)
	}
	ino := uint64(0)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	stamp := fmt.Sprintf("%d/%d/%d", ino, fi.Size(), fi.ModTime().UnixNano())
	// One reader per file and stamp; the transfers that ask meanwhile wait for it, so
	// a burst of first requests still makes one copy.
	t.mu.Lock()
	c := t.files[name]
	if c == nil || c.stamp != stamp {
		c = &tftpFile{stamp: stamp, ready: make(chan struct{})}
		if t.files == nil {
			t.files = map[string]*tftpFile{}
		}
		t.files[name] = c
		t.mu.Unlock()
		c.data, c.err = io.ReadAll(io.LimitReader(f, fi.Size()))
		close(c.ready)
		if c.err != nil {
			t.mu.Lock()
			if t.files[name] == c {
				delete(t.files, name)
			}
			t.mu.Unlock()
		}
	} else {
		t.mu.Unlock()
		<-c.ready
	}
	return c.data, c.err
}

// send runs one read transfer: OACK when options were asked, then DATA blocks, each
// retransmitted until its ACK comes (block numbers roll over past 65535).
func (t *TFTP) send(ctx context.Context, conn net.PacketConn, peer net.Addr, req *tftpRequest, data []byte) error {
	timeout, retries := t.Timeout, t.Retries
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	if retries <= 0 {
		retries = 5
	}
	blksize := 512
	var oack []string
	if v, ok := req.options["blksize"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 8 {
			sendTFTPError(conn, peer, tftpErrOption, "bad blksize")
			return fmt.Errorf("blksize %q", v)
		}
		blksize = min(n, 1468) // one Ethernet frame, no IP fragments
		oack = append(oack, "blksize", strconv.Itoa(blksize))
	}
	if _, ok := req.options["tsize"]; ok {
		oack = append(oack, "tsize", strconv.Itoa(len(data)))
	}
	maxTimeout := t.MaxTimeout
	if maxTimeout <= 0 {
		maxTimeout = 5 * time.Second
	}
	if v, ok := req.options["timeout"]; ok {
		// RFC 2349: an option the server does not take is left out of the OACK.
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && time.Duration(n)*time.Second <= maxTimeout {
			timeout = time.Duration(n) * time.Second
			oack = append(oack, "timeout", strconv.Itoa(n))
		}
	}
	unconfirmed := t.UnconfirmedRetries
	if unconfirmed <= 0 {
		unconfirmed = 1
	}
	confirmed := false // the peer has acknowledged a packet: its address is its own
	// exchange sends pkt until an ACK of block arrives from peer.
	ack := make([]byte, 1500)
	exchange := func(pkt []byte, block uint16) error {
		for try := 0; try <= retries; try++ {
			if !confirmed && try > unconfirmed {
				return fmt.Errorf("no ACK for block %d after %d tries to an unconfirmed peer", block, try)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, err := conn.WriteTo(pkt, peer); err != nil {
				return err
			}
			deadline := time.Now().Add(timeout)
			for {
				conn.SetReadDeadline(deadline)
				n, from, err := conn.ReadFrom(ack)
				if err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						break // retransmit
					}
					return err
				}
				if from.String() != peer.String() {
					sendTFTPError(conn, from, 5, "unknown transfer ID")
					continue
				}
				if n >= 4 && binary.BigEndian.Uint16(ack) == tftpERROR {
					return fmt.Errorf("the client gave up: %s", strings.TrimRight(string(ack[4:n]), "\x00"))
				}
				if n >= 4 && binary.BigEndian.Uint16(ack) == tftpACK && binary.BigEndian.Uint16(ack[2:]) == block {
					confirmed = true
					return nil
				}
			}
		}
		return fmt.Errorf("no ACK for block %d after %d tries", block, retries+1)
	}
	if len(oack) > 0 {
		pkt := []byte{0, tftpOACK}
		for _, s := range oack {
			pkt = append(append(pkt, s...), 0)
		}
		if err := exchange(pkt, 0); err != nil {
			return err
		}
	}
	pkt := make([]byte, 4+blksize)
	for block, off := uint16(1), 0; ; block, off = block+1, off+blksize {
		end := min(off+blksize, len(data))
		binary.BigEndian.PutUint16(pkt, tftpDATA)
		binary.BigEndian.PutUint16(pkt[2:], block)
		n := copy(pkt[4:], data[off:end])
		if err := exchange(pkt[:4+n], block); err != nil {
			return err
		}
		if n < blksize {
			return nil
		}
	}
}

func sendTFTPError(conn net.PacketConn, to net.Addr, code uint16, msg string) {
	pkt := []byte{0, tftpERROR, byte(code >> 8), byte(code)}
	pkt = append(append(pkt, msg...), 0)
	conn.WriteTo(pkt, to)
}
