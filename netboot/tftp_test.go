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
		t.Skip("needs root for ip netns")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
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
