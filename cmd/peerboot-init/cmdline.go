package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/peerboot/peerboot/bootproto"
)

// Actions the appliance can take after the self-test.
const (
	actShell    = string(bootproto.Shell)
	actPoweroff = string(bootproto.Poweroff)
	actReboot   = string(bootproto.Reboot)
	actHalt     = string(bootproto.Halt)
)

func validAction(a string) bool { return bootproto.Action(a).Valid() }

// parseCmdline splits a kernel command line into key=value pairs the way the kernel
// does: whitespace separates, double quotes group ("a=\"x y\"" is a=x y), and a bare
// word maps to "". A later key overrides an earlier one, as the kernel's own parameters do.
func parseCmdline(s string) map[string]string {
	out := map[string]string{}
	var word strings.Builder
	inQuote, have := false, false
	flush := func() {
		if !have {
			return
		}
		k, v, _ := strings.Cut(word.String(), "=")
		out[k] = v
		word.Reset()
		have = false
	}
	for _, c := range s {
		switch {
		case c == '"':
			inQuote = !inQuote
			have = true
		case !inQuote && (c == ' ' || c == '\t' || c == '\n'):
			flush()
		default:
			word.WriteRune(c)
			have = true
		}
	}
	flush()
	return out
}

// bootPlan is what to do after the self-test and where to send the report.
type bootPlan struct {
	onPass, onFail string
	reportURL      string
	nonce          string        // peerboot.nonce=: the collector's attestation nonce for this boot
	reportToken    string        // peerboot.token=: sent as Authorization: Bearer, opaque (peerboot serve issues one per node and build)
	soak           time.Duration // burn-in after the self-test (peerboot.soak=, else the recipe's selftest.soak.duration); 0: none
	soakBy         string        // what asked for the soak: soakByCmdline, soakByRecipe or soakByConsole
	// offer > 0: nothing chose yet, so the init offers a burn-in of this length (the
	// recipe's selftest.soak.menu) at the console before the self-test.
	offer    time.Duration
	warnings []string // overrides that were ignored, for the console
}

// What made a boot soak, as the report records it (finding init.soak).
const (
	soakByCmdline = "cmdline" // peerboot.soak= on the kernel command line: the PXE menu's burn-in entry, an inventory rule, a person
	soakByRecipe  = "recipe"  // the recipe's selftest.soak.duration: every boot of the image soaks
	soakByConsole = "console" // the person at the box answered the init's prompt
)

// planBoot merges the recipe's [boot] with peerboot.on_pass=, peerboot.on_fail= and
// peerboot.report_url= from the command line; the command line wins so that a QEMU
// test (or a person at the boot menu) can change the handoff without rebuilding.
// peerboot.token= (only on the command line: it is per node and build, so no recipe can hold
// it) is the report collector's token. soak is the recipe's selftest.soak.duration;
// peerboot.soak= (the boot menu's burn-in entry) wins, and peerboot.soak=0 turns a
// recipe's soak off for one boot. menu is the recipe's selftest.soak.menu: when
// nothing chose yet (no peerboot.soak=, even an ignored one; no boot-menu entry,
// peerboot.entry=; no soak in the recipe) the plan offers that burn-in at the console.
func planBoot(onPass, onFail, reportURL string, soak, menu time.Duration, cmdline map[string]string) bootPlan {
	p := bootPlan{onPass: onPass, onFail: onFail, reportURL: reportURL, soak: soak, soakBy: soakByRecipe}
	if !validAction(p.onPass) {
		p.onPass = actShell
	}
	if !validAction(p.onFail) {
		p.onFail = actShell
	}
	for key, dst := range map[string]*string{bootproto.ArgOnPass: &p.onPass, bootproto.ArgOnFail: &p.onFail} {
		v, ok := cmdline[key]
		if !ok {
			continue
		}
		if !validAction(v) {
			p.warnings = append(p.warnings, key+"="+v+" ignored: want shell, poweroff, reboot or halt")
			continue
		}
		*dst = v
	}
	if v, ok := cmdline[bootproto.ArgReportURL]; ok {
		p.reportURL = v
	}
	p.reportToken = cmdline[bootproto.ArgToken]
	p.nonce = cmdline[bootproto.ArgNonce]
	if v, ok := cmdline[bootproto.ArgSoak]; ok {
		d, err := time.ParseDuration(v)
		switch {
		case v == "0" || err == nil && d == 0:
			p.soak = 0
		case err != nil || d < 0:
			p.warnings = append(p.warnings, bootproto.ArgSoak+"="+v+" ignored: want a duration such as 30m or 8h, or 0 for none")
		case d > bootproto.MaxSoakHours*time.Hour:
			p.warnings = append(p.warnings, fmt.Sprintf("%s=%s ignored: at most %dh", bootproto.ArgSoak, v, bootproto.MaxSoakHours))
		default:
			p.soak, p.soakBy = d, soakByCmdline
		}
	}
	_, soakArg := cmdline[bootproto.ArgSoak]
	_, entry := cmdline[bootproto.ArgEntry]
	if menu > 0 && !soakArg && !entry && soak == 0 {
		p.offer = menu
	}
	return p
}

// answered is the plan after the console prompt: bootproto.ConsoleBurnIn (either
// case, spaces ignored) chooses the offered burn-in; anything else, or nothing,
// keeps the normal boot.
func (p bootPlan) answered(answer string) bootPlan {
	if p.offer > 0 && strings.EqualFold(strings.TrimSpace(answer), bootproto.ConsoleBurnIn) {
		p.soak, p.soakBy = p.offer, soakByConsole
	}
	return p
}

// soakSource is what asked for the soak, as the console and the report say it.
func (p bootPlan) soakSource() string {
	switch p.soakBy {
	case soakByCmdline:
		return bootproto.ArgSoak
	case soakByConsole:
		return "chosen on the console"
	}
	return "the recipe's selftest.soak.duration"
}
