package netboot

import (
	"strings"
	"testing"
)

func TestInventoryLookup(t *testing.T) {
	inv, err := ParseInventory("inv.toml", []byte(testInventory))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		mac, host  string
		recipe     string
		name, args string
	}{
		{"52:54:00:12:34:56", "gpu-b-01", "xeon-8gpu", "rack1-n01", "loglevel=4 pci=realloc"}, // MAC beats hostname
		{"52:54:00:00:00:01", "gpu-b-01", "epyc-4gpu", "", "loglevel=4"},
		{"", "gpu-b-", "epyc-4gpu", "", "loglevel=4"},
		{"52:54:00:00:00:01", "gpu-a-01", "default", "", "loglevel=4"},
		{"", "", "default", "", "loglevel=4"},
	}
	for _, tt := range tests {
		m, ok := inv.Lookup(tt.mac, tt.host)
		if !ok || m.Recipe != tt.recipe || m.Name != tt.name || m.Args != tt.args {
			t.Errorf("Lookup(%q, %q) = %+v, %v", tt.mac, tt.host, m, ok)
		}
	}
	if err := inv.CheckRecipes("inv.toml", []string{"default", "xeon-8gpu"}); err == nil || !strings.Contains(err.Error(), `inv.toml:12: node[1].recipe: recipe "epyc-4gpu" is not served (serving default, xeon-8gpu)`) {
		t.Errorf("CheckRecipes: %v", err)
	}
}

func TestInventoryErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"syntax", "default = \"x\"\n[[node]\n", []string{"inv.toml:2: expected end of table array name"}},
		{"unknown keys", "defualt = \"x\"\n\n[[node]]\nmac = \"52:54:00:12:34:56\"\nrecipe = \"a\"\ncolour = \"red\"\n", []string{
			`inv.toml:1: defualt: unknown key`, `inv.toml:6: node.colour: unknown key`}},
		{"every field", `default = "Bad Name"
args = "a=1; reboot"

[[node]]
mac = "52:54:00:12:34:5"
recipe = "x"

[[node]]
mac = "52:54:00:12:34:56"
host = "gpu-*"
recipe = "x"

[[node]]
name = "nothing"

[[node]]
host = "gpu-[a"
recipe = "x"
args = "console=${evil}"

[[node]]
mac = "52-54-00-12-34-56"
recipe = "x"

[[node]]
mac = "52:54:00:12:34:56"
recipe = "x"
args = "peerboot.token=stolen"
`, []string{
			`inv.toml:1: default: want a recipe name`,
			`inv.toml:2: args: ";" cannot appear in kernel arguments`,
			`inv.toml:5: node[0].mac: want a MAC address like 52:54:00:12:34:56, got "52:54:00:12:34:5"`,
			`inv.toml:8: node[1]: want mac or host, not both`,
			`inv.toml:13: node[2]: want mac or host`,
			`inv.toml:17: node[3].host: want a hostname or glob`,
			`inv.toml:19: node[3].args: "$" cannot appear`,
			`inv.toml:26: node[5].mac: 52:54:00:12:34:56 is already given at line 22`,
			`inv.toml:28: node[5].args: peerboot.token is set by the server`,
		}},
		{"no recipe and no default", "[[node]]\nhost = \"a\"\n", []string{`inv.toml:1: node[0].recipe: want a recipe name (there is no default)`}},
		{"wrong type", "default = 3\n", []string{`inv.toml:1: default: wrong type: want a string, got an integer`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { parseFails(t, tt.src, tt.want) })
	}
}

// parseFails parses src as inv.toml, wants it refused with every error in want,
// and returns the error.
func parseFails(t *testing.T, src string, want []string) error {
	t.Helper()
	_, err := ParseInventory("inv.toml", []byte(src))
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	return err
}

func TestNormalizeMAC(t *testing.T) {
	for in, want := range map[string]string{"52:54:00:AB:cd:0e": "52:54:00:ab:cd:0e", "52-54-00-ab-cd-0e": "52:54:00:ab:cd:0e", "525400abcd0e": "52:54:00:ab:cd:0e"} {
		if got, err := NormalizeMAC(in); err != nil || got != want {
			t.Errorf("NormalizeMAC(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "52:54:00:ab:cd", "00:00:00:00:00:00:00:e0", "zz:54:00:ab:cd:0e"} {
		if _, err := NormalizeMAC(bad); err == nil {
			t.Errorf("NormalizeMAC(%q) accepted", bad)
		}
	}
}

// FuzzInventory: any bytes give an inventory or errors with a location, never a
// panic, and an accepted inventory's args never carry iPXE syntax.
func FuzzInventory(f *testing.F) {
	f.Add([]byte(testInventory))
	f.Add([]byte("default = \"d\"\n[[node]]\nmac = \"525400123456\"\n"))
	f.Add([]byte("[[node]]\nhost = \"[\"\nrecipe = \"a\"\n[[node]]\n"))
	f.Add([]byte("node = [{mac = \"52:54:00:12:34:56\", recipe = \"a\"}]\n"))
	f.Add([]byte(rolloutInventory))
	f.Add([]byte("[[rollout]]\nrecipe = \"a\"\nchannels = [\"x\", \"x\"]\nwindow = \"-1h\"\n[[node]]\nhost = \"*\"\nrecipe = \"a\"\nchannel = \"y\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := ParseInventory("f.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.toml") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		for _, r := range inv.Nodes {
			if (r.MAC == "") == (r.Host == "") {
				t.Fatalf("accepted a rule with mac %q host %q", r.MAC, r.Host)
			}
			if strings.ContainsAny(r.Args, "$&|;#\n") {
				t.Fatalf("accepted args %q", r.Args)
			}
			m, _ := inv.Lookup(r.MAC, r.Host)
			if p, ok := inv.Policy(m.Recipe); m.Channel != "" && (!ok || !p.Has(m.Channel)) {
				t.Fatalf("accepted channel %q for recipe %q", m.Channel, m.Recipe)
			}
		}
		for _, r := range inv.Rollouts {
			if p, _ := inv.Policy(r.Recipe); len(p.Channels) == 0 || p.PromoteAfter < 1 || p.Window <= 0 {
				t.Fatalf("accepted rollout %+v", p)
			}
		}
	})
}
