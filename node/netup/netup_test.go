package netup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/testfs"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/node/dhcp"
)

// BringUp on fakes: an interface without link is passed over after the carrier wait,
// a failed exchange is named, and the first lease is configured.
func TestBringUp(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ups, configured []string
	carrier := func(ok bool) func() bool { return func() bool { return ok } }
	timeout := func(ctx context.Context, ifc Iface) (*dhcp.Lease, error) {
		d, _ := ctx.Deadline()
		clock = d
		return nil, errors.New("no DHCP lease: no answer within 10s")
	}
	e := Env{
		List: func() ([]Iface, error) {
			return []Iface{{Name: "eno1", Carrier: carrier(false)}, {Name: "eno2", Carrier: carrier(true)}, {Name: "eno3", Carrier: carrier(true)}, {Name: "eno4", Carrier: carrier(true)}}, nil
		},
		Up: func(name string) error { ups = append(ups, name); return nil },
		DHCP: func(ctx context.Context, ifc Iface) (*dhcp.Lease, error) {
			if d, ok := ctx.Deadline(); !ok || d.Sub(clock) != 10*time.Second {
				t.Errorf("%s: deadline in %s", ifc.Name, d.Sub(clock))
			}
			if ifc.Name == "eno2" {
				return timeout(ctx, ifc)
			}
			return &dhcp.Lease{Iface: ifc.Name, Addr: net.ParseIP("10.1.0.7").To4(), Mask: net.CIDRMask(16, 32)}, nil
		},
		Configure: func(l *dhcp.Lease) error { configured = append(configured, l.Iface); return nil },
		Now:       func() time.Time { return clock },
		Sleep:     func(d time.Duration) { clock = clock.Add(d) },
	}
	l, err := e.BringUp(context.Background(), DefaultLimits())
	if err != nil || l.Iface != "eno3" {
		t.Fatalf("lease %+v, %v", l, err)
	}
	if strings.Join(ups, ",") != "eno1,eno2,eno3,eno4" || strings.Join(configured, ",") != "eno3" {
		t.Errorf("up %v, configured %v", ups, configured)
	}

	// Nothing works: every interface says why, and the total bound holds.
	clock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.DHCP = timeout
	e.Up = func(name string) error {
		if name == "eno4" {
			return errors.New("SIOCSIFFLAGS eno4: no such device")
		}
		return nil
	}
	_, err = e.BringUp(context.Background(), Limits{Carrier: 5 * time.Second, PerIface: 10 * time.Second, Total: 18 * time.Second})
	want := "eno4: SIOCSIFFLAGS eno4: no such device; eno1: no link (carrier) after 5s; eno2: no DHCP lease: no answer within 10s; eno3: no DHCP lease: no answer within 10s"
	if err == nil || err.Error() != want {
		t.Errorf("err %v\nwant %s", err, want)
	}
	if clock.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) != 18*time.Second {
		t.Errorf("the total bound did not hold: %s", clock)
	}

	e.List = func() ([]Iface, error) { return nil, nil }
	if _, err := e.BringUp(context.Background(), DefaultLimits()); err == nil || !strings.Contains(err.Error(), "no Ethernet interface") {
		t.Errorf("no interfaces: %v", err)
	}
}

func TestSysfsInterfaces(t *testing.T) {
	dir := t.TempDir()
	add := func(name, typ, index, mac, carrier string) {
		state := map[string]string{"1": "up", "0": "down", "": "down"}[carrier]
		testfs.Write(t, dir+"/"+name+"/operstate", state+"\n")
		testfs.Write(t, dir+"/"+name+"/type", typ+"\n")
		testfs.Write(t, dir+"/"+name+"/ifindex", index+"\n")
		testfs.Write(t, dir+"/"+name+"/address", mac+"\n")
		if carrier != "" {
			testfs.Write(t, dir+"/"+name+"/carrier", carrier+"\n")
		}
	}
	add("lo", "772", "1", "00:00:00:00:00:00", "1")
	add("eth1", "1", "3", "52:54:00:00:00:02", "0")
	add("eth0", "1", "2", "52:54:00:00:00:01", "1")
	add("ib0", "32", "4", "80:00:00:00:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:01", "1")
	add("eth2", "1", "5", "52:54:00:00:00:03", "") // down: no readable carrier
	add("eth3", "1", "6", "52:54:00:00:00:04", "1")
	testfs.Write(t, dir+"/eth3/operstate", "unknown\n") // a driver that does not track it
	add("eth4", "1", "7", "52:54:00:00:00:05", "1")
	testfs.Write(t, dir+"/eth4/operstate", "down\n") // carrier, but the queue is not active yet
	testfs.Write(t, dir+"/bonding_masters", "\n")
	got, err := SysfsInterfaces(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, i := range got {
		s = append(s, fmt.Sprintf("%s/%d/%s/%v", i.Name, i.Index, i.MAC, i.Carrier()))
	}
	if want := "eth0/2/52:54:00:00:00:01/true eth1/3/52:54:00:00:00:02/false eth2/5/52:54:00:00:00:03/false eth3/6/52:54:00:00:00:04/true eth4/7/52:54:00:00:00:05/false"; strings.Join(s, " ") != want {
		t.Errorf("got %v\nwant %s", s, want)
	}
}

func TestWriteResolvConf(t *testing.T) {
	p := filepath.Join(t.TempDir(), "etc", "resolv.conf")
	l := &dhcp.Lease{Iface: "eth0", Domain: "lab.example", DNS: []net.IP{net.IPv4(10, 0, 0, 1), net.IPv4(10, 0, 0, 2), net.IPv4(10, 0, 0, 3), net.IPv4(10, 0, 0, 4)}}
	if err := WriteResolvConf(p, l); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	want := "# written by peerboot-init from the DHCP lease on eth0\nsearch lab.example\nnameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n"
	if string(b) != want {
		t.Errorf("got %q\nwant %q", b, want)
	}
}

const helperEnv = "PEERBOOT_NETUP_HELPER"

// clientHelper is the process TestDHCPInNetns runs inside the client namespace (ip
// netns exec, which also mounts that namespace's /sys): the init's real bring-up, then
// a POST through the route it configured. TestMain runs it when helperEnv names the
// interface.
func clientHelper(iface string) error {
	// Never touch the interfaces of a namespace that is not the test's own.
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return err
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	if want := []string{iface, "lo"}; !slices.Equal(names, want) && !slices.Equal(names, []string{"lo", iface}) {
		return fmt.Errorf("this namespace has interfaces %v, want only %v: refusing to run", names, want)
	}
	start := time.Now()
	l, err := Real("/sys/class/net").BringUp(context.Background(), DefaultLimits())
	if err != nil {
		return err
	}
	fmt.Printf("LEASE %s %s %s %v %s %s in %s\n", l.Iface, l.Prefix(), l.Router, l.DNS, l.Server, l.Time, time.Since(start).Round(time.Millisecond))
	req, _ := http.NewRequest(http.MethodPost, os.Getenv("PEERBOOT_NETUP_POST"), bytes.NewReader([]byte(`{"from":"node"}`)))
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("POST: %w", err)
	}
	resp.Body.Close()
	return nil
}

// TestMain runs clientHelper instead of the tests when asked to.
func TestMain(m *testing.M) {
	if iface := os.Getenv(helperEnv); iface != "" {
		if err := clientHelper(iface); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDHCPInNetns: the init's bring-up (nclient4 through node/dhcp, node/rtnl), in a
// namespace of its own, gets a lease over a veth from a DHCP server in a second
// namespace (insomniacslk's server4 with a handler below: netboot's own DHCP server is
// a ProxyDHCP that hands out no addresses), configures address and default route,
// and POSTs through that route to an address that only the route reaches. Needs root
// (ip netns); skipped otherwise. Now and then the first OFFER is lost (the server's
// end of the veth gets its carrier only when the client sets its own end up): the
// client's resend after a second is then part of what is tested.
func TestDHCPInNetns(t *testing.T) {
	testguard.Short(t, "creates network namespaces")
	if os.Getuid() != 0 {
		testguard.Skip(t, "needs root for ip netns (CI runs make test as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testguard.Skip(t, "needs iproute2 (make deps installs it)")
	}
	id := fmt.Sprintf("%d", os.Getpid()%100000)
	srvNS, cliNS, srvIf, cliIf := "pbnus"+id, "pbnuc"+id, "pbnus"+id, "pbnuc"+id
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

	var mu sync.Mutex
	var srvLog []string
	logf := func(s string) { mu.Lock(); srvLog = append(srvLog, s); mu.Unlock() }
	var srv *server4.Server
	var web net.Listener
	inNetns(t, srvNS, func() error {
		var err error
		if srv, err = server4.NewServer(srvIf, &net.UDPAddr{IP: net.IPv4zero, Port: 67}, leaseHandler(logf)); err != nil {
			return err
		}
		web, err = net.Listen("tcp4", "10.234.0.1:0")
		return err
	})
	served := make(chan struct{})
	go func() { srv.Serve(); close(served) }()
	defer web.Close()

	posted := make(chan string, 1)
	go http.Serve(web, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posted <- string(b)
		w.WriteHeader(http.StatusCreated)
	}))

	cmd := exec.Command("ip", "netns", "exec", cliNS, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+cliIf, "PEERBOOT_NETUP_POST=http://"+web.Addr().String()+"/reports")
	out, err := cmd.CombinedOutput()
	srv.Close()
	<-served
	mu.Lock()
	log := slices.Clone(srvLog)
	mu.Unlock()
	if err != nil {
		t.Fatalf("the client in %s: %v\n%s\nserver: %v", cliNS, err, out, log)
	}
	t.Logf("server saw %v; client said %s", log, out)
	if !strings.Contains(string(out), "LEASE "+cliIf+" 10.233.0.50/24 10.233.0.1 [10.233.0.53] 10.233.0.1 1h0m0s in ") {
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
		if p != `{"from":"node"}` {
			t.Errorf("POST got %q", p)
		}
	default:
		t.Error("the server got no POST")
	}
	if !slices.Contains(log, "DISCOVER broadcast peerboot") || !slices.Contains(log, "REQUEST broadcast peerboot 10.233.0.50") {
		t.Errorf("server log %v", log)
	}
}

// leaseHandler answers every DISCOVER with 10.233.0.50/24 and every REQUEST for it
// with an ACK, broadcast to port 68. It notes what it saw.
func leaseHandler(log func(string)) server4.Handler {
	return func(conn net.PacketConn, _ net.Addr, m *dhcpv4.DHCPv4) {
		how := "unicast"
		if m.IsBroadcast() {
			how = "broadcast"
		}
		var typ dhcpv4.MessageType
		switch m.MessageType() {
		case dhcpv4.MessageTypeDiscover:
			typ = dhcpv4.MessageTypeOffer
			log("DISCOVER " + how + " " + m.ClassIdentifier())
		case dhcpv4.MessageTypeRequest:
			typ = dhcpv4.MessageTypeAck
			log("REQUEST " + how + " " + m.ClassIdentifier() + " " + m.RequestedIPAddress().String())
		default:
			return
		}
		srv := net.IPv4(10, 233, 0, 1).To4()
		reply, err := dhcpv4.NewReplyFromRequest(m,
			dhcpv4.WithMessageType(typ),
			dhcpv4.WithYourIP(net.IPv4(10, 233, 0, 50)),
			dhcpv4.WithServerIP(srv),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(srv)),
			dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
			dhcpv4.WithRouter(srv),
			dhcpv4.WithDNS(net.IPv4(10, 233, 0, 53)),
			dhcpv4.WithLeaseTime(3600),
		)
		if err != nil {
			log("reply: " + err.Error())
			return
		}
		conn.WriteTo(reply.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: 68})
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
