package main

// Bringing the node onto the network for the report POST: every Ethernet interface in
// /sys/class/net, in name order, is set up and asked for a DHCP lease; the first lease
// is configured (address, netmask, default route by rtnetlink) and its DNS servers are
// written to /etc/resolv.conf, which Go's own resolver reads, so a report URL may name
// a host. An IP address in the URL is still the better choice: it needs no DNS server
// and says which network the node must reach.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/selftest"
)

// phaseNetwork is the duration entry of the network bring-up.
const phaseNetwork = "network"

// netLimits bound the bring-up: the wait for a link after the interfaces are set up,
// one interface's DHCP exchange, and everything.
type netLimits struct {
	carrier, perIface, total time.Duration
}

func defaultNetLimits() netLimits {
	return netLimits{carrier: 5 * time.Second, perIface: 10 * time.Second, total: 30 * time.Second}
}

// netIface is one candidate interface.
type netIface struct {
	name    string
	index   int
	mac     net.HardwareAddr
	carrier func() bool
}

// netEnv is what the bring-up does to the system; tests substitute it.
type netEnv struct {
	list      func() ([]netIface, error)
	ifup      func(name string) error
	dhcp      func(ifc netIface, deadline time.Time) (*lease, error)
	configure func(l *lease) error
	now       func() time.Time
	sleep     func(time.Duration)
}

// bringUp sets every interface up (so that their links negotiate together), then tries
// them in order; the first lease is configured and returned. The error names what
// happened on each interface.
func (e netEnv) bringUp(lim netLimits) (*lease, error) {
	ifaces, err := e.list()
	if err != nil {
		return nil, err
	}
	if len(ifaces) == 0 {
		return nil, errors.New("no Ethernet interface: the kernel has no driver for the NIC, or its module did not load (see the init.nic findings)")
	}
	start := e.now()
	end := start.Add(lim.total)
	var why []string
	up := ifaces[:0:0]
	for _, ifc := range ifaces {
		if err := e.ifup(ifc.name); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", ifc.name, err))
			continue
		}
		up = append(up, ifc)
	}
	for _, ifc := range up {
		for !ifc.carrier() && e.now().Before(start.Add(lim.carrier)) {
			e.sleep(100 * time.Millisecond)
		}
		if !ifc.carrier() {
			why = append(why, fmt.Sprintf("%s: no link (carrier) after %s", ifc.name, lim.carrier))
			continue
		}
		now := e.now()
		if !now.Before(end) {
			why = append(why, fmt.Sprintf("%s: not tried, the %s bound for the network was spent", ifc.name, lim.total))
			continue
		}
		deadline := now.Add(lim.perIface)
		if deadline.After(end) {
			deadline = end
		}
		l, err := e.dhcp(ifc, deadline)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", ifc.name, err))
			continue
		}
		if err := e.configure(l); err != nil {
			why = append(why, fmt.Sprintf("%s: configuring %s: %v", ifc.name, l.prefix(), err))
			continue
		}
		return l, nil
	}
	return nil, errors.New(strings.Join(why, "; "))
}

// netResult is the bring-up's outcome, handed from its goroutine to the boot.
type netResult struct {
	lease *lease
	err   error
	took  time.Duration
}

// startNetwork runs the bring-up beside the module loading when a report is to be
// POSTed; nil when there is nothing to do. A panic in it becomes its error: a panic
// outside the boot goroutine would end PID 1.
func (m *machine) startNetwork(st *bootState) <-chan netResult {
	if st.plan.reportURL == "" {
		return nil
	}
	ch := make(chan netResult, 1)
	start := m.now()
	go func() {
		var res netResult
		defer func() {
			if p := recover(); p != nil {
				res = netResult{err: fmt.Errorf("peerboot-init bug: the network bring-up panicked: %v", p)}
			}
			res.took = m.now().Sub(start)
			ch <- res
		}()
		res.lease, res.err = m.netUp()
	}()
	return ch
}

// joinNetwork waits for the bring-up and records it: a finding, a duration, one
// console line, and /etc/resolv.conf.
func (m *machine) joinNetwork(st *bootState, ch <-chan netResult) {
	if ch == nil {
		return
	}
	res := <-ch
	st.record.Durations = append(st.record.Durations, selftest.Duration{Phase: phaseNetwork, MS: res.took.Milliseconds()})
	if res.err != nil {
		st.finding(selftest.SevWarn, "init.network", "no network for the report POST: "+res.err.Error(),
			"the report URL needs a DHCP server on one of the node's Ethernet links; the report is still on the console (and the PEERBOOT partition when there is one)")
		m.say("network: no DHCP lease: %v", res.err)
		return
	}
	l := res.lease
	msg := fmt.Sprintf("%s: %s from DHCP server %s, router %s, DNS %s, lease %s", l.iface, l.prefix(), l.server, ipOr(l.router, "none"), ipsOr(l.dns, "none"), l.time)
	if len(l.dns) > 0 {
		if err := writeResolvConf(m.path("/etc/resolv.conf"), l); err != nil {
			msg += fmt.Sprintf("; %v (a report URL with a host name will not resolve)", err)
		}
	}
	st.finding(selftest.SevInfo, "init.network", msg, "")
	m.say("network: %s", msg)
}

func ipOr(ip net.IP, none string) string {
	if ip == nil {
		return none
	}
	return ip.String()
}

func ipsOr(ips []net.IP, none string) string {
	if len(ips) == 0 {
		return none
	}
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, " ")
}

// writeResolvConf lets Go's resolver (the init's POST) find the lease's DNS servers.
func writeResolvConf(path string, l *lease) error {
	var b strings.Builder
	b.WriteString("# written by peerboot-init from the DHCP lease on " + l.iface + "\n")
	if l.domain != "" && !strings.ContainsAny(l.domain, " \t\n") {
		b.WriteString("search " + l.domain + "\n")
	}
	for _, ip := range l.dns[:min(len(l.dns), 3)] { // the resolver reads three
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

// realNetwork is the node's bring-up: sysfs for the interfaces, SIOCSIFFLAGS to set
// them up, AF_PACKET for DHCP and rtnetlink for the configuration.
func realNetwork(sysNet string, ifup func(string) error) func() (*lease, error) {
	return func() (*lease, error) {
		e := netEnv{
			list:      func() ([]netIface, error) { return sysfsInterfaces(sysNet) },
			ifup:      ifup,
			dhcp:      dhcpOn,
			configure: configureLease,
			now:       time.Now,
			sleep:     time.Sleep,
		}
		return e.bringUp(defaultNetLimits())
	}
}

// sysfsInterfaces lists the Ethernet interfaces (type 1, ARPHRD_ETHER) under
// /sys/class/net in name order; loopback, tunnels and InfiniBand are left out.
func sysfsInterfaces(dir string) ([]netIface, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	var out []netIface
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
		out = append(out, netIface{name: name, index: index, mac: mac, carrier: func() bool {
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

// dhcpOn runs a DHCP exchange on one interface.
func dhcpOn(ifc netIface, deadline time.Time) (*lease, error) {
	link, err := openPacketLink(ifc.index)
	if err != nil {
		return nil, err
	}
	defer link.close()
	c := &dhcpClient{link: link, mac: ifc.mac, now: time.Now}
	ack, err := c.acquire(deadline)
	if err != nil {
		return nil, err
	}
	return &lease{iface: ifc.name, ifindex: ifc.index, addr: ack.yiaddr, mask: ack.mask, router: ack.router,
		dns: ack.dns, domain: ack.domain, server: ack.serverID, time: ack.lease}, nil
}

// configureLease adds the address and, when the lease names a router, the default
// route. The lease is not renewed: the node lives for one self-test, and the address
// is configured without a lifetime so that a shell afterwards keeps the network.
func configureLease(l *lease) error {
	nl, err := openRtnl()
	if err != nil {
		return err
	}
	defer nl.close()
	ones, _ := l.mask.Size()
	addr := l.addr.To4()
	bcast := make(net.IP, 4)
	for i := range bcast {
		bcast[i] = addr[i] | ^l.mask[i]
	}
	ifa := make([]byte, unix.SizeofIfAddrmsg)
	ifa[0] = unix.AF_INET
	ifa[1] = byte(ones)
	ifa[3] = unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(ifa[4:], uint32(l.ifindex))
	ifa = rtattr(ifa, unix.IFA_LOCAL, addr)
	ifa = rtattr(ifa, unix.IFA_ADDRESS, addr)
	if ones < 31 {
		ifa = rtattr(ifa, unix.IFA_BROADCAST, bcast)
	}
	if err := nl.do(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, ifa); err != nil {
		return fmt.Errorf("adding %s to %s: %w", l.prefix(), l.iface, err)
	}
	if l.router == nil {
		return nil
	}
	rt := make([]byte, unix.SizeofRtMsg)
	rt[0] = unix.AF_INET
	rt[4] = unix.RT_TABLE_MAIN
	rt[5] = unix.RTPROT_DHCP
	rt[6] = unix.RT_SCOPE_UNIVERSE
	rt[7] = unix.RTN_UNICAST
	subnet := &net.IPNet{IP: addr.Mask(l.mask), Mask: l.mask}
	if !subnet.Contains(l.router) {
		// A router outside the subnet (a /32 lease) is reachable on the link all the same.
		binary.NativeEndian.PutUint32(rt[8:], unix.RTNH_F_ONLINK)
	}
	rt = rtattr(rt, unix.RTA_GATEWAY, l.router.To4())
	rt = rtattr(rt, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(l.ifindex)))
	if err := nl.do(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, rt); err != nil {
		return fmt.Errorf("adding the default route via %s: %w", l.router, err)
	}
	return nil
}

// rtnl is a NETLINK_ROUTE socket for one request at a time.
type rtnl struct {
	fd  int
	seq uint32
}

func openRtnl() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding a netlink socket: %w", err)
	}
	tv := unix.Timeval{Sec: 5}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink socket timeout: %w", err)
	}
	return &rtnl{fd: fd}, nil
}

func (n *rtnl) close() { unix.Close(n.fd) }

// do sends one request with NLM_F_ACK and waits for the kernel's answer to it.
func (n *rtnl) do(typ uint16, flags uint16, body []byte) error {
	n.seq++
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], n.seq)
	msg = append(msg, body...)
	if err := unix.Sendto(n.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 8192)
	for {
		k, _, err := unix.Recvfrom(n.fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("netlink answer: %w", err)
		}
		for b := buf[:k]; len(b) >= unix.SizeofNlMsghdr; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return errors.New("netlink answer: malformed message")
			}
			mtyp, seq := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:])
			if mtyp == unix.NLMSG_ERROR && seq == n.seq {
				if l < unix.SizeofNlMsghdr+4 {
					return errors.New("netlink answer: short error message")
				}
				if errno := int32(binary.NativeEndian.Uint32(b[unix.SizeofNlMsghdr:])); errno != 0 {
					return unix.Errno(-errno)
				}
				return nil
			}
			if nlAlign(l) >= len(b) {
				break
			}
			b = b[nlAlign(l):]
		}
	}
}

// rtattr appends one route attribute, padded to four bytes.
func rtattr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func nlAlign(n int) int { return (n + 3) &^ 3 }
