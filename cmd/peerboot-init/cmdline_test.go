package main

import (
	"reflect"
	"testing"
	"time"
)

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"console=ttyS0,115200 panic=-1 quiet\n", map[string]string{"console": "ttyS0,115200", "panic": "-1", "quiet": ""}},
		{`peerboot.on_pass=poweroff  peerboot.report_url="http://10.0.2.2:8080/r a" x=1 x=2`,
			map[string]string{"peerboot.on_pass": "poweroff", "peerboot.report_url": "http://10.0.2.2:8080/r a", "x": "2"}},
		{`a="" b==c`, map[string]string{"a": "", "b": "=c"}},
	}
	for _, tt := range tests {
		if got := parseCmdline(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseCmdline(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestPlanBoot(t *testing.T) {
	tests := []struct {
		name                        string
		onPass, onFail, url, cmd    string
		wantPass, wantFail, wantURL string
		wantToken                   string
		warnings                    int
	}{
		{"recipe only", "poweroff", "shell", "", "", "poweroff", "shell", "", "", 0},
		{"cmdline overrides", "shell", "shell", "http://a/", "peerboot.on_pass=poweroff peerboot.on_fail=reboot peerboot.report_url=http://b/", "poweroff", "reboot", "http://b/", "", 0},
		{"token from the command line", "shell", "shell", "http://a/", "peerboot.report_url=http://s:8080/reports?node=52:54:00:12:34:56 peerboot.token=0123456789abcdef.ff", "shell", "shell", "http://s:8080/reports?node=52:54:00:12:34:56", "0123456789abcdef.ff", 0},
		{"bad override ignored", "halt", "halt", "", "peerboot.on_fail=explode", "halt", "halt", "", "", 1},
		{"bad recipe value falls back to shell", "", "nonsense", "", "", "shell", "shell", "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planBoot(tt.onPass, tt.onFail, tt.url, 0, 0, parseCmdline(tt.cmd))
			if p.onPass != tt.wantPass || p.onFail != tt.wantFail || p.reportURL != tt.wantURL || p.reportToken != tt.wantToken || len(p.warnings) != tt.warnings {
				t.Errorf("got %+v", p)
			}
		})
	}
}

// peerboot.soak= turns the boot into a burn-in; a value that is no positive duration,
// or longer than a week, is ignored with a console warning (the boot still self-tests).
// When nothing chose (no peerboot.soak=, no boot-menu entry, no soak in the recipe)
// and the recipe has a burn-in length (selftest.soak.menu), the init offers it at the
// console: b (then Enter) soaks, anything else or nothing boots normally.
func TestPlanSoak(t *testing.T) {
	const menu = 8 * time.Hour
	for _, tt := range []struct {
		name     string
		recipe   time.Duration // selftest.soak.duration
		menu     time.Duration // selftest.soak.menu
		cmd      string
		answer   string // typed at the console prompt, when there is one
		offer    time.Duration
		want     time.Duration
		by       string
		warnings int
	}{
		{"nothing", 0, 0, "", "b", 0, 0, soakByRecipe, 0},
		{"cmdline", 0, 0, "peerboot.soak=8h", "", 0, 8 * time.Hour, soakByCmdline, 0},
		{"cmdline with others", 0, 0, "peerboot.soak=90m peerboot.on_pass=poweroff", "", 0, 90 * time.Minute, soakByCmdline, 0},
		{"no unit", 0, 0, "peerboot.soak=8", "", 0, 0, soakByRecipe, 1},
		{"negative", 0, 0, "peerboot.soak=-1h", "", 0, 0, soakByRecipe, 1},
		{"zero", 0, 0, "peerboot.soak=0s", "", 0, 0, soakByRecipe, 0},
		{"over a week", 0, 0, "peerboot.soak=800h", "", 0, 0, soakByRecipe, 1},
		{"empty", 0, 0, "peerboot.soak=", "", 0, 0, soakByRecipe, 1},
		// The recipe's soak runs unless the command line says otherwise.
		{"recipe", 12 * time.Hour, 0, "", "", 0, 12 * time.Hour, soakByRecipe, 0},
		{"recipe, cmdline shorter", 12 * time.Hour, 0, "peerboot.soak=30m", "", 0, 30 * time.Minute, soakByCmdline, 0},
		{"recipe, cmdline off", 12 * time.Hour, 0, "peerboot.soak=0", "", 0, 0, soakByRecipe, 0},
		{"recipe, cmdline bad", 12 * time.Hour, 0, "peerboot.soak=eight", "", 0, 12 * time.Hour, soakByRecipe, 1},
		// The console prompt: a stick or ISO boot (no menu chose) of a recipe with a burn-in length.
		{"prompt: b", 0, menu, "console=ttyS0,115200", "b", menu, menu, soakByConsole, 0},
		{"prompt: B and spaces", 0, menu, "", " B ", menu, menu, soakByConsole, 0},
		{"prompt: timeout", 0, menu, "", "", menu, 0, soakByRecipe, 0},
		{"prompt: other key", 0, menu, "", "n", menu, 0, soakByRecipe, 0},
		{"prompt: a word", 0, menu, "", "burn", menu, 0, soakByRecipe, 0},
		{"prompt: 90m menu", 0, 90 * time.Minute, "", "b", 90 * time.Minute, 90 * time.Minute, soakByConsole, 0},
		// Already chosen: no prompt, whatever a console would say.
		{"automated: peerboot.soak=0", 0, menu, "peerboot.soak=0", "b", 0, 0, soakByRecipe, 0},
		{"cmdline chose", 0, menu, "peerboot.soak=30m", "b", 0, 30 * time.Minute, soakByCmdline, 0},
		{"cmdline bad still chose", 0, menu, "peerboot.soak=eight", "b", 0, 0, soakByRecipe, 1},
		{"PXE menu: normal", 0, menu, "peerboot.entry=normal", "b", 0, 0, soakByRecipe, 0},
		{"PXE menu: burn-in", 0, menu, "peerboot.entry=burnin peerboot.soak=8h0m0s", "", 0, menu, soakByCmdline, 0},
		{"recipe soaks every boot", time.Hour, menu, "", "b", 0, time.Hour, soakByRecipe, 0},
		{"no menu", 0, 0, "", "b", 0, 0, soakByRecipe, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := planBoot("shell", "shell", "", tt.recipe, tt.menu, parseCmdline(tt.cmd))
			if p.offer != tt.offer || len(p.warnings) != tt.warnings {
				t.Errorf("recipe %s menu %s, %q: offer %s, warnings %q; want %s and %d warnings", tt.recipe, tt.menu, tt.cmd, p.offer, p.warnings, tt.offer, tt.warnings)
			}
			p = p.answered(tt.answer)
			if p.soak != tt.want || p.soakBy != tt.by {
				t.Errorf("recipe %s menu %s, %q, answer %q: soak %s by %s; want %s by %s", tt.recipe, tt.menu, tt.cmd, tt.answer, p.soak, p.soakBy, tt.want, tt.by)
			}
		})
	}
}
