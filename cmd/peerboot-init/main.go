// Command peerboot-init is PID 1 of the peerboot appliance: it mounts the early
// filesystems, loads the recipe's driver modules (and, when there is a report URL,
// first the NIC's driver, then gets an address by DHCP meanwhile), runs the
// self-test (p2pcheck), prints the verdict and one PEERBOOT-REPORT line on the
// console, saves and sends the report, and hands over (shell, poweroff, reboot, halt)
// as the recipe or the kernel command line says. It is a static binary: it runs
// before any library is known good.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/node/dhcp"
	"github.com/peerboot/peerboot/node/kmod"
	"github.com/peerboot/peerboot/node/netup"
)

func main() {
	if os.Getpid() != 1 {
		// It mounts, loads modules and powers the machine off: never by accident.
		fmt.Fprintln(os.Stderr, "peerboot-init: must run as PID 1 (the kernel's init)")
		os.Exit(2)
	}
	m := &machine{
		root:    "/",
		console: io.Discard,
		mount:   unix.Mount,
		ifup:    netup.LinkUp,
		loader:  kmod.Finit{},
		mknod:   unix.Mknod,
		now:     time.Now,
		sleep:   time.Sleep,
		post:    retryPost(httpPost, time.Sleep),
		postProgress: func(url, token string, body []byte) ([]byte, error) {
			return retryPostAnswer(httpProgress, time.Sleep)(url, token, body, "")
		},
		netUp: func() (*dhcp.Lease, error) {
			return netup.Real("/sys/class/net").BringUp(context.Background(), netup.DefaultLimits())
		},
		askNonce:      httpNonce,
		askConsole:    askConsoles,
		partitionWait: 3 * time.Second,
	}
	m.tpmOpen = realTPM(m)
	m.openKlog = func() kmod.KernelLog {
		k, err := openKmsg("/dev/kmsg")
		if err != nil {
			m.say("kernel messages unavailable: %v", err)
			return noKmsg{}
		}
		return k
	}
	m.handOff = func(action string) { handOff(m, action) }
	// The console needs devtmpfs; mount it first (mountAll tolerates EBUSY later).
	_ = os.MkdirAll("/dev", 0o755)
	_ = unix.Mount("devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755")
	if c, err := openConsole("/dev/console"); err == nil {
		m.console = c
	}
	m.run(&bootState{})
	idle() // not reached: the real handOff does not return
}

// run is boot with a net under it: a panic in the init still ends in a fail report
// and on_fail, never in PID 1 exiting (which panics the kernel).
func (m *machine) run(st *bootState) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		// A panic while reporting the panic: nothing left but to stay alive.
		defer func() {
			if recover() != nil {
				idle()
			}
		}()
		m.crashed(st, p, debug.Stack())
	}()
	m.boot(st)
}
