// Package dhcp gets one DHCPv4 lease on an unconfigured Ethernet interface for the
// node's report POST. The exchange (DISCOVER, OFFER, REQUEST, ACK over a raw packet
// socket, resends with backoff) is github.com/insomniacslk/dhcp's nclient4; this
// package adds what the init needs around it: a bound on the whole exchange, a retry
// after a NAK, and a Lease checked and worded for the report. It writes nothing on the
// host: configuring the interface is the caller's (u-root's dhclient, which writes the
// global /etc/resolv.conf even from a namespace, is what it does not do).
package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

// Lease is what an exchange got, and what the init configures.
type Lease struct {
	Iface  string
	Index  int
	Addr   net.IP
	Mask   net.IPMask
	Router net.IP // nil: no default route
	DNS    []net.IP
	Domain string
	Server net.IP // the DHCP server identifier
	Time   time.Duration
}

// Prefix is the address in CIDR notation, 10.0.2.15/24.
func (l *Lease) Prefix() string {
	ones, _ := l.Mask.Size()
	return fmt.Sprintf("%s/%d", l.Addr, ones)
}

// firstWait is the wait for a reply after the first send; nclient4 doubles it after
// each silent try (1 s, 2 s, 4 s, ...) until ctx ends. RFC 2131 asks for about 4 s; a
// node that waits for its report to leave wants an answer sooner, and a lost packet
// on a LAN is rare.
const firstWait = time.Second

// maxNaks bounds how often a server may refuse a REQUEST before the interface is given up.
const maxNaks = 3

// maxDNS bounds the DNS servers kept from a lease.
const maxDNS = 8

// Acquire runs the exchange on the interface named iface until an ACK or ctx's end.
func Acquire(ctx context.Context, iface string) (*Lease, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	c, err := nclient4.New(iface, nclient4.WithTimeout(firstWait), nclient4.WithRetry(-1))
	if err != nil {
		return nil, fmt.Errorf("opening a packet socket on %s (the kernel needs CONFIG_PACKET): %w", iface, err)
	}
	defer c.Close()
	start := time.Now()
	// The broadcast flag: a relay or a driver may not deliver a unicast reply to a
	// client without an address. The vendor class names us in the server's log.
	mods := []dhcpv4.Modifier{dhcpv4.WithBroadcast(true), dhcpv4.WithOption(dhcpv4.OptClassIdentifier("peerboot"))}
	for naks := 0; ; {
		lease, err := c.Request(ctx, mods...)
		var nak *nclient4.ErrNak
		switch {
		case errors.As(err, &nak):
			if naks++; naks >= maxNaks {
				return nil, fmt.Errorf("DHCP server %s refused %s %d times (NAK: %s)", nak.Offer.ServerIdentifier(), nak.Offer.YourIPAddr, naks, orNone(nak.Nak.Message()))
			}
			continue
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("no DHCP lease: no answer within %s", time.Since(start).Round(100*time.Millisecond))
		case err != nil:
			return nil, fmt.Errorf("no DHCP lease: %w", err)
		}
		l, err := FromExchange(lease.Offer, lease.ACK)
		if err != nil {
			return nil, err
		}
		l.Iface, l.Index = iface, ifc.Index
		return l, nil
	}
}

// FromExchange reads the lease out of an OFFER and its ACK, strictly: a host address, a
// server identifier, a mask that is one (the OFFER's or the class default when the ACK
// has none, as servers may leave out of the ACK what they said in the OFFER), host
// addresses for router and DNS servers. What a server says is outside input.
func FromExchange(offer, ack *dhcpv4.DHCPv4) (*Lease, error) {
	l := &Lease{Addr: ack.YourIPAddr.To4(), Server: ack.ServerIdentifier().To4(), Domain: printable(ack.DomainName())}
	if !usableHost(l.Addr) {
		return nil, fmt.Errorf("DHCP server offered %s, which is not a host address", ack.YourIPAddr)
	}
	if l.Server == nil {
		return nil, errors.New("DHCP ACK without a server identifier")
	}
	for _, m := range []*dhcpv4.DHCPv4{ack, offer} {
		if m == nil || l.Mask != nil || m.Options.Get(dhcpv4.OptionSubnetMask) == nil {
			continue
		}
		mask := m.SubnetMask()
		if ones, bits := mask.Size(); len(mask) != 4 || bits != 32 || ones == 0 {
			return nil, fmt.Errorf("DHCP subnet mask %x is not one", []byte(mask))
		}
		l.Mask = mask
	}
	if l.Mask == nil {
		l.Mask = l.Addr.DefaultMask()
	}
	for _, m := range []*dhcpv4.DHCPv4{ack, offer} {
		if m == nil {
			continue
		}
		if rs := m.Router(); l.Router == nil && len(rs) > 0 && usableHost(rs[0]) {
			l.Router = rs[0].To4()
		}
		if l.DNS == nil {
			for _, ip := range m.DNS() {
				if usableHost(ip) && len(l.DNS) < maxDNS {
					l.DNS = append(l.DNS, ip.To4())
				}
			}
		}
	}
	l.Time = ack.IPAddressLeaseTime(0) // 0xffffffff is "infinite": 136 years will do
	return l, nil
}

// usableHost: IPv4, and not 0.0.0.0/8, loopback, multicast or the limited broadcast.
func usableHost(ip net.IP) bool {
	ip4 := ip.To4()
	return ip4 != nil && ip4[0] != 0 && !ip4.IsLoopback() && !ip4.IsMulticast() && !ip4.Equal(net.IPv4bcast)
}

// printable keeps a server's text to 64 printable ASCII characters for the report.
func printable(s string) string {
	var b []byte
	for i := 0; i < len(s) && len(b) < 64; i++ {
		if s[i] >= 0x20 && s[i] < 0x7f {
			b = append(b, s[i])
		}
	}
	return string(b)
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}
