package kmsg

import (
	"regexp"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// P2PTag starts the line the patched driver logs once per GPU at BAR1 setup, naming
// the BAR1 P2P mode it chose; driver/patches/README.md ("The mode line") is the
// grammar:
//
//	NVRM: peerboot-p2p: bar1-mode gpu=0 pci=0000:41:00.0 chip=AD102 bar1_mib=32768 fb_mib=49140 mode=dynamic why=bar1-below-fb
//
// After the tag come space-separated key=value fields to the end of the line; unknown
// keys are ignored (later series may add some), pci and mode are required. The older
// prose line ("peerboot-p2p: GPU<n> BAR1 P2P mode ...") is not this and is ignored.
const P2PTag = "peerboot-p2p: bar1-mode "

var fieldKey = regexp.MustCompile(`^[a-z0-9_]+$`)

// P2PMode reads one kernel-log line (any form Classify accepts). ok is false for a line
// that is not a mode line, or whose pci or mode field is missing or malformed.
func P2PMode(line string) (addr, mode, msg string, ok bool) {
	msg = message(line)
	i := strings.Index(msg, P2PTag)
	if i < 0 {
		return "", "", "", false
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(msg[i+len(P2PTag):]) {
		k, v, found := strings.Cut(f, "=")
		if found && fieldKey.MatchString(k) {
			if _, dup := fields[k]; !dup {
				fields[k] = v
			}
		}
	}
	m := bdfRe.FindStringSubmatch(" " + fields["pci"])
	if m == nil || len(fields["pci"]) > 20 {
		return "", "", "", false
	}
	addr = bdf(m[1], m[2], m[3], m[4])
	switch mode = fields["mode"]; mode {
	case selftest.P2PModeStatic, selftest.P2PModeDynamic, selftest.P2PModeNone:
	default:
		return "", "", "", false
	}
	if addr == "" {
		return "", "", "", false
	}
	return addr, mode, msg, true
}

// ModeLine is one GPU's mode with the line it came from.
type ModeLine struct {
	Mode string
	Line string
}

// P2PModes collects the modes of every mode line among lines, by lower-case BDF with a
// four-digit domain; a later line for the same GPU (a reload or a GPU reset) replaces
// an earlier one.
func P2PModes(lines []string) map[string]ModeLine {
	out := map[string]ModeLine{}
	for _, l := range lines {
		if bdf, mode, msg, ok := P2PMode(l); ok {
			out[bdf] = ModeLine{Mode: mode, Line: msg}
		}
	}
	return out
}
