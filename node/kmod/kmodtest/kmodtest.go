// Package kmodtest holds the fakes and the real-world samples that the tests of kmod
// and of its callers (the init) share: a recording loader and kernel log, and
// modules.alias lines and modaliases as real kernels and devices spell them.
package kmodtest

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/peerboot/peerboot/node/kmod"
	"github.com/peerboot/peerboot/selftest"
)

// Loader records loads and answers from a table keyed by module name; it logs to Klog
// the way the kernel would. It is safe for kmod.Bounded's background loads.
type Loader struct {
	Errs   map[string]error
	Klog   *Klog
	mu     sync.Mutex
	loaded []string // "name params"
}

func (l *Loader) Load(path, params string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	name := kmod.Name(path)
	l.loaded = append(l.loaded, strings.TrimSpace(name+" "+params))
	if l.Klog != nil {
		l.Klog.Pending = append(l.Klog.Pending, "loading "+name)
	}
	return l.Errs[name]
}

// Loaded is every load so far, as "name params".
func (l *Loader) Loaded() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string{}, l.loaded...)
}

// Klog is a kernel log whose next Drain returns Pending.
type Klog struct{ Pending []string }

func (k *Klog) Drain() []string {
	out := k.Pending
	k.Pending = nil
	if out == nil {
		out = []string{}
	}
	return out
}

// Summarize spells each record "name:result<required-by (error)" for comparisons.
func Summarize(ms []selftest.Module) []string {
	var out []string
	for _, m := range ms {
		s := m.Name + ":" + m.Result
		if m.RequiredBy != "" {
			s += "<" + m.RequiredBy
		}
		if m.Error != "" {
			s += " (" + m.Error + ")"
		}
		out = append(out, s)
	}
	return out
}

// AliasSample is modules.alias as depmod wrote it for the gpu-node kernel (6.1), plus
// lines of the shapes other kernels' modules.alias hold (virtio, nvidia's own).
const AliasSample = `# Aliases extracted from modules themselves.
alias fs-efivarfs efivarfs
alias crypto-crc32c crc32c_generic
alias mdio:0000000000011100110010?????????? realtek
alias pci:v00008086d00001521sv*sd*bc*sc*i* igb
alias pci:v00008086d00001533sv*sd*bc*sc*i* igb
alias pci:v00008086d00001563sv*sd*bc*sc*i* ixgbe
alias pci:v00008086d00001572sv*sd*bc*sc*i* i40e
alias auxiliary:mlx5_core.eth mlx5_core
alias pci:v000015B3d0000101Dsv*sd*bc*sc*i* mlx5_core
alias pci:v000015B3d00001021sv*sd*bc*sc*i* mlx5_core
alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
alias pci:v000010DEd*sv*sd*bc03sc00i00* nvidia
alias pci:v000010DEd*sv*sd*bc03sc02i00* nvidia
`

// Modaliases as sysfs shows them for real devices.
const (
	MaI350       = "pci:v00008086d00001521sv000015D9sd00001521bc02sc00i00" // igb, Supermicro board
	MaX550       = "pci:v00008086d00001563sv00008086sd00000001bc02sc00i00" // ixgbe
	MaX710       = "pci:v00008086d00001572sv00008086sd00000001bc02sc00i00" // i40e
	MaCX6Dx      = "pci:v000015B3d0000101Dsv000015B3sd00000016bc02sc00i00" // mlx5_core, ConnectX-6 Dx
	MaCX7        = "pci:v000015B3d00001021sv000015B3sd00000041bc02sc00i00" // mlx5_core, ConnectX-7
	MaVirtioPCI  = "pci:v00001AF4d00001041sv00001AF4sd00001041bc02sc00i00" // virtio-net (modern) on PCI
	MaVirtioNet  = "virtio:d00000001v00001AF4"
	MaVirtioBlk  = "virtio:d00000002v00001AF4"
	MaH100       = "pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00"
	MaAquantia   = "pci:v00001D6Ad000007B1sv00001D6Asd00000001bc02sc00i00"
	MaRealtekPHY = "mdio:00000000000111001100100100010001"
)

// Blocking is a loader whose every load waits until Release is closed, as a driver
// stuck in its probe would; Calls counts the loads started.
type Blocking struct {
	Release chan struct{}
	Calls   atomic.Int32
}

func (l *Blocking) Load(string, string) error {
	l.Calls.Add(1)
	<-l.Release
	return nil
}
