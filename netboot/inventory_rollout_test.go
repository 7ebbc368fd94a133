package netboot

import (
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/located"
)

// rolloutPolicy is the default recipe's rollout the rollout tests share:
// canary then stable, two PASSes promote, a 6h window.
const rolloutPolicy = `default = "default"

[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
promote_after = 2
window = "6h"
`

const rolloutInventory = rolloutPolicy + `
[[node]]
mac = "52:54:00:12:34:56"
channel = "canary"

[[node]]
host = "gpu-c-*"
channel = "canary"

[[node]]
host = "gpu-*"
`

func TestInventoryRollout(t *testing.T) {
	inv, err := ParseInventory("inv.toml", []byte(rolloutInventory))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := inv.Policy("default")
	if !ok || p.PromoteAfter != 2 || p.Window != 6*time.Hour || strings.Join(p.Channels, ",") != "canary,stable" || p.Default() != "stable" {
		t.Fatalf("policy %+v, %v", p, ok)
	}
	if _, ok := inv.Policy("other"); ok {
		t.Error("a recipe without [[rollout]] has a policy")
	}
	for _, c := range []struct{ mac, host, channel string }{
		{"52:54:00:12:34:56", "", "canary"}, {"", "gpu-c-07", "canary"}, {"", "gpu-a-01", ""}, {"52:54:00:00:00:09", "", ""},
	} {
		if m, _ := inv.Lookup(c.mac, c.host); m.Channel != c.channel {
			t.Errorf("Lookup(%q, %q).Channel = %q, want %q", c.mac, c.host, m.Channel, c.channel)
		}
	}
	inv, err = ParseInventory("inv.toml", []byte(rolloutInventory+"[[node]]\nmac = \"52:54:00:00:00:07\"\ntpm = true\n[[rollout]]\nrecipe = \"r2\"\nchannels = [\"a\", \"b\"]\nrequire_attestation = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := inv.Policy("default"); p.Requires("canary") || p.Requires("stable") {
		t.Errorf("default requires attestation: %+v", p)
	}
	if p, _ := inv.Policy("r2"); !p.Requires("a") || !p.Requires("b") {
		t.Errorf("require_attestation = true: %+v", p)
	}
	inv, err = ParseInventory("inv.toml", []byte("[[rollout]]\nrecipe = \"x\"\nchannels = [\"a\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := inv.Policy("x"); p.PromoteAfter != 1 || p.Window != 24*time.Hour {
		t.Errorf("defaults: %+v", p)
	}
}

func TestInventoryRolloutErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"unknown channel", `default = "default"
[[rollout]]
recipe = "default"
channels = ["canary", "stable"]

[[node]]
mac = "52:54:00:12:34:56"
channel = "canery"
`, []string{`inv.toml:8: node[0].channel: unknown channel "canery" (recipe default has [canary stable])`}},
		{"channel without rollout", `[[node]]
host = "a*"
recipe = "r1"
channel = "canary"
`, []string{`inv.toml:4: node[0].channel: recipe "r1" has no [[rollout]] table, so no channels`}},
		{"bad tables", `[[rollout]]
recipe = "Bad"
channels = []
promote_after = 0
window = "soon"

[[rollout]]
recipe = "r"
channels = ["a", "a", "B c"]
rollback = true

[[rollout]]
recipe = "r"
channels = ["x"]
`, []string{
			`inv.toml:2: rollout[0].recipe: want a recipe name`,
			`inv.toml:3: rollout[0].channels: want the channels in promotion order`,
			`inv.toml:4: rollout[0].promote_after: want a number of nodes, 1 or more, got 0`,
			`inv.toml:5: rollout[0].window: want a duration such as "6h" or "90m", got "soon"`,
			`inv.toml:9: rollout[1].channels: channel "a" is listed twice`,
			`inv.toml:9: rollout[1].channels: want channel names ([a-z0-9][a-z0-9._-]*), got "B c"`,
			`inv.toml:10: rollout.rollback: unknown key`,
			`inv.toml:13: rollout[2].recipe: recipe r already has a rollout at line 8`,
		}},
		// A window must be a positive duration; a key not given is reported at
		// its table's line.
		{"window not positive, channels missing", `[[rollout]]
recipe = "a"
channels = ["x"]
window = "0s"

[[rollout]]
recipe = "b"
channels = ["x"]
window = "-90m"

[[rollout]]
recipe = "c"
`, []string{
			`inv.toml:4: rollout[0].window: want a duration such as "6h" or "90m", got "0s"`,
			`inv.toml:9: rollout[1].window: want a duration such as "6h" or "90m", got "-90m"`,
			`inv.toml:11: rollout[2].channels: want the channels in promotion order`,
		}},
		{"attestation keys", `default = "default"
[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
require_attestation = ["canary", "beta"]

[[rollout]]
recipe = "r2"
channels = ["a"]
require_attestation = 3

[[node]]
host = "gpu-*"
tpm = true

[[node]]
mac = "52:54:00:12:34:56"
ak_name = "000bzz"
`, []string{
			`inv.toml:5: rollout[0].require_attestation: unknown channel "beta" (the rollout has [canary stable])`,
			`inv.toml:10: rollout[1].require_attestation: want true, false or a list of channels, e.g. ["canary"], got 3`,
			`inv.toml:12: node[0]: tpm, ak_name and ek_name need a mac rule`,
			`inv.toml:18: node[1].ak_name: want a TPM Name in hex`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := parseFails(t, tt.src, tt.want)
			if n := len(err.(located.Errors)); n != len(tt.want) {
				t.Errorf("%d errors, want %d:\n%v", n, len(tt.want), err)
			}
		})
	}
}

// TestInventoryRolloutInline: a rollout written as an inline array of tables
// (rollout = [{...}], valid TOML) is the same rollout as a [[rollout]] table,
// with the same defaults and the same checks, whose errors name the key.
func TestInventoryRolloutInline(t *testing.T) {
	inv, err := ParseInventory("inv.toml", []byte(`default = "default"
rollout = [{recipe = "default", channels = ["canary", "stable"], promote_after = 2}, {recipe = "r2", channels = ["a"]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := inv.Policy("default"); !ok || p.PromoteAfter != 2 || p.Window != 24*time.Hour || p.Default() != "stable" {
		t.Errorf("inline rollout: %+v, %v", p, ok)
	}
	if p, ok := inv.Policy("r2"); !ok || p.PromoteAfter != 1 || p.Default() != "a" {
		t.Errorf("inline rollout with defaults: %+v, %v", p, ok)
	}
	err = parseFails(t, `rollout = [{recipe = "x", channels = ["a", "a"], window = "0s"}]
`, []string{`rollout[0].channels: channel "a" is listed twice`, `rollout[0].window: want a duration`})
	if n := len(err.(located.Errors)); n != 2 {
		t.Errorf("%d errors, want 2:\n%v", n, err)
	}
}
