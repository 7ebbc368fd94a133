// Package kmsg picks the kernel-log lines that matter to the self-test's verdict out of
// /dev/kmsg records or dmesg text: NVIDIA Xid errors, IOMMU faults (Intel DMAR, AMD-Vi),
// GPU firmware load failures and other NVRM errors, each as a selftest.KEvent naming the
// device where the line does.
//
// Classify judges one line; Scan reads a saved log; Watch follows /dev/kmsg from the
// moment it starts, so a run's events are told apart from what the boot logged before.
package kmsg

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/peerboot/peerboot/selftest"
)

// maxLine caps KEvent.Line: kernel records are at most a few hundred bytes, and the
// report should not carry a megabyte because a log file was not what it claimed.
const maxLine = 1024

var (
	// dmesg's "[   12.345678] " (and "[Sun Nov 29 14:01:33 2026] " from dmesg -T).
	dmesgStamp = regexp.MustCompile(`^\[(?:\s*\d{1,10}\.\d{1,9}|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\] ?`)
	// A /dev/kmsg dictionary continuation: " SUBSYSTEM=pci", " DEVICE=+pci:0000:01:00.0".
	dictLine = regexp.MustCompile(`^ [A-Z][A-Z0-9_]*=`)
	// A syslog / console level prefix, "<3>" (dmesg -r, console captures).
	levelPrefix = regexp.MustCompile(`^<\d{1,3}>`)

	// NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
	// Old drivers leave out "PCI:"; the function number is always absent (function 0).
	xidRe = regexp.MustCompile(`NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?\): (\d{1,6})\b`)

	// A full BDF anywhere: "nvidia 0000:01:00.0: ...", "NVRM: GPU 0000:01:00.0: ...",
	// "(PCI:0000:01:00.0)", "device=0000:41:00.0".
	bdfRe = regexp.MustCompile(`(?:^|[^0-9a-fA-F])([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\b`)
	// NVRM's short form without a function: "NVRM: GPU at PCI:0000:01:00: GPU-...".
	pciShortRe = regexp.MustCompile(`PCI:([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\b`)

	// Intel VT-d: "DMAR: [DMA Read NO_PASID] Request device [01:00.0] fault addr ...",
	// "DMAR: [DMA Write] Request device [1b:00.0] PASID ffffffff fault addr ...",
	// "DMAR: [INTR-REMAP] Request device [f0:1f.0] fault index 0x0 ...". The kernel prints
	// no PCI segment here; segment 0 is assumed.
	dmarRe = regexp.MustCompile(`DMAR: \[[^\]]*\] Request device \[(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\]`)
	// AMD-Vi with the device inside the event (older kernels, or no struct device):
	// "AMD-Vi: Event logged [IO_PAGE_FAULT device=41:00.0 domain=0x000e ...]".
	amdDevRe = regexp.MustCompile(`device=(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\b`)
)

// Classify reports whether one kernel-log line is an event the verdict cares about, and
// which. It accepts a /dev/kmsg record ("6,1234,5678901,-;message"), a dmesg line
// ("[   12.345678] message"), a console line ("<3>message") or a journal line
// ("... kernel: message"). KEvent.Line is the message without those prefixes.
//
// The order of the rules matters: an Xid line mentions GSP and firmware words too, and
// is an Xid first.
func Classify(line string) (selftest.KEvent, bool) {
	msg := message(line)
	if msg == "" {
		return selftest.KEvent{}, false
	}
	if strings.Contains(msg, P2PTag) {
		// The patched driver's mode line (P2PMode) is a statement, not an event, even
		// when it gives a reason in words such as "refused".
		return selftest.KEvent{}, false
	}
	ev := selftest.KEvent{Line: msg}
	if len(ev.Line) > maxLine {
		n := maxLine
		for n > 0 && !utf8.RuneStart(ev.Line[n]) {
			n-- // cut before a character, not through it
		}
		ev.Line = ev.Line[:n]
	}
	switch {
	case strings.Contains(msg, "NVRM: Xid "):
		m := xidRe.FindStringSubmatch(msg)
		if m == nil {
			return selftest.KEvent{}, false
		}
		code, err := strconv.Atoi(m[5])
		if err != nil {
			return selftest.KEvent{}, false
		}
		fn := m[4]
		if fn == "" {
			fn = "0"
		}
		ev.Kind, ev.Code, ev.BDF = selftest.KEventXid, code, bdf(m[1], m[2], m[3], fn)

	case strings.Contains(msg, "DMAR:"):
		if m := dmarRe.FindStringSubmatch(msg); m != nil {
			ev.Kind, ev.BDF = selftest.KEventIOMMU, bdf(m[1], m[2], m[3], m[4])
		} else if strings.Contains(msg, "DRHD: handling fault status") {
			// The header VT-d prints before the fault records; Scan and Watch fold it
			// into the record that follows, but alone (the record rate-limited away)
			// it is still a fault.
			ev.Kind = selftest.KEventIOMMU
		} else {
			return selftest.KEvent{}, false
		}

	case strings.Contains(msg, "AMD-Vi: Event logged ["), strings.Contains(msg, "AMD-Vi: Completion-Wait loop timed out"):
		ev.Kind = selftest.KEventIOMMU
		if m := amdDevRe.FindStringSubmatch(msg); m != nil {
			ev.BDF = bdf(m[1], m[2], m[3], m[4])
		} else {
			ev.BDF = FindBDF(msg) // "nvidia 0000:41:00.0: AMD-Vi: Event logged [...]"
		}

	case isFirmware(msg):
		ev.Kind, ev.BDF = selftest.KEventFirmware, FindBDF(msg)

	case isNVRMError(msg):
		ev.Kind, ev.BDF = selftest.KEventNVRM, FindBDF(msg)

	default:
		return selftest.KEvent{}, false
	}
	return ev, true
}

// message strips the record, timestamp and level prefixes and the line ending.
func message(line string) string {
	s := strings.TrimRight(line, "\r\n")
	if dictLine.MatchString(s) {
		return ""
	}
	// /dev/kmsg: "<prio>,<seq>,<usec>,<flags>[,more];message".
	if i := strings.IndexByte(s, ';'); i > 0 && isRecordHeader(s[:i]) {
		s = s[i+1:]
	}
	s = levelPrefix.ReplaceAllLiteralString(s, "")
	if loc := dmesgStamp.FindStringIndex(strings.TrimLeft(s, " ")); loc != nil {
		s = strings.TrimLeft(s, " ")[loc[1]:]
	}
	// journalctl -k: "Nov 29 14:01:33 node7 kernel: message".
	if i := strings.Index(s, " kernel: "); i > 0 && i < 64 {
		s = s[i+len(" kernel: "):]
	}
	return strings.TrimSpace(s)
}

// isRecordHeader accepts the /dev/kmsg header: three comma-separated decimal fields
// (priority, sequence, microseconds) and a flags field ("-", "c" or "+"), optionally
// more fields after it (",caller=T412" with CONFIG_PRINTK_CALLER).
func isRecordHeader(h string) bool {
	f := strings.Split(h, ",")
	if len(f) < 4 {
		return false
	}
	for _, n := range f[:3] {
		if _, err := strconv.ParseUint(n, 10, 64); err != nil {
			return false
		}
	}
	return f[3] == "-" || f[3] == "c" || f[3] == "+"
}

// isFirmware matches the ways a GPU's firmware (the GSP image the open module needs)
// fails to load or to boot:
//
//	nvidia 0000:01:00.0: Direct firmware load for nvidia/535.261.03/gsp_ga10x.bin failed with error -2
//	firmware: failed to load nvidia/535.261.03/gsp_tu10x.bin (-2)
//	NVRM: RmFetchGspRmImages: No firmware image found
//	NVRM: GPU 0000:01:00.0: GSP firmware boot failed
//
// Firmware failures of other devices (Wi-Fi, other GPUs) are not events.
func isFirmware(msg string) bool {
	low := strings.ToLower(msg)
	if strings.Contains(low, "direct firmware load for") || strings.Contains(low, "firmware: failed to load") {
		return strings.Contains(low, "nvidia")
	}
	if !strings.Contains(msg, "NVRM:") {
		return false
	}
	if !strings.Contains(low, "firmware") && !strings.Contains(low, "gsp") {
		return false
	}
	return strings.Contains(low, "no firmware") || hasFailureWord(low)
}

// nvrmNoise are NVRM lines that contain failure words but are logged by healthy
// drivers: RM's internal "check failed" traces for calls a consumer card does not
// support.
var nvrmNoise = []string{
	"nvCheckOkFailedNoLog",
	"nvCheckFailedNoLog",
	"Check failed: Call not supported",
}

// isNVRMError matches NVRM lines that say the driver failed: adapter init
// ("RmInitAdapter failed!", "rm_init_adapter failed"), probe failures, an API
// mismatch between module and libraries, a lost GPU, RM assertions. Lines carrying
// only RM's check-failed traces are left out (nvrmNoise).
func isNVRMError(msg string) bool {
	if !strings.Contains(msg, "NVRM:") {
		return false
	}
	for _, n := range nvrmNoise {
		if strings.Contains(msg, n) {
			return false
		}
	}
	low := strings.ToLower(msg)
	for _, w := range []string{
		"api mismatch",
		"fallen off the bus",
		"gpu is lost",
		"none of the nvidia devices were initialized",
		"is not supported by",
		"assertion failed",
		"is invalid",
		"probe routine was not called",
		"no nvidia devices probed",
	} {
		if strings.Contains(low, w) {
			return true
		}
	}
	return hasFailureWord(low)
}

// hasFailureWord reports failure wording in a lower-cased message.
func hasFailureWord(low string) bool {
	for _, w := range []string{"failed", "failure", "error", "not found", "timeout", "timed out", "cannot", "unable"} {
		if strings.Contains(low, w) {
			return true
		}
	}
	return false
}

// FindBDF returns the first full PCI address in msg, or NVRM's function-less
// "PCI:dddd:bb:dd" form with function 0, or "".
func FindBDF(msg string) string {
	if m := bdfRe.FindStringSubmatch(msg); m != nil {
		return bdf(m[1], m[2], m[3], m[4])
	}
	if m := pciShortRe.FindStringSubmatch(msg); m != nil {
		return bdf(m[1], m[2], m[3], "0")
	}
	return ""
}

// bdf formats a PCI address as sysfs does, "0000:01:00.0": lower case, a four-digit
// domain (NVML and Xid lines may carry eight digits), domain 0 when none was given.
func bdf(domain, bus, dev, fn string) string {
	d := uint64(0)
	if domain != "" {
		v, err := strconv.ParseUint(domain, 16, 32)
		if err != nil {
			return ""
		}
		d = v
	}
	return strings.ToLower(fmt.Sprintf("%04x:%s:%s.%s", d, bus, dev, fn))
}
