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
			p := planBoot(tt.onPass, tt.onFail, tt.url, 0, parseCmdline(tt.cmd))
			if p.onPass != tt.wantPass || p.onFail != tt.wantFail || p.reportURL != tt.wantURL || p.reportToken != tt.wantToken || len(p.warnings) != tt.warnings {
				t.Errorf("got %+v", p)
			}
		})
	}
}

// peerboot.soak= turns the boot into a burn-in; a value that is no positive duration,
// or longer than a week, is ignored with a console warning (the boot still self-tests).
func TestPlanSoak(t *testing.T) {
	for _, tt := range []struct {
		recipe   time.Duration // selftest.soak.duration
		cmd      string
		want     time.Duration
		warnings int
	}{
		{0, "", 0, 0},
		{0, "peerboot.soak=8h", 8 * time.Hour, 0},
		{0, "peerboot.soak=90m peerboot.on_pass=poweroff", 90 * time.Minute, 0},
		{0, "peerboot.soak=8", 0, 1},
		{0, "peerboot.soak=-1h", 0, 1},
		{0, "peerboot.soak=0s", 0, 0},
		{0, "peerboot.soak=800h", 0, 1},
		{0, "peerboot.soak=", 0, 1},
		// The recipe's soak runs unless the command line says otherwise.
		{12 * time.Hour, "", 12 * time.Hour, 0},
		{12 * time.Hour, "peerboot.soak=30m", 30 * time.Minute, 0},
		{12 * time.Hour, "peerboot.soak=0", 0, 0},
		{12 * time.Hour, "peerboot.soak=eight", 12 * time.Hour, 1},
	} {
		p := planBoot("shell", "shell", "", tt.recipe, parseCmdline(tt.cmd))
		if p.soak != tt.want || len(p.warnings) != tt.warnings {
			t.Errorf("recipe %s, %q: soak %s, warnings %q; want %s and %d warnings", tt.recipe, tt.cmd, p.soak, p.warnings, tt.want, tt.warnings)
		}
	}
}
