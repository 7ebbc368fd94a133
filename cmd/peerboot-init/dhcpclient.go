package main

// The DHCP client's exchange (DISCOVER → OFFER → REQUEST → ACK) over a link that
// sends and receives whole Ethernet frames: an AF_PACKET socket bound to one
// interface on the node, a fake in the unit tests.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lease is what a DHCP exchange got, and what the init configures.
type lease struct {
	iface   string
	ifindex int
	addr    net.IP
	mask    net.IPMask
	router  net.IP // nil: no default route
	dns     []net.IP
	domain  string
	server  net.IP // the DHCP server identifier
	time    time.Duration
}

func (l *lease) prefix() string {
	ones, _ := l.mask.Size()
	return fmt.Sprintf("%s/%d", l.addr, ones)
}

// frameLink sends and receives Ethernet frames on one interface.
type frameLink interface {
	send(frame []byte) error
	// recv reads one frame into buf before the deadline (os.ErrDeadlineExceeded after
	// it); udpSumPending says the kernel has not computed the UDP checksum yet.
	recv(buf []byte, deadline time.Time) (n int, udpSumPending bool, err error)
}

// dhcpRetries are the waits for a reply after each send; the last repeats until the
// exchange's deadline. RFC 2131 asks for about 4 s doubling to 64 s; a node that waits
// for its report to leave wants an answer sooner, and a lost packet on a LAN is rare.
var dhcpRetries = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}

// maxNaks bounds how often a server may refuse a REQUEST before the interface is given up.
const maxNaks = 3

// dhcpClient runs one exchange on one interface.
type dhcpClient struct {
	link  frameLink
	mac   net.HardwareAddr
	now   func() time.Time
	start time.Time
	// dropped is the last reason a reply was thrown away or a send failed, for the
	// error if no reply fits.
	dropped error
}

// acquire runs the exchange until an ACK or the deadline.
func (c *dhcpClient) acquire(deadline time.Time) (*dhcpReply, error) {
	c.start = c.now()
	for naks := 0; ; {
		xid := rand.Uint32()
		offer, err := c.transact(dhcpMsg{typ: dhcpDiscover, xid: xid, mac: c.mac}, deadline, func(r *dhcpReply) bool { return r.typ == dhcpOffer })
		if err != nil {
			return nil, fmt.Errorf("no DHCP offer: %w", err)
		}
		req := dhcpMsg{typ: dhcpRequest, xid: xid, mac: c.mac, requestedIP: offer.yiaddr, serverID: offer.serverID}
		ack, err := c.transact(req, deadline, func(r *dhcpReply) bool {
			return (r.typ == dhcpAck || r.typ == dhcpNak) && (r.serverID == nil || r.serverID.Equal(offer.serverID))
		})
		if err != nil {
			return nil, fmt.Errorf("no DHCP ACK from %s for %s: %w", offer.serverID, offer.yiaddr, err)
		}
		if ack.typ == dhcpNak {
			naks++
			if naks >= maxNaks {
				return nil, fmt.Errorf("DHCP server %s refused %s %d times (NAK: %s)", offer.serverID, offer.yiaddr, naks, orNone(ack.message))
			}
			continue
		}
		// A server may leave out of the ACK what it said in the OFFER.
		if ack.mask == nil {
			ack.mask = offer.mask
		}
		if ack.router == nil {
			ack.router = offer.router
		}
		if ack.dns == nil {
			ack.dns = offer.dns
		}
		if ack.mask == nil {
			ack.mask = ack.yiaddr.DefaultMask()
		}
		return ack, nil
	}
}

// deadlineErr says how long the client waited, and what it dropped meanwhile.
type deadlineErr struct {
	wait    time.Duration
	dropped error
}

func (e *deadlineErr) Error() string {
	s := fmt.Sprintf("no answer within %s", e.wait.Round(100*time.Millisecond))
	if e.dropped != nil {
		s += fmt.Sprintf(" (last problem: %v)", e.dropped)
	}
	return s
}

func (e *deadlineErr) Unwrap() error { return os.ErrDeadlineExceeded }

// transact sends msg, resending with backoff, until a reply that accept takes.
func (c *dhcpClient) transact(msg dhcpMsg, deadline time.Time, accept func(*dhcpReply) bool) (*dhcpReply, error) {
	buf := make([]byte, 2048)
	for try := 0; ; try++ {
		now := c.now()
		if !now.Before(deadline) {
			return nil, &deadlineErr{wait: now.Sub(c.start), dropped: c.dropped}
		}
		msg.secs = uint16(min(now.Sub(c.start)/time.Second, 0xffff))
		if err := c.link.send(buildFrame(c.mac, uint16(rand.Uint32()), msg.marshal())); err != nil {
			// ENOBUFS and the like while a link settles: wait and send again.
			c.dropped = fmt.Errorf("sending: %w", err)
		}
		wait := dhcpRetries[min(try, len(dhcpRetries)-1)]
		until := now.Add(wait)
		if until.After(deadline) {
			until = deadline
		}
		for {
			n, pending, err := c.link.recv(buf, until)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("receiving: %w", err)
			}
			payload, err := parseFrame(buf[:n], pending)
			if err != nil {
				if !errors.Is(err, errNotForUs) {
					c.dropped = err
				}
				continue
			}
			r, err := parseDHCP(payload, msg.xid, c.mac)
			if err != nil {
				if !errors.Is(err, errNotForUs) {
					c.dropped = err
				}
				continue
			}
			if accept(r) {
				return r, nil
			}
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// packetLink is an AF_PACKET socket bound to one interface for IPv4 frames.
type packetLink struct {
	fd      int
	ifindex int
}

func openPacketLink(ifindex int) (*packetLink, error) {
	// Protocol 0 receives nothing until bind names ETH_P_IP and the interface, so no
	// frame from another interface can slip in between.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening a packet socket (the kernel needs CONFIG_PACKET): %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("PACKET_AUXDATA: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding a packet socket to interface %d: %w", ifindex, err)
	}
	return &packetLink{fd: fd, ifindex: ifindex}, nil
}

func (l *packetLink) close() { unix.Close(l.fd) }

func (l *packetLink) send(frame []byte) error {
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: l.ifindex, Halen: 6}
	copy(to.Addr[:], frame[0:6])
	return unix.Sendto(l.fd, frame, 0, to)
}

func (l *packetLink) recv(buf []byte, deadline time.Time) (int, bool, error) {
	oob := make([]byte, unix.CmsgSpace(int(unsafe.Sizeof(unix.TpacketAuxdata{}))))
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return 0, false, os.ErrDeadlineExceeded
		}
		fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int((wait+time.Millisecond-1)/time.Millisecond))
		if errors.Is(err, unix.EINTR) || (err == nil && n == 0) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		n, oobn, _, _, err := unix.Recvmsg(l.fd, buf, oob, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		return n, csumPending(oob[:oobn]), nil
	}
}

// csumPending reads PACKET_AUXDATA: TP_STATUS_CSUMNOTREADY marks a packet whose
// transport checksum a local sender left to offload (a veth peer, a bridge).
func csumPending(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data)&unix.TP_STATUS_CSUMNOTREADY != 0
		}
	}
	return false
}

func htons(v uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v))
}
