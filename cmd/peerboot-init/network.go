package main

// The network bring-up for the report POST (node/netup) runs beside the module
// loading; the boot waits for it before the self-test and records it.

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/peerboot/peerboot/node/dhcp"
	"github.com/peerboot/peerboot/node/netup"
	"github.com/peerboot/peerboot/selftest"
)

// phaseNetwork is the duration entry of the network bring-up.
const phaseNetwork = "network"

// netResult is the bring-up's outcome, handed from its goroutine to the boot.
type netResult struct {
	lease *dhcp.Lease
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
	msg := fmt.Sprintf("%s: %s from DHCP server %s, router %s, DNS %s, lease %s", l.Iface, l.Prefix(), l.Server, ipOr(l.Router, "none"), ipsOr(l.DNS, "none"), l.Time)
	if len(l.DNS) > 0 {
		if err := netup.WriteResolvConf(m.path("/etc/resolv.conf"), l); err != nil {
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
