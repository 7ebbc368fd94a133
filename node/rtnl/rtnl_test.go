package rtnl

import (
	"encoding/binary"
	"errors"
	"net"
	"reflect"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// readBack reads a request back with the syscall package's netlink parser: header type, the fixed part,
// and the attributes by type.
func readBack(t *testing.T, msg []byte, fixed int) (syscall.NlMsghdr, []byte, map[uint16][]byte) {
	t.Helper()
	msgs, err := syscall.ParseNetlinkMessage(msg)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("ParseNetlinkMessage: %d messages, %v", len(msgs), err)
	}
	m := msgs[0]
	if int(m.Header.Len) != len(msg) {
		t.Errorf("header length %d, message %d bytes", m.Header.Len, len(msg))
	}
	ras, err := syscall.ParseNetlinkRouteAttr(&m)
	if err != nil {
		t.Fatalf("ParseNetlinkRouteAttr: %v", err)
	}
	out := map[uint16][]byte{}
	for _, a := range ras {
		out[a.Attr.Type] = a.Value
	}
	return m.Header, m.Data[:fixed], out
}

func TestAddr(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ip    string
		ones  int
		bcast net.IP // nil: no IFA_BROADCAST
	}{
		{"/24", "10.233.0.50", 24, net.IPv4(10, 233, 0, 255).To4()},
		{"/16", "172.16.3.9", 16, net.IPv4(172, 16, 255, 255).To4()},
		{"/31", "10.0.0.1", 31, nil},
		{"/32", "10.9.8.7", 32, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := Message(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, 7, Addr(3, net.ParseIP(tc.ip), net.CIDRMask(tc.ones, 32)))
			h, fixed, attrs := readBack(t, msg, unix.SizeofIfAddrmsg)
			if h.Type != unix.RTM_NEWADDR || h.Seq != 7 || h.Flags != unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_REQUEST|unix.NLM_F_ACK {
				t.Errorf("header %+v", h)
			}
			ifa := (*unix.IfAddrmsg)(unsafePointer(fixed))
			if ifa.Family != unix.AF_INET || int(ifa.Prefixlen) != tc.ones || ifa.Scope != unix.RT_SCOPE_UNIVERSE || ifa.Index != 3 {
				t.Errorf("ifaddrmsg %+v", *ifa)
			}
			ip := net.ParseIP(tc.ip).To4()
			want := map[uint16][]byte{unix.IFA_LOCAL: ip, unix.IFA_ADDRESS: ip}
			if tc.bcast != nil {
				want[unix.IFA_BROADCAST] = tc.bcast
			}
			if !reflect.DeepEqual(attrs, want) {
				t.Errorf("attributes %v, want %v", attrs, want)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	for _, onlink := range []bool{false, true} {
		msg := Message(unix.RTM_NEWROUTE, unix.NLM_F_CREATE, 1, Route(5, net.ParseIP("10.233.0.1"), onlink))
		h, fixed, attrs := readBack(t, msg, unix.SizeofRtMsg)
		if h.Type != unix.RTM_NEWROUTE {
			t.Errorf("header %+v", h)
		}
		rt := (*unix.RtMsg)(unsafePointer(fixed))
		wantFlags := uint32(0)
		if onlink {
			wantFlags = unix.RTNH_F_ONLINK
		}
		if rt.Family != unix.AF_INET || rt.Dst_len != 0 || rt.Table != unix.RT_TABLE_MAIN || rt.Protocol != unix.RTPROT_DHCP ||
			rt.Scope != unix.RT_SCOPE_UNIVERSE || rt.Type != unix.RTN_UNICAST || rt.Flags != wantFlags {
			t.Errorf("onlink %v: rtmsg %+v", onlink, *rt)
		}
		want := map[uint16][]byte{unix.RTA_GATEWAY: net.IPv4(10, 233, 0, 1).To4(), unix.RTA_OIF: binary.NativeEndian.AppendUint32(nil, 5)}
		if !reflect.DeepEqual(attrs, want) {
			t.Errorf("attributes %v, want %v", attrs, want)
		}
	}
}

// nlError is an NLMSG_ERROR datagram answering seq with errno (0: the acknowledgement).
func nlError(seq uint32, errno int32) []byte {
	body := binary.NativeEndian.AppendUint32(nil, uint32(-errno))
	body = append(body, make([]byte, unix.SizeofNlMsghdr)...) // the request's header, echoed
	m := Message(unix.NLMSG_ERROR, 0, seq, body)
	binary.NativeEndian.PutUint16(m[6:], 0)
	return m
}

func TestAnswer(t *testing.T) {
	other := Message(unix.RTM_NEWADDR, 0, 9, make([]byte, 6)) // not a multiple of 4: the next one is aligned
	for _, tc := range []struct {
		name string
		b    []byte
		done bool
		err  error
	}{
		{"ack", nlError(4, 0), true, nil},
		{"EEXIST", nlError(4, int32(unix.EEXIST)), true, unix.EEXIST},
		{"another request's", nlError(3, int32(unix.EPERM)), false, nil},
		{"after a notification", append(append(other, 0, 0), nlError(4, int32(unix.ENODEV))...), true, unix.ENODEV},
		{"empty", nil, false, nil},
	} {
		done, err := Answer(tc.b, 4)
		if done != tc.done || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("%s: done %v, err %v; want %v, %v", tc.name, done, err, tc.done, tc.err)
		}
	}
	bad := nlError(4, 0)
	binary.NativeEndian.PutUint32(bad, uint32(len(bad)+1))
	if done, err := Answer(bad, 4); !done || err == nil {
		t.Errorf("length past the end: %v, %v", done, err)
	}
	short := Message(unix.NLMSG_ERROR, 0, 4, nil)
	if done, err := Answer(short, 4); !done || err == nil {
		t.Errorf("short error message: %v, %v", done, err)
	}
}

// The kernel's answer is outside bytes: whatever they are, no panic, and an errno only
// from an answer to our sequence number.
func FuzzAnswer(f *testing.F) {
	f.Add(nlError(4, 0), uint32(4))
	f.Add(nlError(4, int32(unix.EEXIST)), uint32(4))
	f.Add(append(Message(unix.RTM_NEWADDR, 0, 9, make([]byte, 6)), 0, 0), uint32(4))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, seq uint32) {
		done, err := Answer(b, seq)
		if err != nil && !done {
			t.Fatalf("an error without being done: %v", err)
		}
	})
}
