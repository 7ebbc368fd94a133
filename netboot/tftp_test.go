package netboot

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/testguard"
)

// tftpGet is a minimal client: it reads name from server and returns the bytes, or
// the server's error code and message.
func tftpGet(conn net.PacketConn, server net.Addr, name string, opts ...string) ([]byte, uint16, error) {
	req := []byte{0, tftpRRQ}
	for _, s := range append([]string{name, "octet"}, opts...) {
		req = append(append(req, s...), 0)
	}
	if _, err := conn.WriteTo(req, server); err != nil {
		return nil, 0, err
	}
	var out bytes.Buffer
	blksize, next := 512, uint16(1)
	buf := make([]byte, 70000)
	for {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return nil, 0, err
		}
		switch binary.BigEndian.Uint16(buf) {
		case tftpERROR:
			return nil, binary.BigEndian.Uint16(buf[2:]), fmt.Errorf("%s", strings.TrimRight(string(buf[4:n]), "\x00"))
		case tftpOACK:
			f := strings.Split(strings.TrimRight(string(buf[2:n]), "\x00"), "\x00")
			for i := 0; i+1 < len(f); i += 2 {
				if f[i] == "blksize" {
					fmt.Sscan(f[i+1], &blksize)
				}
			}
			conn.WriteTo([]byte{0, tftpACK, 0, 0}, from)
		case tftpDATA:
			block := binary.BigEndian.Uint16(buf[2:])
			if block == next {
				out.Write(buf[4:n])
				next++
			}
			conn.WriteTo([]byte{0, tftpACK, byte(block >> 8), byte(block)}, from)
			if block == next-1 && n-4 < blksize {
				return out.Bytes(), 0, nil
			}
		}
	}
}

func tftpFixture(t *testing.T) (dir string, big []byte) {
	dir = t.TempDir()
	big = make([]byte, 3000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	os.WriteFile(filepath.Join(dir, "undionly.kpxe"), big, 0o644)
	os.WriteFile(filepath.Join(dir, "exact.bin"), big[:1024], 0o644)
	os.WriteFile(filepath.Join(dir, ".hidden"), []byte("x"), 0o644)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("outside"), 0o644)
	os.Symlink(secret, filepath.Join(dir, "escape.efi"))
	return dir, big
}

func TestTFTP(t *testing.T) {
	dir, big := tftpFixture(t)
	logs := &syncBuffer{}
	srv := &TFTP{Dir: dir, Chain: "http://10.0.0.1:8080/boot.ipxe?mac=${net0/mac}", Log: slogTo(logs), Timeout: 500 * time.Millisecond}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx, pc)
	client, _ := net.ListenPacket("udp", "127.0.0.1:0")
	defer client.Close()

	got, _, err := tftpGet(client, pc.LocalAddr(), "boot.ipxe")
	if err != nil || string(got) != "#!ipxe\ndhcp\nchain http://10.0.0.1:8080/boot.ipxe?mac=${net0/mac}\n" {
		t.Errorf("boot.ipxe: %q, %v", got, err)
	}
	for _, opts := range [][]string{nil, {"blksize", "1024", "tsize", "0"}, {"blksize", "100000"}} {
		got, _, err := tftpGet(client, pc.LocalAddr(), "/undionly.kpxe", opts...)
		if err != nil || !bytes.Equal(got, big) {
			t.Errorf("undionly.kpxe %v: %d bytes, %v", opts, len(got), err)
		}
	}
	if got, _, err := tftpGet(client, pc.LocalAddr(), "exact.bin", "blksize", "512"); err != nil || len(got) != 1024 {
		t.Errorf("a file of whole blocks: %d bytes, %v", len(got), err)
	}
	for name, code := range map[string]uint16{"../secret": tftpErrAccess, ".hidden": tftpErrAccess, "escape.efi": tftpErrAccess, "a/../../x": tftpErrAccess, "missing.efi": tftpErrNotFound} {
		if _, c, err := tftpGet(client, pc.LocalAddr(), name); c != code {
			t.Errorf("%s: code %d (%v), want %d", name, c, err, code)
		}
	}
	// A write request is refused: the server is read-only.
	client.WriteTo(append([]byte{0, tftpWRQ}, "x\x00octet\x00"...), pc.LocalAddr())
	buf := make([]byte, 512)
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _, err := client.ReadFrom(buf); err != nil || binary.BigEndian.Uint16(buf) != tftpERROR || binary.BigEndian.Uint16(buf[2:]) != tftpErrAccess {
		t.Errorf("WRQ: %x, %v", buf[:n], err)
	}
	if n := strings.Count(logs.String(), "tftp refused"); n != 6 {
		t.Errorf("%d refusals logged, want 6:\n%s", n, logs.String())
	}
}

func FuzzTFTPRequest(f *testing.F) {
	f.Add([]byte("\x00\x01boot.ipxe\x00octet\x00blksize\x001468\x00tsize\x000\x00"))
	f.Add([]byte("\x00\x02x\x00netascii\x00"))
	f.Add([]byte("\x00\x01\x00"))
	f.Add([]byte("\x00\x01ipxe.efi\x00octet\x00timeout\x00255\x00blksize\x0065464\x00")) // issue 15 item 6: the flood's request
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := parseTFTPRequest(p)
		if err == nil && (r.mode != "octet" && r.mode != "netascii") {
			t.Fatalf("accepted mode %q", r.mode)
		}
	})
}

// TestTFTPInNetns runs the TFTP server in a network namespace of its own, reached over
// a veth pair from a second namespace: a real, if private, network with no loopback
// shortcut. Needs root (ip netns); skipped otherwise.
func TestTFTPInNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("creates network namespaces")
	}
	ns := newNetnsPair(t)
	dir, big := tftpFixture(t)
	addrFile := filepath.Join(t.TempDir(), "addr")
	srv := exec.Command("ip", "netns", "exec", ns.server, os.Args[0], "-test.run=^$")
	srv.Env = append(os.Environ(), helperEnv+"=tftp", "NETBOOT_TFTP_DIR="+dir, "NETBOOT_ADDR="+addrFile, "NETBOOT_LISTEN="+ns.serverIP+":69")
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	waitFile(t, addrFile, &stderr)

	client := ns.clientSocket(t, "udp4", ns.clientIP+":0")
	defer client.Close()
	server := &net.UDPAddr{IP: net.ParseIP(ns.serverIP), Port: 69}
	got, _, err := tftpGet(client, server, "undionly.kpxe", "blksize", "1468", "tsize", "0")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("undionly.kpxe over the veth: %d bytes, %v\n%s", len(got), err, stderr.String())
	}
	if _, code, _ := tftpGet(client, server, "escape.efi"); code != tftpErrAccess {
		t.Errorf("symlink escape over the veth: code %d", code)
	}
}

// netnsPair is two namespaces joined by a veth pair.
type netnsPair struct {
	server, client     string
	serverIP, clientIP string
	serverIf, clientIf string
}

func newNetnsPair(t *testing.T) *netnsPair {
	t.Helper()
	if os.Getuid() != 0 {
		testguard.Skip(t, "needs root for ip netns (CI runs make test as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testguard.Skip(t, "needs iproute2 (make deps installs it)")
	}
	id := fmt.Sprintf("%d", os.Getpid()%100000)
	p := &netnsPair{server: "pbsrv" + id, client: "pbcli" + id, serverIP: "10.231.0.1", clientIP: "10.231.0.2", serverIf: "pbs" + id, clientIf: "pbc" + id}
	run := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", p.server)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.server).Run() })
	run("netns", "add", p.client)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.client).Run() })
	run("link", "add", "pbs"+id, "netns", p.server, "type", "veth", "peer", "name", "pbc"+id, "netns", p.client)
	run("-n", p.server, "addr", "add", p.serverIP+"/24", "dev", "pbs"+id)
	run("-n", p.client, "addr", "add", p.clientIP+"/24", "dev", "pbc"+id)
	for _, ns := range []string{p.server, p.client} {
		run("-n", ns, "link", "set", "lo", "up")
	}
	run("-n", p.server, "link", "set", "pbs"+id, "up")
	run("-n", p.client, "link", "set", "pbc"+id, "up")
	return p
}

// clientSocket opens a UDP socket inside the client namespace.
func (p *netnsPair) clientSocket(t *testing.T, network, addr string) net.PacketConn {
	t.Helper()
	return p.inClient(t, func() (net.PacketConn, error) { return net.ListenPacket(network, addr) })
}

// inClient runs open inside the client namespace: the thread enters the namespace,
// makes the socket (which stays there), and comes back.
func (p *netnsPair) inClient(t *testing.T, open func() (net.PacketConn, error)) net.PacketConn {
	t.Helper()
	type result struct {
		pc  net.PacketConn
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine if it cannot go back
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer back.Close()
		target, err := os.Open("/var/run/netns/" + p.client)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		pc, err := open()
		if err := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{pc, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("socket in %s: %v", p.client, r.err)
	}
	return r.pc
}

func waitFile(t *testing.T, path string, stderr *bytes.Buffer) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("the helper did not start:\n%s", stderr.String())
}

// startTFTP serves dir on a loopback port until the test ends.
func startTFTP(t *testing.T, srv *TFTP) net.Addr {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go srv.Serve(ctx, pc)
	return pc.LocalAddr()
}

func rrq(name string, opts ...string) []byte {
	req := []byte{0, tftpRRQ}
	for _, s := range append([]string{name, "octet"}, opts...) {
		req = append(append(req, s...), 0)
	}
	return req
}

// TestTFTPFlood (issue 15 item 6 and its figure): 1,000 requests that are never
// acknowledged, from 250 addresses, hold less than 64 MiB and end by themselves.
// Before, each spawned a transfer holding its own copy of the file for up to
// 6 x the timeout the client picked (30 requests: 20 MB to 1.8 GB).
//
//	go test -run TestTFTPFlood -v ./netboot/
func TestTFTPFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 requests from 250 loopback addresses")
	}
	dir := t.TempDir()
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 13)
	}
	os.WriteFile(filepath.Join(dir, "ipxe.efi"), big, 0o644)
	logs := &syncBuffer{}
	srv := &TFTP{Dir: dir, Log: slogTo(logs), Timeout: 300 * time.Millisecond}
	server := startTFTP(t, srv)
	goroutines := runtime.NumGoroutine()
	runtime.GC()
	var before, peak runtime.MemStats
	runtime.ReadMemStats(&before)
	var clients []net.PacketConn
	for a := 0; a < 250; a++ {
		c, err := net.ListenPacket("udp4", fmt.Sprintf("127.1.%d.%d:0", a/250, 1+a%250))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		for k := 0; k < 4; k++ {
			c.WriteTo(rrq("ipxe.efi", "timeout", "255", "blksize", "1468"), server)
		}
	}
	time.Sleep(200 * time.Millisecond)
	runtime.ReadMemStats(&peak)
	held := int64(peak.HeapInuse) - int64(before.HeapInuse)
	live := runtime.NumGoroutine() - goroutines
	// They end by themselves: no ACK ever comes.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines+2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	left := runtime.NumGoroutine() - goroutines
	// What the flood got back: each admitted transfer's first packet and its one resend.
	answered := 0
	buf := make([]byte, 2000)
	for _, c := range clients {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				break
			}
			answered++
		}
	}
	t.Logf("1000 unacknowledged requests: %.1f MiB more heap in use, %d transfer goroutines at the peak, %d left after; %d packets sent back",
		float64(held)/(1<<20), live, left, answered)
	if held > 64<<20 {
		t.Errorf("the flood holds %.1f MiB, want under 64", float64(held)/(1<<20))
	}
	if live > 64+8 {
		t.Errorf("%d goroutines for the flood, want the 64 transfers at most", live)
	}
	if left > 2 {
		t.Errorf("%d goroutines left after the transfers timed out", left)
	}
	if answered > 64*2 {
		t.Errorf("%d packets reflected at unconfirmed peers, want at most 2 per admitted transfer (128)", answered)
	}
	if !strings.Contains(logs.String(), "tftp busy") {
		t.Error("dropped requests not logged")
	}
}

// TestTFTPUnconfirmedPeer (issue 15 item 6): a peer that never acknowledges (its
// address may be forged) gets the first packet and one resend, not six; the timeout
// option is bounded; a peer that has acknowledged gets the full retries.
func TestTFTPUnconfirmedPeer(t *testing.T) {
	dir, _ := tftpFixture(t)
	srv := &TFTP{Dir: dir, Timeout: 100 * time.Millisecond, Retries: 5}
	server := startTFTP(t, srv)
	c, _ := net.ListenPacket("udp4", "127.0.0.1:0")
	defer c.Close()
	count := func(wait time.Duration) (n int, last []byte, from net.Addr) {
		buf := make([]byte, 2000)
		end := time.Now().Add(wait)
		for {
			c.SetReadDeadline(end)
			k, a, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			n, last, from = n+1, append([]byte(nil), buf[:k]...), a
		}
	}
	c.WriteTo(rrq("undionly.kpxe"), server)
	if n, last, _ := count(1500 * time.Millisecond); n != 2 || binary.BigEndian.Uint16(last) != tftpDATA {
		t.Errorf("unacknowledged first block sent %d times, want 2", n)
	}
	// timeout=255 is more than MaxTimeout allows: left out of the OACK.
	c.WriteTo(rrq("undionly.kpxe", "timeout", "255", "blksize", "512"), server)
	n, oack, _ := count(800 * time.Millisecond)
	if n < 1 || binary.BigEndian.Uint16(oack) != tftpOACK || strings.Contains(string(oack), "timeout") {
		t.Errorf("OACK to timeout=255: %q (%d packets)", oack, n)
	}
	// Acknowledged once, the peer is confirmed: block 2 is resent up to Retries times.
	c.WriteTo(rrq("undionly.kpxe"), server)
	_, first, from := count(50 * time.Millisecond)
	if first == nil {
		t.Fatal("no first block")
	}
	c.WriteTo([]byte{0, tftpACK, 0, 1}, from)
	if n, last, _ := count(1500 * time.Millisecond); n != 6 || binary.BigEndian.Uint16(last[2:]) != 2 {
		t.Errorf("block 2 to a confirmed peer sent %d times, want 6", n)
	}
}

// TestTFTPPerSource: one address holds at most PerSource transfers; the rest of its
// requests are dropped unanswered, and another address is still served.
func TestTFTPPerSource(t *testing.T) {
	dir, big := tftpFixture(t)
	srv := &TFTP{Dir: dir, Timeout: 300 * time.Millisecond, PerSource: 3}
	server := startTFTP(t, srv)
	c, _ := net.ListenPacket("udp4", "127.0.0.1:0")
	defer c.Close()
	for i := 0; i < 10; i++ {
		c.WriteTo(rrq("undionly.kpxe"), server)
	}
	ports := map[string]bool{}
	buf := make([]byte, 2000)
	for {
		c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
		_, from, err := c.ReadFrom(buf)
		if err != nil {
			break
		}
		ports[from.String()] = true
	}
	if len(ports) != 3 {
		t.Errorf("%d transfers for one address, want 3", len(ports))
	}
	other, _ := net.ListenPacket("udp4", "127.0.0.2:0")
	defer other.Close()
	if got, _, err := tftpGet(other, server, "undionly.kpxe"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("another address while the first is at its cap: %d bytes, %v", len(got), err)
	}
}

// TestTFTPFileChanged: the shared copy is dropped when the file is replaced.
func TestTFTPFileChanged(t *testing.T) {
	dir, big := tftpFixture(t)
	server := startTFTP(t, &TFTP{Dir: dir, Timeout: 300 * time.Millisecond})
	c, _ := net.ListenPacket("udp4", "127.0.0.1:0")
	defer c.Close()
	if got, _, err := tftpGet(c, server, "undionly.kpxe"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("first: %d bytes, %v", len(got), err)
	}
	tmp := filepath.Join(dir, "new.tmp")
	os.WriteFile(tmp, []byte("a new first stage"), 0o644)
	os.Rename(tmp, filepath.Join(dir, "undionly.kpxe"))
	if got, _, err := tftpGet(c, server, "undionly.kpxe"); err != nil || string(got) != "a new first stage" {
		t.Errorf("after the file was replaced: %q, %v", got, err)
	}
}
