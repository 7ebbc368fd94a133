package dhcp

import (
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

func msg(t testing.TB, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4(10, 0, 2, 15))}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var (
	srvID  = dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 2, 2)))
	mask24 = dhcpv4.WithNetmask(net.CIDRMask(24, 32))
)

func TestFromExchange(t *testing.T) {
	for _, tc := range []struct {
		name       string
		offer, ack []dhcpv4.Modifier
		want       string // "prefix router dns lease" or "error: ..."
	}{
		{"full ACK", nil, []dhcpv4.Modifier{srvID, mask24, dhcpv4.WithRouter(net.IPv4(10, 0, 2, 2)), dhcpv4.WithDNS(net.IPv4(10, 0, 2, 3)), dhcpv4.WithLeaseTime(86400)},
			"10.0.2.15/24 10.0.2.2 [10.0.2.3] 24h0m0s"},
		{"ACK leaves out what the OFFER said", []dhcpv4.Modifier{mask24, dhcpv4.WithRouter(net.IPv4(10, 0, 2, 1)), dhcpv4.WithDNS(net.IPv4(10, 0, 2, 9))}, []dhcpv4.Modifier{srvID},
			"10.0.2.15/24 10.0.2.1 [10.0.2.9] 0s"},
		{"no mask anywhere: the class default", nil, []dhcpv4.Modifier{srvID}, "10.0.2.15/8 <nil> [] 0s"},
		{"unusable router and DNS dropped", nil, []dhcpv4.Modifier{srvID, mask24, dhcpv4.WithRouter(net.IPv4zero), dhcpv4.WithDNS(net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 2, 3))},
			"10.0.2.15/24 <nil> [10.0.2.3] 0s"},
		{"no server identifier", nil, []dhcpv4.Modifier{mask24}, "error: DHCP ACK without a server identifier"},
		{"zero address", nil, []dhcpv4.Modifier{srvID, dhcpv4.WithYourIP(net.IPv4zero)}, "error: DHCP server offered 0.0.0.0, which is not a host address"},
		{"broadcast address", nil, []dhcpv4.Modifier{srvID, dhcpv4.WithYourIP(net.IPv4bcast)}, "error: DHCP server offered 255.255.255.255, which is not a host address"},
		{"a mask that is none", nil, []dhcpv4.Modifier{srvID, dhcpv4.WithNetmask(net.IPv4Mask(255, 0, 255, 0))}, "error: DHCP subnet mask ff00ff00 is not one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := FromExchange(msg(t, tc.offer...), msg(t, tc.ack...))
			var got string
			if err != nil {
				got = "error: " + err.Error()
			} else {
				got = l.Prefix() + " " + ipString(l.Router) + " " + ipsString(l.DNS) + " " + l.Time.String()
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func ipString(ip net.IP) string {
	if ip == nil {
		return "<nil>"
	}
	return ip.String()
}

func ipsString(ips []net.IP) string {
	s := "["
	for i, ip := range ips {
		if i > 0 {
			s += " "
		}
		s += ip.String()
	}
	return s + "]"
}

// A server's reply is outside bytes: whatever nclient4's parser accepts, FromExchange
// returns a lease of a host address with a real mask and at most maxDNS servers, or an
// error, and never panics.
func FuzzFromExchange(f *testing.F) {
	ack := msg(f, srvID, mask24, dhcpv4.WithRouter(net.IPv4(10, 0, 2, 2)), dhcpv4.WithDNS(net.IPv4(10, 0, 2, 3)), dhcpv4.WithLeaseTime(60))
	f.Add(ack.ToBytes())
	f.Add(msg(f).ToBytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		l, err := FromExchange(nil, m)
		if err != nil {
			return
		}
		if ones, bits := l.Mask.Size(); !usableHost(l.Addr) || l.Server == nil || bits != 32 || ones == 0 || len(l.DNS) > maxDNS || len(l.Domain) > 64 || l.Time < 0 || l.Time > 137*365*24*time.Hour {
			t.Fatalf("lease %+v", l)
		}
	})
}
