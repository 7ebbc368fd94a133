// Package rtnl configures an IPv4 address and a default route over rtnetlink: the two
// requests the init makes after a DHCP lease. It is ours because no netlink library is
// among the module's dependencies and these two messages are ~100 lines; the
// libraries (vishvananda/netlink, jsimonetti/rtnetlink over mdlayher/netlink) would add
// far more to a static PID 1 than they save here. Messages are built by Addr and
// Route, which the tests read back with the syscall package's netlink parser.
package rtnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Conn is a NETLINK_ROUTE socket for one request at a time.
type Conn struct {
	fd  int
	seq uint32
}

// Open opens the socket with a 5 s bound on every answer.
func Open() (*Conn, error) {
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
	return &Conn{fd: fd}, nil
}

func (c *Conn) Close() error { return unix.Close(c.fd) }

// AddAddr adds addr/mask to the interface (RTM_NEWADDR, replacing an equal one).
func (c *Conn) AddAddr(ifindex int, addr net.IP, mask net.IPMask) error {
	return c.do(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, Addr(ifindex, addr, mask))
}

// AddDefaultRoute adds the default route via gw out of the interface (RTM_NEWROUTE).
func (c *Conn) AddDefaultRoute(ifindex int, gw net.IP, onlink bool) error {
	return c.do(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, Route(ifindex, gw, onlink))
}

// Addr is the body of an RTM_NEWADDR for addr/mask on ifindex: global scope, with the
// subnet's broadcast address unless the prefix is /31 or /32. The address is given no
// lifetime, so a shell after the self-test keeps the network.
func Addr(ifindex int, addr net.IP, mask net.IPMask) []byte {
	ones, _ := mask.Size()
	a := addr.To4()
	b := make([]byte, unix.SizeofIfAddrmsg)
	b[0] = unix.AF_INET
	b[1] = byte(ones)
	b[3] = unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(b[4:], uint32(ifindex))
	b = attr(b, unix.IFA_LOCAL, a)
	b = attr(b, unix.IFA_ADDRESS, a)
	if ones < 31 {
		bcast := make(net.IP, 4)
		for i := range bcast {
			bcast[i] = a[i] | ^mask[i]
		}
		b = attr(b, unix.IFA_BROADCAST, bcast)
	}
	return b
}

// Route is the body of an RTM_NEWROUTE for the default route via gw out of ifindex in
// the main table, marked as DHCP's. onlink: the router lies outside the subnet (a /32
// lease) and is reachable on the link all the same.
func Route(ifindex int, gw net.IP, onlink bool) []byte {
	b := make([]byte, unix.SizeofRtMsg)
	b[0] = unix.AF_INET
	b[4] = unix.RT_TABLE_MAIN
	b[5] = unix.RTPROT_DHCP
	b[6] = unix.RT_SCOPE_UNIVERSE
	b[7] = unix.RTN_UNICAST
	if onlink {
		binary.NativeEndian.PutUint32(b[8:], unix.RTNH_F_ONLINK)
	}
	b = attr(b, unix.RTA_GATEWAY, gw.To4())
	return attr(b, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(ifindex)))
}

// do sends one request with NLM_F_ACK and waits for the kernel's answer to it.
func (c *Conn) do(typ uint16, flags uint16, body []byte) error {
	c.seq++
	if err := unix.Sendto(c.fd, Message(typ, flags, c.seq, body), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 8192)
	for {
		k, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("netlink answer: %w", err)
		}
		done, err := Answer(buf[:k], c.seq)
		if done || err != nil {
			return err
		}
	}
}

// Message frames body as one netlink request that asks for an acknowledgement.
func Message(typ, flags uint16, seq uint32, body []byte) []byte {
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	return append(msg, body...)
}

// Answer looks in one datagram from the kernel for the NLMSG_ERROR that answers seq:
// done with its errno (nil for the acknowledgement), or not done when the datagram
// holds no answer to seq. The datagram is outside input: lengths are checked.
func Answer(b []byte, seq uint32) (done bool, err error) {
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return true, errors.New("netlink answer: malformed message")
		}
		typ, s := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:])
		if typ == unix.NLMSG_ERROR && s == seq {
			if l < unix.SizeofNlMsghdr+4 {
				return true, errors.New("netlink answer: short error message")
			}
			if errno := int32(binary.NativeEndian.Uint32(b[unix.SizeofNlMsghdr:])); errno != 0 {
				return true, unix.Errno(-errno)
			}
			return true, nil
		}
		if align(l) >= len(b) {
			break
		}
		b = b[align(l):]
	}
	return false, nil
}

// attr appends one route attribute, padded to four bytes.
func attr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func align(n int) int { return (n + 3) &^ 3 }
