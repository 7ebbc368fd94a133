package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/testguard"
)

// bringUp on fakes: an interface without link is passed over after the carrier wait,
// a failed exchange is named, and the first lease is configured.
func TestBringUp(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ups, configured []string
	carrier := func(ok bool) func() bool { return func() bool { return ok } }
	e := netEnv{
		list: func() ([]netIface, error) {
			return []netIface{{name: "eno1", carrier: carrier(false)}, {name: "eno2", carrier: carrier(true)}, {name: "eno3", carrier: carrier(true)}, {name: "eno4", carrier: carrier(true)}}, nil
		},
		ifup: func(name string) error { ups = append(ups, name); return nil },
		dhcp: func(ifc netIface, deadline time.Time) (*lease, error) {
			if d := deadline.Sub(clock); d != 10*time.Second {
				t.Errorf("%s: deadline in %s", ifc.name, d)
			}
			if ifc.name == "eno2" {
				clock = deadline
				return nil, errors.New("no DHCP offer: no answer within 10s")
			}
			return &lease{iface: ifc.name, addr: net.ParseIP("10.1.0.7").To4(), mask: net.CIDRMask(16, 32)}, nil
		},
		configure: func(l *lease) error { configured = append(configured, l.iface); return nil },
		now:       func() time.Time { return clock },
		sleep:     func(d time.Duration) { clock = clock.Add(d) },
	}
	l, err := e.bringUp(defaultNetLimits())
	if err != nil || l.iface != "eno3" {
		t.Fatalf("lease %+v, %v", l, err)
	}
	if strings.Join(ups, ",") != "eno1,eno2,eno3,eno4" || strings.Join(configured, ",") != "eno3" {
		t.Errorf("up %v, configured %v", ups, configured)
	}

	// Nothing works: every interface says why, and the total bound holds.
	clock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.dhcp = func(ifc netIface, deadline time.Time) (*lease, error) {
		clock = deadline
		return nil, errors.New("no DHCP offer: no answer within 10s")
	}
	e.ifup = func(name string) error {
		if name == "eno4" {
			return errors.New("SIOCSIFFLAGS eno4: no such device")
		}
		return nil
	}
	_, err = e.bringUp(netLimits{carrier: 5 * time.Second, perIface: 10 * time.Second, total: 18 * time.Second})
	want := "eno4: SIOCSIFFLAGS eno4: no such device; eno1: no link (carrier) after 5s; eno2: no DHCP offer: no answer within 10s; eno3: no DHCP offer: no answer within 10s"
	if err == nil || err.Error() != want {
		t.Errorf("err %v\nwant %s", err, want)
	}
	if clock.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) != 18*time.Second {
		t.Errorf("the total bound did not hold: %s", clock)
	}

	e.list = func() ([]netIface, error) { return nil, nil }
	if _, err := e.bringUp(defaultNetLimits()); err == nil || !strings.Contains(err.Error(), "no Ethernet interface") {
		t.Errorf("no interfaces: %v", err)
	}
}

func TestSysfsInterfaces(t *testing.T) {
	dir := t.TempDir()
	add := func(name, typ, index, mac, carrier string) {
		state := map[string]string{"1": "up", "0": "down", "": "down"}[carrier]
		writeFile(t, dir+"/"+name+"/operstate", state+"\n")
		writeFile(t, dir+"/"+name+"/type", typ+"\n")
		writeFile(t, dir+"/"+name+"/ifindex", index+"\n")
		writeFile(t, dir+"/"+name+"/address", mac+"\n")
		if carrier != "" {
			writeFile(t, dir+"/"+name+"/carrier", carrier+"\n")
		}
	}
	add("lo", "772", "1", "00:00:00:00:00:00", "1")
	add("eth1", "1", "3", "52:54:00:00:00:02", "0")
	add("eth0", "1", "2", "52:54:00:00:00:01", "1")
	add("ib0", "32", "4", "80:00:00:00:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:01", "1")
	add("eth2", "1", "5", "52:54:00:00:00:03", "") // down: no readable carrier
	add("eth3", "1", "6", "52:54:00:00:00:04", "1")
	writeFile(t, dir+"/eth3/operstate", "unknown\n") // a driver that does not track it
	add("eth4", "1", "7", "52:54:00:00:00:05", "1")
	writeFile(t, dir+"/eth4/operstate", "down\n") // carrier, but the queue is not active yet
	writeFile(t, dir+"/bonding_masters", "\n")
	got, err := sysfsInterfaces(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, i := range got {
		s = append(s, fmt.Sprintf("%s/%d/%s/%v", i.name, i.index, i.mac, i.carrier()))
	}
	if want := "eth0/2/52:54:00:00:00:01/true eth1/3/52:54:00:00:00:02/false eth2/5/52:54:00:00:00:03/false eth3/6/52:54:00:00:00:04/true eth4/7/52:54:00:00:00:05/false"; strings.Join(s, " ") != want {
		t.Errorf("got %v\nwant %s", s, want)
	}
}

const dhcpHelperEnv = "PEERBOOT_DHCP_HELPER"

// dhcpClientHelper is the process TestDHCPInNetns runs inside the client
// namespace (ip netns exec, which also mounts that namespace's /sys), where it is
// the init's real bring-up, then the init's real POST. TestMain runs it when
// PEERBOOT_DHCP_HELPER names the interface.
func dhcpClientHelper(iface string) error {
	// Never touch the interfaces of a namespace that is not the test's own.
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return err
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{iface, "lo"}; !slices.Equal(names, want) && !slices.Equal(names, []string{"lo", iface}) {
		return fmt.Errorf("this namespace has interfaces %v, want only %v: refusing to run", names, want)
	}
	l, err := realNetwork("/sys/class/net", linkUp)()
	if err != nil {
		return err
	}
	fmt.Printf("LEASE %s %s %s %s %s %s\n", l.iface, l.prefix(), l.router, ipsOr(l.dns, "-"), l.server, l.time)
	if err := httpPost(os.Getenv("PEERBOOT_DHCP_POST"), "t0k", []byte(`{"from":"node"}`)); err != nil {
		return fmt.Errorf("POST: %w", err)
	}
	return nil
}

// TestMain runs dhcpClientHelper instead of the tests when asked to.
func TestMain(m *testing.M) {
	if iface := os.Getenv(dhcpHelperEnv); iface != "" {
		if err := dhcpClientHelper(iface); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDHCPInNetns: the init's DHCP client, in a namespace of its own, gets a lease over
// a veth from a DHCP server in a second namespace (a few lines of Go below), configures
// address and default route, and POSTs through that route to an address that only
// the route reaches. Needs root (ip netns); skipped otherwise. Now and then the first
// OFFER is lost (the server's end of the veth gets its carrier only when the client
// sets its own end up, and drops a frame until its queue is active): the client's
// resend after a second is then part of what is tested.
func TestDHCPInNetns(t *testing.T) {
	testguard.Short(t, "creates network namespaces")
	if os.Getuid() != 0 {
		testguard.Skip(t, "needs root for ip netns (CI runs make test as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testguard.Skip(t, "needs iproute2 (make deps installs it)")
	}
	id := fmt.Sprintf("%d", os.Getpid()%100000)
	srvNS, cliNS, srvIf, cliIf := "pbdhs"+id, "pbdhc"+id, "pbdhs"+id, "pbdhc"+id
	ip := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ip("netns", "add", srvNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", srvNS).Run() })
	ip("netns", "add", cliNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", cliNS).Run() })
	ip("link", "add", srvIf, "netns", srvNS, "type", "veth", "peer", "name", cliIf, "netns", cliNS)
	ip("-n", srvNS, "addr", "add", "10.233.0.1/24", "dev", srvIf)
	ip("-n", srvNS, "addr", "add", "10.234.0.1/32", "dev", "lo") // reachable from the client only by its default route
	ip("-n", srvNS, "link", "set", "lo", "up")
	ip("-n", srvNS, "link", "set", srvIf, "up")
	// The client's end stays down: setting it up is the client's job.

	var dhcpPC net.PacketConn
	var web net.Listener
	inNetns(t, srvNS, func() error {
		var err error
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1),
					unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, srvIf))
			})
			return errors.Join(err, serr)
		}}
		if dhcpPC, err = lc.ListenPacket(context.Background(), "udp4", "0.0.0.0:67"); err != nil {
			return err
		}
		web, err = net.Listen("tcp4", "10.234.0.1:0")
		return err
	})
	defer dhcpPC.Close()
	defer web.Close()

	posted := make(chan string, 1)
	go http.Serve(web, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posted <- r.Header.Get("Authorization") + " " + string(b)
		w.WriteHeader(http.StatusCreated)
	}))
	var srvLog []string
	served := make(chan struct{})
	go func() {
		tinyDHCPServer(dhcpPC, func(s string) { srvLog = append(srvLog, s) })
		close(served)
	}()

	cmd := exec.Command("ip", "netns", "exec", cliNS, os.Args[0])
	cmd.Env = append(os.Environ(), dhcpHelperEnv+"="+cliIf, "PEERBOOT_DHCP_POST=http://"+web.Addr().String()+"/reports")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	dhcpPC.Close()
	<-served
	log := srvLog
	if err != nil {
		t.Fatalf("the client in %s: %v\n%s\nserver: %v", cliNS, err, out, log)
	}
	t.Logf("server saw %v; client took %s", log, took.Round(time.Millisecond))
	if !strings.Contains(string(out), "LEASE "+cliIf+" 10.233.0.50/24 10.233.0.1 10.233.0.53 10.233.0.1 1h0m0s\n") {
		t.Errorf("client output:\n%s", out)
	}
	if a := ip("-n", cliNS, "-4", "addr", "show", "dev", cliIf); !strings.Contains(a, "inet 10.233.0.50/24 brd 10.233.0.255 scope global "+cliIf) || !strings.Contains(a, "UP") {
		t.Errorf("address in %s:\n%s", cliNS, a)
	}
	if r := ip("-n", cliNS, "-4", "route", "show", "default"); !strings.Contains(r, "default via 10.233.0.1 dev "+cliIf+" proto dhcp") {
		t.Errorf("default route in %s: %q", cliNS, r)
	}
	select {
	case p := <-posted:
		if p != `Bearer t0k {"from":"node"}` {
			t.Errorf("POST got %q", p)
		}
	default:
		t.Error("the server got no POST")
	}
	if !slices.Contains(log, "DISCOVER broadcast") || !slices.Contains(log, "REQUEST broadcast 10.233.0.50") {
		t.Errorf("server log %v", log)
	}
}

// tinyDHCPServer answers every DISCOVER with 10.233.0.50/24 and every REQUEST for it
// with an ACK, broadcast to port 68, until its socket closes. It notes what it saw.
func tinyDHCPServer(pc net.PacketConn, log func(string)) {
	buf := make([]byte, 1500)
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		p := buf[:n]
		if len(p) < dhcpMinLen || p[0] != bootRequest {
			continue
		}
		opts, err := parseOptions(p[dhcpMinLen:])
		if err != nil || len(opts[optMessageType]) != 1 {
			log(fmt.Sprintf("bad request: %v", err))
			continue
		}
		how := "unicast"
		if binary.BigEndian.Uint16(p[10:])&flagBroadcast != 0 {
			how = "broadcast"
		}
		var typ byte
		switch opts[optMessageType][0] {
		case dhcpDiscover:
			typ = dhcpOffer
			log("DISCOVER " + how)
		case dhcpRequest:
			typ = dhcpAck
			log("REQUEST " + how + " " + net.IP(opts[optRequestedIP]).String())
		default:
			continue
		}
		r := make([]byte, dhcpFixedLen)
		r[0], r[1], r[2] = bootReply, 1, 6
		copy(r[4:8], p[4:8])     // xid
		copy(r[10:12], p[10:12]) // flags
		copy(r[16:20], ip4("10.233.0.50"))
		copy(r[20:24], ip4("10.233.0.1"))
		copy(r[28:44], p[28:44]) // chaddr
		r = append(r, magicCookie...)
		for _, o := range [][]byte{opt(optMessageType, typ), opt(optServerID, ip4("10.233.0.1")...), opt(optSubnetMask, 255, 255, 255, 0),
			opt(optRouter, ip4("10.233.0.1")...), opt(optDNS, ip4("10.233.0.53")...), opt(optLeaseTime, 0, 0, 0x0e, 0x10)} {
			r = append(r, o...)
		}
		r = append(r, optEnd)
		pc.WriteTo(r, &net.UDPAddr{IP: net.IPv4bcast, Port: clientPort})
	}
}

// inNetns runs fn on a thread inside the named namespace; sockets fn opens stay there.
func inNetns(t *testing.T, ns string, fn func() error) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked if the thread cannot go back: it dies with the goroutine
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- err
			return
		}
		defer back.Close()
		target, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			done <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("entering %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		done <- ferr
	}()
	if err := <-done; err != nil {
		t.Fatalf("in %s: %v", ns, err)
	}
}
