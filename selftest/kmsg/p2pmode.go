package kmsg

import (
	"regexp"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// P2PTag starts the line the patched driver logs once per GPU when it sets up BAR1,
// naming the P2P mode it chose (driver/patches/README.md gives the format), e.g.
//
//	NVRM: peerboot-p2p: GPU 0000:01:00.0 mode=dynamic bar1=32768MiB fb=49140MiB reason=bar1<fb
//
// The parser asks only for the tag, a PCI address (full, or NVRM's "PCI:0000:01:00"
// form) and the mode (mode=static|dynamic, or the first bare word static or dynamic
// after the tag); other fields are kept in the line, not interpreted, so the driver
// side can add some without breaking this side.
const P2PTag = "peerboot-p2p:"

var modeRe = regexp.MustCompile(`(?:^|[\s,;(])mode[=:]\s*([A-Za-z]+)`)

// P2PMode reads one kernel-log line (any form Classify accepts). ok is false for a
// line that is not a peerboot-p2p line or lacks the address or a known mode.
func P2PMode(line string) (bdf, mode, msg string, ok bool) {
	msg = message(line)
	i := strings.Index(msg, P2PTag)
	if i < 0 {
		return "", "", "", false
	}
	bdf = findBDF(msg)
	rest := msg[i+len(P2PTag):]
	if m := modeRe.FindStringSubmatch(rest); m != nil {
		mode = strings.ToLower(m[1])
	} else {
		for _, w := range strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == ',' || r == ';' || r == ':' }) {
			if lw := strings.ToLower(w); lw == selftest.P2PModeStatic || lw == selftest.P2PModeDynamic {
				mode = lw
				break
			}
		}
	}
	if bdf == "" || (mode != selftest.P2PModeStatic && mode != selftest.P2PModeDynamic) {
		return "", "", "", false
	}
	return bdf, mode, msg, true
}

// ModeLine is one GPU's mode with the line it came from.
type ModeLine struct {
	Mode string
	Line string
}

// P2PModes collects the modes of every peerboot-p2p line among lines, by lower-case
// BDF; a later line for the same GPU (the driver reloaded) replaces an earlier one.
func P2PModes(lines []string) map[string]ModeLine {
	out := map[string]ModeLine{}
	for _, l := range lines {
		if bdf, mode, msg, ok := P2PMode(l); ok {
			out[bdf] = ModeLine{Mode: mode, Line: msg}
		}
	}
	return out
}
