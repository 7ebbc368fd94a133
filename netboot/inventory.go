package netboot

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/internal/located"
)

// Inventory maps nodes to recipes. A file looks like
//
//	default = "default"          # recipe for nodes no rule names; omit to refuse them
//	args = "console=ttyS0,115200" # kernel arguments for every node (optional)
//
//	[[node]]
//	mac = "52:54:00:12:34:56"    # exactly one of mac and host
//	name = "rack1-n01"           # shown on the fleet page (optional)
//	recipe = "xeon-8gpu"
//	args = "pci=realloc"         # appended for this node (optional)
//
//	[[node]]
//	host = "gpu-b-*"             # a glob on the DHCP hostname iPXE reports
//	recipe = "epyc-4gpu"
//
// A MAC rule wins over a hostname rule; hostname rules are tried in file order.
//
// A recipe with a [[rollout]] table moves its builds through channels (rollout.go):
//
//	[[rollout]]
//	recipe = "default"
//	channels = ["canary", "stable"]  # promotion order; nodes naming no channel follow the last
//	promote_after = 2                # distinct passing nodes of a channel that promote its build
//	window = "6h"                    # ...within this long of the build entering the channel
//
// and a [[node]] rule (MAC or host glob) says channel = "canary".
type Inventory struct {
	Default  string          `toml:"default"`
	Args     string          `toml:"args"`
	Nodes    []Rule          `toml:"node"`
	Rollouts []RolloutPolicy `toml:"rollout"`
}

// Rule is one [[node]] table.
type Rule struct {
	MAC     string `toml:"mac"`
	Host    string `toml:"host"`
	Name    string `toml:"name"`
	Recipe  string `toml:"recipe"`
	Args    string `toml:"args"`
	Channel string `toml:"channel"` // of its recipe's [[rollout]]; "": the last channel
	// TPM says the node has a TPM and always reports attested: its unattested
	// reports never vote. AKName and EKName pin its TPM (hex TPM Names): a quote
	// by another AK, or an AK under another EK, is refused, and the first AK
	// needs no enrollment window. MAC rules only.
	TPM        bool   `toml:"tpm"`
	AKName     string `toml:"ak_name"`
	EKName     string `toml:"ek_name"`
	Line       int    `toml:"-"` // where the table starts
	recipeLine int
}

// Match is what the inventory says about one node.
type Match struct {
	Recipe  string
	Name    string
	Args    string // inventory-wide args, then the rule's
	Rule    int    // 1-based line of the rule; 0: the default
	Channel string // the rule's channel; "": its rollout's default (the last)
}

var recipeName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// tpmName is a TPM Name in hex: the name algorithm (sha256, sha384, sha512), then
// the digest of the public area.
var tpmName = regexp.MustCompile(`^(000b[0-9a-f]{64}|000c[0-9a-f]{96}|000d[0-9a-f]{128})$`)

// LoadInventory reads and checks an inventory file.
func LoadInventory(file string) (*Inventory, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the inventory: %w", err)
	}
	return ParseInventory(file, data)
}

// ParseInventory checks everything it can without knowing the served recipes and
// reports all problems at once as file:line: key: message.
func ParseInventory(file string, data []byte) (*Inventory, error) {
	inv := &Inventory{}
	lines := inventoryLines(data)
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(inv)
	if err != nil {
		e := located.TOML(file, data, err)
		if e.Line == 0 && e.Key != "" {
			e.Line = lines.find(strings.Split(e.Key, "."))
		}
		return nil, located.Errors{e}
	}
	var errs located.Errors
	add := func(key string, line int, format string, args ...any) {
		errs = append(errs, &located.Error{File: file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for _, k := range md.Undecoded() {
		key := strings.Join(k, ".")
		add(key, lines.find(k), "unknown key (want default, args, [[node]] tables with mac or host, name, recipe, args, channel, tpm, ak_name, ek_name, and [[rollout]] tables with recipe, channels, promote_after, window, require_attestation)")
	}
	if inv.Default != "" && !recipeName.MatchString(inv.Default) {
		add("default", lines.top["default"], "want a recipe name ([a-z0-9][a-z0-9._-]*), got %q", inv.Default)
	}
	if err := checkArgs(inv.Args); err != nil {
		add("args", lines.top["args"], "%v", err)
	}
	macs := map[string]int{}
	for i := range inv.Nodes {
		r := &inv.Nodes[i]
		r.Line = lines.table(i)
		key := fmt.Sprintf("node[%d]", i)
		at := func(k string) int {
			if l := lines.inTable(i, k); l > 0 {
				return l
			}
			return r.Line
		}
		r.recipeLine = at("recipe")
		switch {
		case r.MAC == "" && r.Host == "":
			add(key, r.Line, "want mac or host")
		case r.MAC != "" && r.Host != "":
			add(key, r.Line, "want mac or host, not both")
		case r.MAC != "":
			mac, err := NormalizeMAC(r.MAC)
			if err != nil {
				add(key+".mac", at("mac"), "want a MAC address like 52:54:00:12:34:56, got %q", r.MAC)
				break
			}
			if first, dup := macs[mac]; dup {
				add(key+".mac", at("mac"), "%s is already given at line %d", mac, first)
			}
			macs[mac] = at("mac")
			r.MAC = mac
		default:
			if _, err := path.Match(r.Host, ""); err != nil || strings.ContainsAny(r.Host, " \t/") {
				add(key+".host", at("host"), "want a hostname or glob (*, ?, [a-z]), got %q", r.Host)
			}
		}
		if r.Recipe == "" && inv.Default == "" {
			add(key+".recipe", r.Line, "want a recipe name (there is no default)")
		}
		if r.Recipe != "" && !recipeName.MatchString(r.Recipe) {
			add(key+".recipe", at("recipe"), "want a recipe name ([a-z0-9][a-z0-9._-]*), got %q", r.Recipe)
		}
		if err := checkArgs(r.Args); err != nil {
			add(key+".args", at("args"), "%v", err)
		}
		if strings.ContainsAny(r.Name, "\x00\r\n") {
			add(key+".name", at("name"), "want one line, got %q", r.Name)
		}
		for _, pin := range []struct {
			k string
			v *string
		}{{"ak_name", &r.AKName}, {"ek_name", &r.EKName}} {
			if *pin.v == "" {
				continue
			}
			*pin.v = strings.ToLower(*pin.v)
			if !tpmName.MatchString(*pin.v) {
				add(key+"."+pin.k, at(pin.k), "want a TPM Name in hex (000b and 64 hex digits for a sha256 name), got %q", *pin.v)
			}
		}
		if r.MAC == "" && (r.TPM || r.AKName != "" || r.EKName != "") {
			add(key, r.Line, "tpm, ak_name and ek_name need a mac rule: a hostname is a claim anyone can make")
		}
	}
	checkRollouts(inv, lines, add)
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
		return nil, errs
	}
	return inv, nil
}

// CheckRecipes refuses an inventory that names a recipe no build serves.
func (inv *Inventory) CheckRecipes(file string, served []string) error {
	have := map[string]bool{}
	for _, r := range served {
		have[r] = true
	}
	var errs located.Errors
	if inv.Default != "" && !have[inv.Default] {
		errs = append(errs, &located.Error{File: file, Key: "default", Msg: fmt.Sprintf("recipe %q is not served (serving %s)", inv.Default, strings.Join(served, ", "))})
	}
	for i, r := range inv.Nodes {
		if r.Recipe != "" && !have[r.Recipe] {
			errs = append(errs, &located.Error{File: file, Line: r.recipeLine, Key: fmt.Sprintf("node[%d].recipe", i), Msg: fmt.Sprintf("recipe %q is not served (serving %s)", r.Recipe, strings.Join(served, ", "))})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Lookup finds the recipe for a node; ok is false when no rule matches and there is no default.
func (inv *Inventory) Lookup(mac, host string) (Match, bool) {
	pick := func(r Rule) Match {
		m := Match{Recipe: r.Recipe, Name: r.Name, Args: joinArgs(inv.Args, r.Args), Rule: r.Line, Channel: r.Channel}
		if m.Recipe == "" {
			m.Recipe = inv.Default
		}
		return m
	}
	if mac != "" {
		for _, r := range inv.Nodes {
			if r.MAC != "" && r.MAC == mac {
				return pick(r), true
			}
		}
	}
	if host != "" {
		for _, r := range inv.Nodes {
			if r.Host != "" {
				if ok, _ := path.Match(r.Host, host); ok {
					return pick(r), true
				}
			}
		}
	}
	if inv.Default == "" {
		return Match{}, false
	}
	return Match{Recipe: inv.Default, Args: inv.Args}, true
}

// ByMAC is the [[node]] rule naming mac; a hostname rule never matches here.
func (inv *Inventory) ByMAC(mac string) (Rule, bool) {
	if inv == nil || mac == "" {
		return Rule{}, false
	}
	for _, r := range inv.Nodes {
		if r.MAC != "" && r.MAC == mac {
			if r.Recipe == "" {
				r.Recipe = inv.Default
			}
			return r, true
		}
	}
	return Rule{}, false
}

func joinArgs(a, b string) string {
	return strings.TrimSpace(a + " " + b)
}

// checkArgs refuses kernel arguments that would change the iPXE script around them:
// iPXE expands ${...} and treats && || as operators; a newline would start a command.
func checkArgs(s string) error {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("want one line of printable characters, got %q", s)
		}
	}
	for _, bad := range []string{"$", "&", "|", "#", ";"} {
		if strings.Contains(s, bad) {
			return fmt.Errorf("%q cannot appear in kernel arguments (iPXE would interpret it), got %q", bad, s)
		}
	}
	for _, f := range strings.Fields(s) {
		switch k, _, _ := strings.Cut(f, "="); k {
		case bootproto.ArgReportURL, bootproto.ArgToken, bootproto.ArgNonce:
			return fmt.Errorf("%s is set by the server, not the inventory", k)
		}
	}
	return nil
}

// NormalizeMAC accepts 52:54:00:12:34:56, 52-54-00-12-34-56 or 525400123456, any
// case, and returns lower-case colon form.
func NormalizeMAC(s string) (string, error) {
	if len(s) == 12 && isHex(s) {
		var b strings.Builder
		for i := 0; i < 12; i += 2 {
			if i > 0 {
				b.WriteByte(':')
			}
			b.WriteString(s[i : i+2])
		}
		s = b.String()
	}
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("want a MAC address like 52:54:00:12:34:56, got %q", s)
	}
	return hw.String(), nil
}

// invLines locates keys: top-level keys, [[node]] headers and keys inside them.
type invLines struct {
	top    map[string]int
	tables []int
	keys   []map[string]int
	// [[rollout]] tables, likewise
	rollTables []int
	rollKeys   []map[string]int
}

func inventoryLines(data []byte) invLines {
	l := invLines{top: map[string]int{}}
	var cur map[string]int // the keys of the table being read; nil: top level
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "[[") {
			name := strings.TrimSpace(strings.Trim(stripTOMLComment(line), "[] "))
			cur = map[string]int{}
			switch name {
			case "node":
				l.tables = append(l.tables, n)
				l.keys = append(l.keys, cur)
			case "rollout":
				l.rollTables = append(l.rollTables, n)
				l.rollKeys = append(l.rollKeys, cur)
			}
			continue
		}
		if strings.HasPrefix(line, "[") {
			continue
		}
		k, _, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		k = strings.Trim(strings.TrimSpace(k), `"'`)
		if cur == nil {
			if _, seen := l.top[k]; !seen {
				l.top[k] = n
			}
		} else if cur[k] == 0 {
			cur[k] = n
		}
	}
	return l
}

func stripTOMLComment(s string) string {
	if i := strings.IndexByte(s, '#'); i >= 0 {
		return s[:i]
	}
	return s
}

func (l invLines) table(i int) int {
	if i < len(l.tables) {
		return l.tables[i]
	}
	return 0
}

func (l invLines) inTable(i int, key string) int {
	if i < len(l.keys) {
		return l.keys[i][key]
	}
	return 0
}

// find locates an undecoded key such as ["node", "0"?, "macc"] or ["colour"].
func (l invLines) find(k []string) int {
	if len(k) == 1 {
		return l.top[k[0]]
	}
	if k[0] == "node" || k[0] == "rollout" {
		// BurntSushi reports keys of array tables without an index: take the first table
		// that has the key.
		keys := l.keys
		if k[0] == "rollout" {
			keys = l.rollKeys
		}
		last := k[len(k)-1]
		for i := range keys {
			if n := keys[i][last]; n > 0 {
				return n
			}
		}
	}
	return l.top[k[0]]
}
