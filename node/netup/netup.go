// Package netup brings the node onto the network for the report POST: every Ethernet
// interface in /sys/class/net, in name order, is set up and asked for a DHCP lease
// (node/dhcp); the first lease is configured (address, netmask, default route by
// node/rtnl). WriteResolvConf then lets Go's own resolver find the lease's DNS
// servers, so a report URL may name a host. An IP address in the URL is still the
// better choice: it needs no DNS server and says which network the node must reach.
package netup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/node/dhcp"
	"github.com/peerboot/peerboot/node/rtnl"
)

// Limits bound the bring-up: the wait for a link after the interfaces are set up,
// one interface's DHCP exchange, and everything.
type Limits struct {
	Carrier, PerIface, Total time.Duration
}

// DefaultLimits are the node's.
func DefaultLimits() Limits {
	return Limits{Carrier: 5 * time.Second, PerIface: 10 * time.Second, Total: 30 * time.Second}
}

// Iface is one candidate interface.
type Iface struct {
	Name    string
	Index   int
	MAC     net.HardwareAddr
	Carrier func() bool
}

// Env is what the bring-up does to the system; tests substitute it.
type Env struct {
	List      func() ([]Iface, error)
	Up        func(name string) error
	DHCP      func(ctx context.Context, ifc Iface) (*dhcp.Lease, error)
	Configure func(l *dhcp.Lease) error
	Now       func() time.Time
	Sleep     func(time.Duration)
}

// BringUp sets every interface up (so that their links negotiate together), then tries
// them in order; the first lease is configured and returned. The error names what
// happened on each interface.
func (e Env) BringUp(ctx context.Context, lim Limits) (*dhcp.Lease, error) {
	ifaces, err := e.List()
	if err != nil {
		return nil, err
	}
	if len(ifaces) == 0 {
		return nil, errors.New("no Ethernet interface: the kernel has no driver for the NIC, or its module did not load (see the init.nic findings)")
	}
	start := e.Now()
	end := start.Add(lim.Total)
	var why []string
	up := ifaces[:0:0]
	for _, ifc := range ifaces {
		if err := e.Up(ifc.Name); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", ifc.Name, err))
			continue
		}
		up = append(up, ifc)
	}
	for _, ifc := range up {
		for !ifc.Carrier() && e.Now().Before(start.Add(lim.Carrier)) {
			e.Sleep(100 * time.Millisecond)
		}
		if !ifc.Carrier() {
			why = append(why, fmt.Sprintf("%s: no link (carrier) after %s", ifc.Name, lim.Carrier))
			continue
		}
		now := e.Now()
		if !now.Before(end) {
			why = append(why, fmt.Sprintf("%s: not tried, the %s bound for the network was spent", ifc.Name, lim.Total))
			continue
		}
		deadline := min(now.Add(lim.PerIface).UnixNano(), end.UnixNano())
		dctx, cancel := context.WithDeadline(ctx, time.Unix(0, deadline))
		l, err := e.DHCP(dctx, ifc)
		cancel()
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", ifc.Name, err))
			continue
		}
		if err := e.Configure(l); err != nil {
			why = append(why, fmt.Sprintf("%s: configuring %s: %v", ifc.Name, l.Prefix(), err))
			continue
		}
		return l, nil
	}
	return nil, errors.New(strings.Join(why, "; "))
}

// Real is the node's bring-up: sysfs (sysNet, /sys/class/net) for the interfaces,
// SIOCSIFFLAGS to set them up, node/dhcp for the lease and node/rtnl to configure it.
func Real(sysNet string) Env {
	return Env{
		List:      func() ([]Iface, error) { return SysfsInterfaces(sysNet) },
		Up:        LinkUp,
		DHCP:      func(ctx context.Context, ifc Iface) (*dhcp.Lease, error) { return dhcp.Acquire(ctx, ifc.Name) },
		Configure: Configure,
		Now:       time.Now,
		Sleep:     time.Sleep,
	}
}

// SysfsInterfaces lists the Ethernet interfaces (type 1, ARPHRD_ETHER) under dir
// (/sys/class/net) in name order; loopback, tunnels and InfiniBand are left out.
func SysfsInterfaces(dir string) ([]Iface, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	var out []Iface
	for _, ent := range ents {
		name := ent.Name()
		read := func(f string) string {
			b, _ := os.ReadFile(filepath.Join(dir, name, f))
			return strings.TrimSpace(string(b))
		}
		if name == "lo" || read("type") != "1" {
			continue
		}
		index, err := strconv.Atoi(read("ifindex"))
		if err != nil || index <= 0 {
			continue
		}
		mac, err := net.ParseMAC(read("address"))
		if err != nil || len(mac) != 6 {
			continue
		}
		carrier, operstate := filepath.Join(dir, name, "carrier"), filepath.Join(dir, name, "operstate")
		out = append(out, Iface{Name: name, Index: index, MAC: mac, Carrier: func() bool {
			// carrier is EINVAL while the interface is down. operstate turns "up" once
			// the kernel has also activated the transmit queue; until then frames are
			// dropped. A driver that does not track it says "unknown".
			c, err := os.ReadFile(carrier)
			o, _ := os.ReadFile(operstate)
			state := strings.TrimSpace(string(o))
			return err == nil && strings.TrimSpace(string(c)) == "1" && (state == "up" || state == "unknown")
		}})
	}
	return out, nil
}

// Configure adds the lease's address and, when it names a router, the default route.
// The lease is not renewed: the node lives for one self-test.
func Configure(l *dhcp.Lease) error {
	nl, err := rtnl.Open()
	if err != nil {
		return err
	}
	defer nl.Close()
	if err := nl.AddAddr(l.Index, l.Addr, l.Mask); err != nil {
		return fmt.Errorf("adding %s to %s: %w", l.Prefix(), l.Iface, err)
	}
	if l.Router == nil {
		return nil
	}
	subnet := &net.IPNet{IP: l.Addr.Mask(l.Mask), Mask: l.Mask}
	if err := nl.AddDefaultRoute(l.Index, l.Router, !subnet.Contains(l.Router)); err != nil {
		return fmt.Errorf("adding the default route via %s: %w", l.Router, err)
	}
	return nil
}

// WriteResolvConf writes the lease's DNS servers to path (the node's /etc/resolv.conf),
// which Go's resolver (the init's POST) reads.
func WriteResolvConf(path string, l *dhcp.Lease) error {
	var b strings.Builder
	b.WriteString("# written by peerboot-init from the DHCP lease on " + l.Iface + "\n")
	if l.Domain != "" && !strings.ContainsAny(l.Domain, " \t\n") {
		b.WriteString("search " + l.Domain + "\n")
	}
	for _, ip := range l.DNS[:min(len(l.DNS), 3)] { // the resolver reads three
		b.WriteString("nameserver " + ip.String() + "\n")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// LinkUp sets IFF_UP on an interface with SIOCSIFFLAGS. For lo the kernel then adds
// 127.0.0.1/8 and ::1 itself; an Ethernet interface gets its address from DHCP.
func LinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS %s: %w", name, err)
	}
	return nil
}
