package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	testMAC   = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	serverMAC = net.HardwareAddr{0x52, 0x55, 0x0a, 0x00, 0x02, 0x02}
)

const testXID = 0x1badcafe

func opt(code byte, data ...byte) []byte { return append([]byte{code, byte(len(data))}, data...) }

func ip4(s string) []byte { return net.ParseIP(s).To4() }

// dhcpPacket is a handcrafted server message: a BOOTP reply for testMAC with xid, the
// given yiaddr, message type typ, then the raw option bytes, then End.
func dhcpPacket(typ byte, xid uint32, yiaddr string, opts ...[]byte) []byte {
	b := make([]byte, dhcpFixedLen)
	b[0], b[1], b[2] = bootReply, 1, 6
	binary.BigEndian.PutUint32(b[4:], xid)
	copy(b[16:20], ip4(yiaddr))
	copy(b[28:], testMAC)
	b = append(b, magicCookie...)
	b = append(b, opt(optMessageType, typ)...)
	for _, o := range opts {
		b = append(b, o...)
	}
	return append(b, optEnd)
}

// offerOpts is what a typical server sends with an OFFER or ACK.
func offerOpts() [][]byte {
	return [][]byte{
		opt(optServerID, ip4("10.0.2.2")...),
		opt(optSubnetMask, 255, 255, 255, 0),
		opt(optRouter, ip4("10.0.2.2")...),
		opt(optDNS, append(ip4("10.0.2.3"), ip4("10.0.2.4")...)...),
		opt(optLeaseTime, 0, 1, 0x51, 0x80), // 86400
		opt(optDomainName, []byte("rack.example")...),
	}
}

func TestParseDHCP(t *testing.T) {
	good := dhcpPacket(dhcpOffer, testXID, "10.0.2.15", offerOpts()...)
	overload := dhcpPacket(dhcpAck, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...), opt(optOverload, 3))
	copy(overload[44:], append(opt(optRouter, ip4("10.0.2.9")...), optEnd))  // sname
	copy(overload[108:], append(opt(optSubnetMask, 255, 255, 0, 0), optEnd)) // file
	manyDNS := bytes.Repeat(ip4("10.0.2.3"), 20)
	tests := []struct {
		name  string
		pkt   []byte
		xid   uint32
		check func(t *testing.T, r *dhcpReply)
		err   error // errNotForUs or errBadMessage
		msg   string
	}{
		{name: "OFFER", pkt: good, check: func(t *testing.T, r *dhcpReply) {
			if r.typ != dhcpOffer || r.yiaddr.String() != "10.0.2.15" || r.serverID.String() != "10.0.2.2" || r.mask.String() != "ffffff00" ||
				r.router.String() != "10.0.2.2" || ipsOr(r.dns, "") != "10.0.2.3 10.0.2.4" || r.lease != 24*time.Hour || r.domain != "rack.example" {
				t.Errorf("%+v", r)
			}
		}},
		{name: "ACK", pkt: dhcpPacket(dhcpAck, testXID, "10.0.2.15", offerOpts()...), check: func(t *testing.T, r *dhcpReply) {
			if r.typ != dhcpAck || r.yiaddr.String() != "10.0.2.15" {
				t.Errorf("%+v", r)
			}
		}},
		{name: "ACK without mask, router or lease", pkt: dhcpPacket(dhcpAck, testXID, "192.168.7.20", opt(optServerID, ip4("192.168.7.1")...)), check: func(t *testing.T, r *dhcpReply) {
			if r.mask != nil || r.router != nil || r.dns != nil || r.lease != 0 {
				t.Errorf("%+v", r)
			}
		}},
		{name: "NAK", pkt: dhcpPacket(dhcpNak, testXID, "0.0.0.0", opt(optServerID, ip4("10.0.2.2")...), opt(optMessage, []byte("wrong network\x07")...)), check: func(t *testing.T, r *dhcpReply) {
			if r.typ != dhcpNak || r.message != "wrong network" || r.yiaddr != nil {
				t.Errorf("%+v", r)
			}
		}},
		{name: "split option concatenated (RFC 3396)", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", append(offerOpts()[:3], opt(optDNS, ip4("1.1.1.1")...), opt(optDNS, ip4("8.8.8.8")...))...),
			check: func(t *testing.T, r *dhcpReply) {
				if ipsOr(r.dns, "") != "1.1.1.1 8.8.8.8" {
					t.Errorf("dns %v", r.dns)
				}
			}},
		{name: "DNS list bounded", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...), append([]byte{optDNS, 80}, manyDNS...)),
			check: func(t *testing.T, r *dhcpReply) {
				if len(r.dns) != maxDNSServers {
					t.Errorf("%d DNS servers", len(r.dns))
				}
			}},
		{name: "option overload ignored", pkt: overload, check: func(t *testing.T, r *dhcpReply) {
			if r.router != nil || r.mask != nil {
				t.Errorf("options from sname/file were read: %+v", r)
			}
		}},
		{name: "wrong xid", pkt: good, xid: testXID + 1, err: errNotForUs},
		{name: "another client's MAC", pkt: func() []byte { b := bytes.Clone(good); b[33]++; return b }(), err: errNotForUs},
		{name: "DISCOVER type in a reply", pkt: dhcpPacket(dhcpDiscover, testXID, "0.0.0.0"), err: errNotForUs, msg: "message type 1"},
		{name: "INFORM type in a reply", pkt: dhcpPacket(8, testXID, "10.0.2.15", offerOpts()...), err: errNotForUs},
		{name: "short", pkt: good[:239], err: errBadMessage, msg: "239 bytes"},
		{name: "BOOTP request", pkt: func() []byte { b := bytes.Clone(good); b[0] = bootRequest; return b }(), err: errBadMessage},
		{name: "not Ethernet", pkt: func() []byte { b := bytes.Clone(good); b[1] = 6; return b }(), err: errBadMessage},
		{name: "no magic cookie", pkt: func() []byte { b := bytes.Clone(good); b[dhcpFixedLen] = 0; return b }(), err: errBadMessage, msg: "cookie"},
		{name: "truncated option", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...))[:dhcpMinLen+3+4], err: errBadMessage, msg: "option 54 runs past"},
		{name: "option length past the end", pkt: append(dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...))[:dhcpMinLen+3+6], optRouter, 8, 10, 0, 2, 2), err: errBadMessage, msg: "option 3 runs past"},
		{name: "no End", pkt: func() []byte { b := good[:len(good)-1]; return b }(), err: errBadMessage, msg: "without an End"},
		{name: "data after End", pkt: append(bytes.Clone(good), 0, 0, optRouter), err: errBadMessage, msg: "after the End"},
		{name: "no message type", pkt: func() []byte {
			b := bytes.Clone(good)
			b[dhcpMinLen] = optPad
			b[dhcpMinLen+1] = optPad
			b[dhcpMinLen+2] = optPad
			return b
		}(), err: errBadMessage, msg: "no message type"},
		{name: "message type of two bytes", pkt: append(append(bytes.Clone(good[:dhcpMinLen]), optMessageType, 2, dhcpOffer, 0), append(offerOpts()[0], optEnd)...), err: errBadMessage},
		{name: "OFFER without server identifier", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", offerOpts()[1:]...), err: errBadMessage, msg: "server identifier"},
		{name: "server identifier of 3 bytes", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, 10, 0, 2)), err: errBadMessage},
		{name: "offered 0.0.0.0", pkt: dhcpPacket(dhcpOffer, testXID, "0.0.0.0", offerOpts()...), err: errBadMessage, msg: "not a host address"},
		{name: "offered broadcast", pkt: dhcpPacket(dhcpOffer, testXID, "255.255.255.255", offerOpts()...), err: errBadMessage},
		{name: "offered multicast", pkt: dhcpPacket(dhcpOffer, testXID, "224.0.0.1", offerOpts()...), err: errBadMessage},
		{name: "non-contiguous mask", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...), opt(optSubnetMask, 255, 0, 255, 0)), err: errBadMessage, msg: "subnet mask"},
		{name: "zero mask", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...), opt(optSubnetMask, 0, 0, 0, 0)), err: errBadMessage},
		{name: "router of 5 bytes", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...), opt(optRouter, 10, 0, 2, 2, 1)), err: errBadMessage, msg: "router"},
		{name: "empty DNS option", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...), opt(optDNS)), err: errBadMessage},
		{name: "lease of 3 bytes", pkt: dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optServerID, ip4("10.0.2.2")...), opt(optLeaseTime, 0, 1, 0)), err: errBadMessage, msg: "lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			xid := tt.xid
			if xid == 0 {
				xid = testXID
			}
			r, err := parseDHCP(tt.pkt, xid, testMAC)
			if tt.err != nil {
				if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("got %+v, %v; want %v containing %q", r, err, tt.err, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
}

func TestMarshal(t *testing.T) {
	d := dhcpMsg{typ: dhcpDiscover, xid: testXID, secs: 3, mac: testMAC}.marshal()
	r := dhcpMsg{typ: dhcpRequest, xid: testXID, mac: testMAC, requestedIP: net.ParseIP("10.0.2.15"), serverID: net.ParseIP("10.0.2.2")}.marshal()
	for _, b := range [][]byte{d, r} {
		if len(b) < bootpMinLen || b[0] != bootRequest || binary.BigEndian.Uint32(b[4:]) != testXID || binary.BigEndian.Uint16(b[10:]) != flagBroadcast || !bytes.Equal(b[28:34], testMAC) {
			t.Fatalf("header % x", b[:44])
		}
	}
	if binary.BigEndian.Uint16(d[8:]) != 3 {
		t.Errorf("secs")
	}
	do, err := parseOptions(d[dhcpMinLen:])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(do[optMessageType], []byte{dhcpDiscover}) || !bytes.Equal(do[optClientID], append([]byte{1}, testMAC...)) ||
		!bytes.Equal(do[optParamRequest], dhcpRequestList) || do[optRequestedIP] != nil || string(do[optVendorClass]) != "peerboot" {
		t.Errorf("DISCOVER options %v", do)
	}
	ro, err := parseOptions(r[dhcpMinLen:])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ro[optMessageType], []byte{dhcpRequest}) || !bytes.Equal(ro[optRequestedIP], ip4("10.0.2.15")) || !bytes.Equal(ro[optServerID], ip4("10.0.2.2")) {
		t.Errorf("REQUEST options %v", ro)
	}
}

func TestFrame(t *testing.T) {
	payload := dhcpMsg{typ: dhcpDiscover, xid: testXID, mac: testMAC}.marshal()
	f := buildFrame(testMAC, 7, payload)
	if !bytes.Equal(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) || !bytes.Equal(f[6:12], testMAC) {
		t.Fatalf("Ethernet header % x", f[:14])
	}
	// The client's frame checks out as a server would read it.
	got, err := parseUDP(f, false, clientPort, serverPort)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := parseFrame(f, false); !errors.Is(err, errNotForUs) {
		t.Errorf("the client's own broadcast read as a reply: %v", err)
	}

	reply := dhcpPacket(dhcpOffer, testXID, "10.0.2.15", offerOpts()...)
	rf := udpFrame(testMAC, serverMAC, net.ParseIP("10.0.2.2"), net.ParseIP("255.255.255.255"), serverPort, clientPort, 1, reply)
	if got, err := parseFrame(rf, false); err != nil || !bytes.Equal(got, reply) {
		t.Fatalf("reply frame: %v", err)
	}
	padded := append(bytes.Clone(rf), 0, 0, 0, 0) // Ethernet padding past the IP length
	if got, err := parseFrame(padded, false); err != nil || !bytes.Equal(got, reply) {
		t.Errorf("padded frame: %v", err)
	}
	corrupt := bytes.Clone(rf)
	corrupt[len(corrupt)-5] ^= 0x40
	if _, err := parseFrame(corrupt, false); !errors.Is(err, errBadMessage) || !strings.Contains(err.Error(), "UDP checksum") {
		t.Errorf("corrupt payload: %v", err)
	}
	if _, err := parseFrame(corrupt, true); err != nil {
		t.Errorf("checksum not ready (offload) must be accepted: %v", err)
	}
	noSum := bytes.Clone(corrupt)
	noSum[ethHeaderLen+ipHeaderLen+6], noSum[ethHeaderLen+ipHeaderLen+7] = 0, 0
	if _, err := parseFrame(noSum, false); err != nil {
		t.Errorf("UDP checksum 0 (none): %v", err)
	}
	badIP := bytes.Clone(rf)
	badIP[ethHeaderLen+8] = 1 // TTL
	if _, err := parseFrame(badIP, false); !errors.Is(err, errBadMessage) || !strings.Contains(err.Error(), "IP header checksum") {
		t.Errorf("IP header: %v", err)
	}
	for name, mutate := range map[string]func(b []byte){
		"ARP":      func(b []byte) { b[12], b[13] = 0x08, 0x06 },
		"TCP":      func(b []byte) { b[ethHeaderLen+9] = 6 },
		"IPv6":     func(b []byte) { b[ethHeaderLen] = 0x65 },
		"fragment": func(b []byte) { b[ethHeaderLen+6] = 0x20 },
		"port 69":  func(b []byte) { b[ethHeaderLen+ipHeaderLen+3] = 69 },
	} {
		b := bytes.Clone(rf)
		mutate(b)
		if _, err := parseFrame(b, true); !errors.Is(err, errNotForUs) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := parseFrame(rf[:len(rf)-1], false); !errors.Is(err, errBadMessage) {
		t.Errorf("truncated frame: %v", err)
	}
}

// fakeServer is a DHCP server behind a frameLink, on a fake clock.
type fakeServer struct {
	t         *testing.T
	clock     time.Time
	queue     [][]byte
	sent      []byte // message types the client sent, in order
	dropFirst int    // DISCOVERs to ignore
	naks      int    // REQUESTs to refuse
	noise     bool   // answer each DISCOVER with junk first
	failSends int    // sends that fail (ENOBUFS while a link settles)
}

func (s *fakeServer) now() time.Time { return s.clock }

func (s *fakeServer) send(f []byte) error {
	if s.failSends > 0 {
		s.failSends--
		s.sent = append(s.sent, 0)
		return syscall.ENOBUFS
	}
	p, err := parseUDP(f, false, clientPort, serverPort)
	if err != nil {
		s.t.Fatalf("the client sent a bad frame: %v", err)
	}
	opts, err := parseOptions(p[dhcpMinLen:])
	if err != nil {
		s.t.Fatalf("the client sent bad options: %v", err)
	}
	typ := opts[optMessageType][0]
	s.sent = append(s.sent, typ)
	xid := binary.BigEndian.Uint32(p[4:])
	reply := func(b []byte) {
		s.queue = append(s.queue, udpFrame(testMAC, serverMAC, net.ParseIP("10.0.2.2"), net.IPv4bcast, serverPort, clientPort, 1, b))
	}
	switch typ {
	case dhcpDiscover:
		if s.dropFirst > 0 {
			s.dropFirst--
			return nil
		}
		if s.noise {
			reply(dhcpPacket(dhcpOffer, xid^1, "10.0.2.99", offerOpts()...))     // another client's
			reply(dhcpPacket(dhcpOffer, xid, "10.0.2.99", offerOpts()...)[:250]) // truncated
			s.queue = append(s.queue, []byte{1, 2, 3})                           // not even a frame
		}
		reply(dhcpPacket(dhcpOffer, xid, "10.0.2.15", offerOpts()...))
	case dhcpRequest:
		if !bytes.Equal(opts[optRequestedIP], ip4("10.0.2.15")) || !bytes.Equal(opts[optServerID], ip4("10.0.2.2")) {
			s.t.Errorf("REQUEST options %v", opts)
		}
		if s.naks > 0 {
			s.naks--
			reply(dhcpPacket(dhcpNak, xid, "0.0.0.0", opt(optServerID, ip4("10.0.2.2")...), opt(optMessage, []byte("address in use")...)))
			return nil
		}
		reply(dhcpPacket(dhcpAck, xid, "10.0.2.15", offerOpts()[:2]...)) // mask only: router and DNS from the OFFER
	}
	return nil
}

func (s *fakeServer) recv(buf []byte, deadline time.Time) (int, bool, error) {
	if len(s.queue) == 0 {
		if deadline.After(s.clock) {
			s.clock = deadline
		}
		return 0, false, os.ErrDeadlineExceeded
	}
	s.clock = s.clock.Add(time.Millisecond)
	f := s.queue[0]
	s.queue = s.queue[1:]
	return copy(buf, f), false, nil
}

func TestAcquire(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		server fakeServer
		sent   string
		err    string
	}{
		{name: "first try", sent: "1 3"},
		{name: "lost DISCOVERs, retried", server: fakeServer{dropFirst: 2}, sent: "1 1 1 3"},
		{name: "junk and other clients' replies ignored", server: fakeServer{noise: true}, sent: "1 3"},
		{name: "NAK restarts", server: fakeServer{naks: 1}, sent: "1 3 1 3"},
		{name: "NAK every time", server: fakeServer{naks: 9}, sent: "1 3 1 3 1 3", err: "DHCP server 10.0.2.2 refused 10.0.2.15 3 times (NAK: address in use)"},
		{name: "no server", server: fakeServer{dropFirst: 99}, sent: "1 1 1 1", err: "no DHCP offer: no answer within 10s"},
		{name: "send fails, then works", server: fakeServer{failSends: 1}, sent: "0 1 3"},
		{name: "send always fails", server: fakeServer{failSends: 99}, sent: "0 0 0 0", err: "no DHCP offer: no answer within 10s (last problem: sending: no buffer space available)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.server
			s.t, s.clock = t, t0
			c := &dhcpClient{link: &s, mac: testMAC, now: s.now}
			ack, err := c.acquire(t0.Add(10 * time.Second))
			if got := fmtBytes(s.sent); got != tt.sent {
				t.Errorf("client sent %s, want %s", got, tt.sent)
			}
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ack.yiaddr.String() != "10.0.2.15" || ack.mask.String() != "ffffff00" || ack.router.String() != "10.0.2.2" || len(ack.dns) != 2 {
				t.Errorf("ack %+v", ack)
			}
		})
	}
}

func fmtBytes(b []byte) string {
	var s []string
	for _, c := range b {
		s = append(s, string('0'+rune(c)))
	}
	return strings.Join(s, " ")
}

func FuzzParseDHCP(f *testing.F) {
	f.Add(dhcpPacket(dhcpOffer, testXID, "10.0.2.15", offerOpts()...))
	f.Add(dhcpPacket(dhcpAck, testXID, "10.0.2.15", offerOpts()...))
	f.Add(dhcpPacket(dhcpNak, testXID, "0.0.0.0", opt(optServerID, ip4("10.0.2.2")...), opt(optMessage, 'n', 'o')))
	f.Add(dhcpPacket(dhcpOffer, testXID, "10.0.2.15", opt(optOverload, 3), opt(optRouter, 1, 2, 3))[:260])
	f.Add(udpFrame(testMAC, serverMAC, net.ParseIP("10.0.2.2"), net.IPv4bcast, serverPort, clientPort, 1, dhcpPacket(dhcpAck, testXID, "10.0.2.15", offerOpts()...)))
	f.Add([]byte{2, 1, 6, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, pending := range []bool{false, true} {
			if p, err := parseFrame(b, pending); err == nil && len(p) > len(b) {
				t.Fatal("payload longer than the frame")
			}
		}
		r, err := parseDHCP(b, testXID, testMAC)
		if err != nil {
			if !errors.Is(err, errBadMessage) && !errors.Is(err, errNotForUs) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if r.xid != testXID || len(r.message) > 64 || len(r.domain) > 64 || len(r.dns) > maxDNSServers {
			t.Fatalf("reply %+v", r)
		}
		switch r.typ {
		case dhcpNak:
		case dhcpOffer, dhcpAck:
			if !usableHost(r.yiaddr) || len(r.serverID) != 4 {
				t.Fatalf("reply %+v", r)
			}
			if ones, bits := r.mask.Size(); r.mask != nil && (bits != 32 || ones == 0) {
				t.Fatalf("mask %v", r.mask)
			}
			if r.router != nil && !usableHost(r.router) {
				t.Fatalf("router %v", r.router)
			}
		default:
			t.Fatalf("type %d accepted", r.typ)
		}
	})
}
