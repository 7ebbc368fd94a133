package kmod_test

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/node/kmod"
	"github.com/peerboot/peerboot/node/kmod/kmodtest"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"pci:v00008086d00001521sv*sd*bc*sc*i*", kmodtest.MaI350, true},
		{"pci:v00008086d00001533sv*sd*bc*sc*i*", kmodtest.MaI350, false},
		{"pci:v00008086d00001521sv*sd*bc*sc*i*", kmodtest.MaX710, false},
		{"pci:v000015B3d0000101Dsv*sd*bc*sc*i*", kmodtest.MaCX6Dx, true},
		{"pci:v000015B3d0000101Dsv*sd*bc*sc*i*", kmodtest.MaCX7, false},
		{"pci:v000015B3d00001021sv*sd*bc*sc*i*", kmodtest.MaCX7, true},
		{"pci:v000015B3d0000101Dsv*sd*bc*sc*i*", strings.ToLower(kmodtest.MaCX6Dx), false}, // case matters
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", kmodtest.MaVirtioPCI, true},
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", kmodtest.MaI350, false},
		{"virtio:d00000001v*", kmodtest.MaVirtioNet, true},
		{"virtio:d00000001v*", kmodtest.MaVirtioBlk, false},
		{"pci:v000010DEd*sv*sd*bc03sc02i00*", kmodtest.MaH100, true},
		{"pci:v000010DEd*sv*sd*bc03sc00i00*", kmodtest.MaH100, false},
		{"pci:v000010DEd*sv*sd*bc03sc02i00*", kmodtest.MaCX7, false},
		{"mdio:0000000000011100110010??????????", kmodtest.MaRealtekPHY, true},
		{"mdio:0000000000011100110010??????????", kmodtest.MaRealtekPHY[:len(kmodtest.MaRealtekPHY)-1], false},
		{"mdio:0000000000011100110010??????????", kmodtest.MaRealtekPHY + "1", false},
		{"", "", true},
		{"", "x", false},
		{"*", "", true},
		{"?", "", false},
		{"**", "abc", true},
		{"a*b*c", "axxbyybc", true},
		{"a*b*c", "axxbyybcd", false},
		{"a*", "a", true},
		{"a*b", "a", false},
		{"*a", "bbbba", true},
		{"*?", "", false},
		{"acpi*:PNP0A0[38]:*", "acpi:PNP0A08:", true}, // a class, as modprobe's fnmatch reads it
		{"acpi*:PNP0A0[38]:*", "acpi:PNP0A05:", false},
		{"pci:v[", "pci:v[", false}, // malformed for path.Match: matches nothing
	} {
		if got := kmod.Match(c.pattern, c.s); got != c.want {
			t.Errorf("kmod.Match(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

func TestModulesFor(t *testing.T) {
	aliases, bad := kmod.ParseAliases([]byte(kmodtest.AliasSample))
	if bad != 0 || len(aliases) != 14 {
		t.Fatalf("%d aliases, %d malformed", len(aliases), bad)
	}
	if aliases[0] != (kmod.Alias{"fs-efivarfs", "efivarfs"}) {
		t.Errorf("first alias %+v", aliases[0])
	}
	for ma, want := range map[string][]string{
		kmodtest.MaI350:      {"igb"},
		kmodtest.MaX550:      {"ixgbe"},
		kmodtest.MaX710:      {"i40e"},
		kmodtest.MaCX6Dx:     {"mlx5_core"},
		kmodtest.MaCX7:       {"mlx5_core"},
		kmodtest.MaVirtioPCI: {"virtio_pci"},
		kmodtest.MaVirtioNet: {"virtio_net"},
		kmodtest.MaH100:      {"nvidia"},
		kmodtest.MaAquantia:  nil,
		"":                   nil,
	} {
		if got := kmod.ModulesFor(aliases, ma); !reflect.DeepEqual(got, want) {
			t.Errorf("kmod.ModulesFor(%q) = %q, want %q", ma, got, want)
		}
	}
	// Two aliases of one module matching: the module once.
	twice := append(aliases, kmod.Alias{"pci:v00008086d*sv*sd*bc02sc*i*", "igb"}, kmod.Alias{"pci:*", "vfio_pci_fake"})
	if got := kmod.ModulesFor(twice, kmodtest.MaI350); !reflect.DeepEqual(got, []string{"igb", "vfio_pci_fake"}) {
		t.Errorf("kmod.ModulesFor with overlaps = %q", got)
	}
}

func TestParseAliasesMalformed(t *testing.T) {
	in := "alias a b\n\n   \n#c\nalias only-two\nsoftdep x pre: y\nalias p q r\r\nalias x-y z-w\n\talias  t\tu  \nalias last m"
	got, bad := kmod.ParseAliases([]byte(in))
	want := []kmod.Alias{{"a", "b"}, {"x-y", "z_w"}, {"t", "u"}, {"last", "m"}}
	if !reflect.DeepEqual(got, want) || bad != 3 {
		t.Errorf("got %+v, %d malformed; want %+v, 3", got, bad, want)
	}
}

// The parser reads a file from the image: whatever bytes it holds, no panic, and every
// entry it returns is one depmod could have written.
func FuzzParseAliases(f *testing.F) {
	f.Add([]byte(kmodtest.AliasSample))
	f.Add([]byte("alias a b\nalias\x00 \xff c\n#\nalias a b c d\n"))
	f.Add([]byte("\n\n\r\n alias x y \r"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		aliases, bad := kmod.ParseAliases(data)
		if lines := strings.Count(string(data), "\n") + 1; len(aliases)+bad > lines {
			t.Fatalf("%d aliases + %d malformed from %d lines", len(aliases), bad, lines)
		}
		var again strings.Builder
		for _, a := range aliases {
			if a.Pattern == "" || a.Module == "" || len(strings.Fields(a.Pattern)) != 1 || len(strings.Fields(a.Module)) != 1 || strings.Contains(a.Module, "-") {
				t.Fatalf("entry %+v", a)
			}
			again.WriteString("alias " + a.Pattern + " " + a.Module + "\n")
			_ = kmod.Match(a.Pattern, kmodtest.MaI350)
		}
		round, bad2 := kmod.ParseAliases([]byte(again.String()))
		if bad2 != 0 || len(round) != len(aliases) || (len(round) > 0 && !reflect.DeepEqual(round, aliases)) {
			t.Fatalf("round trip: %+v (%d malformed), want %+v", round, bad2, aliases)
		}
	})
}

// starMatch is the hand-written matcher match replaced ("*" any run, "?" one byte,
// every other byte itself), kept here as the reference that path.Match must agree with
// on alias-shaped inputs.
func starMatch(pattern, s string) bool {
	p, i := 0, 0
	star, resume := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, resume = p, i
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case star >= 0:
			resume++
			p, i = star+1, resume
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// aliasShaped reports whether x is in the language modpost writes aliases in: printable
// ASCII without "/", "[" or "\" (which only path.Match gives a meaning).
func aliasShaped(x string) bool {
	for i := 0; i < len(x); i++ {
		if x[i] < 0x20 || x[i] >= 0x7f || x[i] == '/' || x[i] == '[' || x[i] == '\\' {
			return false
		}
	}
	return true
}

// FuzzMatchAlias: on alias-shaped pattern and modalias, match is the old matcher.
func FuzzMatchAlias(f *testing.F) {
	f.Add("pci:v00008086d00001521sv*sd*bc*sc*i*", kmodtest.MaI350)
	f.Add("a*b?c*", "aXbYcZ")
	f.Add("*?*?*", "ab")
	f.Add("mdio:0000000000011100110010??????????", kmodtest.MaRealtekPHY)
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if !aliasShaped(pattern) || !aliasShaped(s) {
			return
		}
		if got, want := kmod.Match(pattern, s), starMatch(pattern, s); got != want {
			t.Fatalf("kmod.Match(%q, %q) = %v, the old matcher says %v", pattern, s, got, want)
		}
	})
}

// TestMatchRandomAliases repeats the measurement that chose path.Match: globs made
// from real alias shapes (PCI ids with "*" and "?" in random places) against
// modaliases made to match them or nearly, 20,000 of them here (200,000 when measured).
func TestMatchRandomAliases(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const hex = "0123456789ABCDEF"
	field := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = hex[rng.IntN(16)]
		}
		return string(b)
	}
	matched := 0
	for range 20000 {
		ma := "pci:v0000" + field(4) + "d0000" + field(4) + "sv0000" + field(4) + "sd0000" + field(4) + "bc" + field(2) + "sc" + field(2) + "i" + field(2)
		p := []byte(ma)
		for range rng.IntN(6) {
			i := rng.IntN(len(p))
			switch rng.IntN(3) {
			case 0:
				p[i] = '?'
			case 1:
				j := min(len(p), i+rng.IntN(12))
				p = append(append(p[:i:i], '*'), p[j:]...)
			default:
				p[i] = hex[rng.IntN(16)] // a near miss
			}
		}
		pattern := string(p)
		got, want := kmod.Match(pattern, ma), starMatch(pattern, ma)
		if got != want {
			t.Fatalf("kmod.Match(%q, %q) = %v, the old matcher says %v", pattern, ma, got, want)
		}
		if got {
			matched++
		}
	}
	if matched < 2000 || matched > 18000 {
		t.Errorf("%d of 20000 matched: the generator does not test both outcomes", matched)
	}
}

type panicLoader struct{}

func (panicLoader) Load(string, string) error { panic("loader exploded") }

func TestBounded(t *testing.T) {
	inner := &kmodtest.Blocking{Release: make(chan struct{})}
	defer close(inner.Release)
	b := &kmod.Bounded{Inner: inner, Deadline: time.Now().Add(50 * time.Millisecond), Limit: 50 * time.Millisecond}
	err := b.Load("/lib/modules/x/kernel/mlx5_core.ko", "")
	if err == nil || !strings.Contains(err.Error(), "still loading after 50ms") {
		t.Errorf("stuck load: %v", err)
	}
	if err := b.Load("/lib/modules/x/kernel/igb.ko", ""); err == nil || !strings.Contains(err.Error(), "not attempted: the 50ms allowed") || inner.Calls.Load() != 1 {
		t.Errorf("load after the deadline: %v (%d calls)", err, inner.Calls.Load())
	}

	b = &kmod.Bounded{Inner: panicLoader{}, Deadline: time.Now().Add(time.Minute), Limit: time.Minute}
	if err := b.Load("/x/igb.ko", ""); err == nil || !strings.Contains(err.Error(), "loading igb.ko panicked: loader exploded") {
		t.Errorf("panicking load: %v", err)
	}
	b = &kmod.Bounded{Inner: &kmodtest.Loader{Errs: map[string]error{"igb": unix.EEXIST}}, Deadline: time.Now().Add(time.Minute), Limit: time.Minute}
	if err := b.Load("/x/igb.ko", ""); !errors.Is(err, unix.EEXIST) {
		t.Errorf("errno lost: %v", err)
	}
}
