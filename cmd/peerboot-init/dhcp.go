package main

// The DHCPv4 wire format (RFC 2131, RFC 2132) as the init's client needs it: the
// DISCOVER and REQUEST it sends, inside Ethernet, IPv4 and UDP headers it builds itself
// (the interface has no address yet, so no kernel UDP socket can send them), and a
// strict parser for the OFFER, ACK and NAK that come back. Everything a reply says is
// outside input: every length is checked before it is used.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// DHCP message types (option 53).
const (
	dhcpDiscover = 1
	dhcpOffer    = 2
	dhcpRequest  = 3
	dhcpAck      = 5
	dhcpNak      = 6
)

// DHCP options the client sends or reads.
const (
	optPad          = 0
	optSubnetMask   = 1
	optRouter       = 3
	optDNS          = 6
	optDomainName   = 15
	optRequestedIP  = 50
	optLeaseTime    = 51
	optOverload     = 52
	optMessageType  = 53
	optServerID     = 54
	optParamRequest = 55
	optMessage      = 56
	optMaxSize      = 57
	optVendorClass  = 60
	optClientID     = 61
	optEnd          = 255
)

const (
	bootRequest   = 1
	bootReply     = 2
	dhcpFixedLen  = 236 // op through file, before the magic cookie
	dhcpMinLen    = dhcpFixedLen + 4
	bootpMinLen   = 300 // some servers drop anything shorter than a BOOTP packet
	flagBroadcast = 0x8000
	serverPort    = 67
	clientPort    = 68
	etherTypeIPv4 = 0x0800
	ethHeaderLen  = 14
	ipHeaderLen   = 20
	udpHeaderLen  = 8
	maxDNSServers = 8
)

var magicCookie = []byte{99, 130, 83, 99}

// dhcpRequestList is option 55: what the client asks the server to include.
var dhcpRequestList = []byte{optSubnetMask, optRouter, optDNS, optDomainName, optLeaseTime, optServerID}

// dhcpMsg is what the client puts in one DISCOVER or REQUEST.
type dhcpMsg struct {
	typ         byte
	xid         uint32
	secs        uint16
	mac         net.HardwareAddr // 6 bytes
	requestedIP net.IP           // REQUEST only
	serverID    net.IP           // REQUEST only
}

// marshal lays out a BOOTP request with the DHCP options; broadcast flag set, since a
// client without an address cannot be sure to receive a unicast reply through every
// relay and driver.
func (m dhcpMsg) marshal() []byte {
	b := make([]byte, dhcpFixedLen, bootpMinLen)
	b[0], b[1], b[2] = bootRequest, 1, 6 // op, htype Ethernet, hlen
	binary.BigEndian.PutUint32(b[4:], m.xid)
	binary.BigEndian.PutUint16(b[8:], m.secs)
	binary.BigEndian.PutUint16(b[10:], flagBroadcast)
	copy(b[28:44], m.mac)
	b = append(b, magicCookie...)
	b = append(b, optMessageType, 1, m.typ)
	b = append(b, optClientID, 7, 1) // hardware type 1 + MAC
	b = append(b, m.mac[:6]...)
	b = append(b, optMaxSize, 2, 0x05, 0xdc) // 1500: the frame the client reads
	b = append(b, optVendorClass, byte(len("peerboot")))
	b = append(b, "peerboot"...)
	b = append(b, optParamRequest, byte(len(dhcpRequestList)))
	b = append(b, dhcpRequestList...)
	if ip := m.requestedIP.To4(); ip != nil {
		b = append(b, optRequestedIP, 4)
		b = append(b, ip...)
	}
	if ip := m.serverID.To4(); ip != nil {
		b = append(b, optServerID, 4)
		b = append(b, ip...)
	}
	b = append(b, optEnd)
	for len(b) < bootpMinLen {
		b = append(b, optPad)
	}
	return b
}

// dhcpReply is a parsed OFFER, ACK or NAK.
type dhcpReply struct {
	typ      byte
	xid      uint32
	yiaddr   net.IP
	serverID net.IP
	mask     net.IPMask // nil: the server sent none
	router   net.IP     // the first router, nil if none
	dns      []net.IP
	domain   string
	lease    time.Duration // 0: the server sent none
	message  string        // option 56, a NAK's reason
}

// Errors a reply can be dropped with; the client waits for the next one.
var (
	errNotForUs   = errors.New("not a reply to this client")
	errBadMessage = errors.New("malformed DHCP message")
)

// parseDHCP reads a DHCP reply strictly: a BOOTP reply for Ethernet with the magic
// cookie, options well formed up to an End, the client's xid and MAC, a known message
// type, and for an OFFER or ACK a usable address and a server identifier. Option
// overload (52) is not honoured: options in the sname and file fields are ignored.
func parseDHCP(b []byte, xid uint32, mac net.HardwareAddr) (*dhcpReply, error) {
	if len(b) < dhcpMinLen {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", errBadMessage, len(b), dhcpMinLen)
	}
	if b[0] != bootReply || b[1] != 1 || b[2] != 6 {
		return nil, fmt.Errorf("%w: op %d htype %d hlen %d, want a BOOTP reply for Ethernet", errBadMessage, b[0], b[1], b[2])
	}
	if !bytes.Equal(b[dhcpFixedLen:dhcpMinLen], magicCookie) {
		return nil, fmt.Errorf("%w: no DHCP magic cookie", errBadMessage)
	}
	r := &dhcpReply{xid: binary.BigEndian.Uint32(b[4:])}
	if r.xid != xid || len(mac) != 6 || !bytes.Equal(b[28:34], mac) {
		return nil, fmt.Errorf("%w: xid %#08x for %s", errNotForUs, r.xid, net.HardwareAddr(b[28:34]))
	}
	opts, err := parseOptions(b[dhcpMinLen:])
	if err != nil {
		return nil, err
	}
	t, ok := opts[optMessageType]
	if !ok || len(t) != 1 {
		return nil, fmt.Errorf("%w: no message type", errBadMessage)
	}
	r.typ = t[0]
	if v, ok := opts[optMessage]; ok {
		r.message = printable(v)
	}
	if v, ok := opts[optServerID]; ok {
		if len(v) != 4 {
			return nil, fmt.Errorf("%w: server identifier of %d bytes", errBadMessage, len(v))
		}
		r.serverID = net.IP(bytes.Clone(v))
	}
	switch r.typ {
	case dhcpNak:
		return r, nil
	case dhcpOffer, dhcpAck:
	default:
		return nil, fmt.Errorf("%w: message type %d is not OFFER, ACK or NAK", errNotForUs, r.typ)
	}
	if r.serverID == nil {
		return nil, fmt.Errorf("%w: no server identifier", errBadMessage)
	}
	r.yiaddr = net.IP(bytes.Clone(b[16:20]))
	if !usableHost(r.yiaddr) {
		return nil, fmt.Errorf("%w: offered address %s is not a host address", errBadMessage, r.yiaddr)
	}
	if v, ok := opts[optSubnetMask]; ok {
		m := net.IPMask(bytes.Clone(v))
		if ones, bits := m.Size(); len(v) != 4 || bits != 32 || ones == 0 {
			return nil, fmt.Errorf("%w: subnet mask %x", errBadMessage, v)
		}
		r.mask = m
	}
	if v, ok := opts[optRouter]; ok {
		if len(v) == 0 || len(v)%4 != 0 {
			return nil, fmt.Errorf("%w: router option of %d bytes", errBadMessage, len(v))
		}
		if ip := net.IP(bytes.Clone(v[:4])); usableHost(ip) {
			r.router = ip
		}
	}
	if v, ok := opts[optDNS]; ok {
		if len(v) == 0 || len(v)%4 != 0 {
			return nil, fmt.Errorf("%w: DNS server option of %d bytes", errBadMessage, len(v))
		}
		for i := 0; i < len(v) && len(r.dns) < maxDNSServers; i += 4 {
			if ip := net.IP(bytes.Clone(v[i : i+4])); usableHost(ip) {
				r.dns = append(r.dns, ip)
			}
		}
	}
	if v, ok := opts[optDomainName]; ok {
		r.domain = printable(v)
	}
	if v, ok := opts[optLeaseTime]; ok {
		if len(v) != 4 {
			return nil, fmt.Errorf("%w: lease time of %d bytes", errBadMessage, len(v))
		}
		r.lease = time.Duration(binary.BigEndian.Uint32(v)) * time.Second // 0xffffffff is "infinite": 136 years will do
	}
	return r, nil
}

// parseOptions splits the options field. A code that appears more than once is
// concatenated (RFC 3396); the field must end with End, and only Pad may follow it.
func parseOptions(b []byte) (map[byte][]byte, error) {
	opts := map[byte][]byte{}
	for i := 0; i < len(b); {
		code := b[i]
		switch code {
		case optPad:
			i++
			continue
		case optEnd:
			for _, c := range b[i+1:] {
				if c != optPad {
					return nil, fmt.Errorf("%w: data after the End option", errBadMessage)
				}
			}
			return opts, nil
		}
		if i+2 > len(b) || i+2+int(b[i+1]) > len(b) {
			return nil, fmt.Errorf("%w: option %d runs past the end of the packet", errBadMessage, code)
		}
		n := int(b[i+1])
		opts[code] = append(opts[code], b[i+2:i+2+n]...)
		i += 2 + n
	}
	return nil, fmt.Errorf("%w: options end without an End option", errBadMessage)
}

// usableHost: not 0.0.0.0/8, loopback, multicast, or the limited broadcast.
func usableHost(ip net.IP) bool {
	ip4 := ip.To4()
	return ip4 != nil && ip4[0] != 0 && !ip4.IsLoopback() && !ip4.IsMulticast() && !ip4.Equal(net.IPv4bcast)
}

// printable keeps a server's text to 64 printable ASCII characters for the report.
func printable(b []byte) string {
	var s []byte
	for _, c := range b {
		if len(s) == 64 {
			break
		}
		if c >= 0x20 && c < 0x7f {
			s = append(s, c)
		}
	}
	return string(s)
}

// buildFrame wraps a DHCP message from 0.0.0.0:68 to 255.255.255.255:67 in Ethernet
// (broadcast, from mac), IPv4 and UDP headers, with both checksums.
func buildFrame(mac net.HardwareAddr, id uint16, payload []byte) []byte {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	return udpFrame(bcast, mac, net.IPv4zero, net.IPv4bcast, clientPort, serverPort, id, payload)
}

// udpFrame lays out Ethernet, IPv4 (no options, TTL 64) and UDP headers around payload.
func udpFrame(dst, src net.HardwareAddr, srcIP, dstIP net.IP, srcPort, dstPort, id uint16, payload []byte) []byte {
	udpLen := udpHeaderLen + len(payload)
	ipLen := ipHeaderLen + udpLen
	f := make([]byte, ethHeaderLen+ipLen)
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:], etherTypeIPv4)

	ip := f[ethHeaderLen : ethHeaderLen+ipHeaderLen]
	ip[0] = 0x45 // version 4, 5 words
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	binary.BigEndian.PutUint16(ip[4:], id)
	ip[8] = 64 // TTL
	ip[9] = 17 // UDP
	copy(ip[12:16], srcIP.To4())
	copy(ip[16:20], dstIP.To4())
	binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))

	udp := f[ethHeaderLen+ipHeaderLen:]
	binary.BigEndian.PutUint16(udp[0:], srcPort)
	binary.BigEndian.PutUint16(udp[2:], dstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	copy(udp[udpHeaderLen:], payload)
	sum := checksum(udp, pseudoHeaderSum(ip[12:16], ip[16:20], udpLen))
	if sum == 0 {
		sum = 0xffff // 0 means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(udp[6:], sum)
	return f
}

// parseFrame returns the UDP payload of an Ethernet frame that carries IPv4/UDP from
// port 67 to port 68 (a DHCP reply), or errNotForUs for any other frame.
func parseFrame(f []byte, udpSumPending bool) ([]byte, error) {
	return parseUDP(f, udpSumPending, serverPort, clientPort)
}

// parseUDP returns the payload of an IPv4/UDP frame between the given ports, checking
// the IP header checksum and, unless the kernel says it was not computed yet (checksum
// offload on the sender's side of a veth), the UDP one.
func parseUDP(f []byte, udpSumPending bool, srcPort, dstPort uint16) ([]byte, error) {
	if len(f) < ethHeaderLen+ipHeaderLen+udpHeaderLen {
		return nil, errNotForUs
	}
	if binary.BigEndian.Uint16(f[12:]) != etherTypeIPv4 {
		return nil, errNotForUs
	}
	p := f[ethHeaderLen:]
	ihl := int(p[0]&0x0f) * 4
	if p[0]>>4 != 4 || ihl < ipHeaderLen || len(p) < ihl+udpHeaderLen {
		return nil, errNotForUs
	}
	if p[9] != 17 {
		return nil, errNotForUs
	}
	total := int(binary.BigEndian.Uint16(p[2:]))
	if total < ihl+udpHeaderLen || total > len(p) {
		return nil, fmt.Errorf("%w: IP length %d in a %d-byte packet", errBadMessage, total, len(p))
	}
	if binary.BigEndian.Uint16(p[6:])&0x3fff != 0 {
		return nil, errNotForUs // a fragment: no DHCP server fragments a reply
	}
	if checksum(p[:ihl], 0) != 0 {
		return nil, fmt.Errorf("%w: bad IP header checksum", errBadMessage)
	}
	p = p[:total]
	udp := p[ihl:]
	if binary.BigEndian.Uint16(udp[0:]) != srcPort || binary.BigEndian.Uint16(udp[2:]) != dstPort {
		return nil, errNotForUs
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen < udpHeaderLen || ulen > len(udp) {
		return nil, fmt.Errorf("%w: UDP length %d in a %d-byte datagram", errBadMessage, ulen, len(udp))
	}
	udp = udp[:ulen]
	if binary.BigEndian.Uint16(udp[6:]) != 0 && !udpSumPending && checksum(udp, pseudoHeaderSum(p[12:16], p[16:20], ulen)) != 0 {
		return nil, fmt.Errorf("%w: bad UDP checksum", errBadMessage)
	}
	return udp[udpHeaderLen:], nil
}

// pseudoHeaderSum is the unfolded sum of the IPv4 pseudo header for UDP.
func pseudoHeaderSum(src, dst []byte, udpLen int) uint32 {
	var s uint32
	for i := 0; i < 4; i += 2 {
		s += uint32(binary.BigEndian.Uint16(src[i:])) + uint32(binary.BigEndian.Uint16(dst[i:]))
	}
	return s + 17 + uint32(udpLen)
}

// checksum is the Internet checksum (RFC 1071) of b, starting from an unfolded sum.
// Over data that includes its own correct checksum it is 0.
func checksum(b []byte, sum uint32) uint16 {
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
