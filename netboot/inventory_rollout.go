package netboot

import (
	"fmt"
	"time"

	"github.com/peerboot/peerboot/rollout"
)

// RolloutPolicy is one [[rollout]] table of the inventory.
type RolloutPolicy struct {
	Recipe       string   `toml:"recipe"`
	Channels     []string `toml:"channels"`
	PromoteAfter int      `toml:"promote_after"` // default 1
	Window       string   `toml:"window"`        // a Go duration; default "24h"
	// RequireAttestation: true (every channel) or a list of channels whose votes
	// must be attested reports.
	RequireAttestation channelList `toml:"require_attestation"`
	Line               int         `toml:"-"`
	window             time.Duration
}

// channelList is require_attestation: true, false or a list of channel names.
type channelList struct {
	All      bool
	Channels []string
	bad      string
}

// UnmarshalTOML takes a boolean or an array of strings; anything else is kept
// for checkRollouts to report at its line.
func (c *channelList) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case bool:
		c.All = x
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				c.bad = fmt.Sprintf("%v", v)
				return nil
			}
			c.Channels = append(c.Channels, s)
		}
	default:
		c.bad = fmt.Sprintf("%v", v)
	}
	return nil
}

// Defaults of a [[rollout]] table's optional keys.
const (
	defaultPromoteAfter = 1
	defaultWindow       = 24 * time.Hour
)

// Policy is the rollout of recipe; ok is false when it has none (its newest build is
// served to every node, as without rollouts).
func (inv *Inventory) Policy(recipe string) (rollout.Policy, bool) {
	if inv == nil {
		return rollout.Policy{}, false
	}
	for _, r := range inv.Rollouts {
		if r.Recipe == recipe {
			req := r.RequireAttestation.Channels
			if r.RequireAttestation.All {
				req = r.Channels
			}
			return rollout.Policy{Recipe: r.Recipe, Channels: r.Channels, PromoteAfter: r.PromoteAfter, Window: r.window, RequireAttestation: req}, true
		}
	}
	return rollout.Policy{}, false
}

// checkRollouts checks the [[rollout]] tables and the channel of every [[node]] rule
// (it must be a channel of its recipe's rollout), filling in the defaults.
func checkRollouts(inv *Inventory, lines invLines, add func(key string, line int, format string, args ...any)) {
	seen := map[string]int{}
	for i := range inv.Rollouts {
		r := &inv.Rollouts[i]
		if i < len(lines.rollTables) {
			r.Line = lines.rollTables[i]
		}
		key := fmt.Sprintf("rollout[%d]", i)
		at := func(k string) int {
			if i < len(lines.rollKeys) && lines.rollKeys[i][k] > 0 {
				return lines.rollKeys[i][k]
			}
			return r.Line
		}
		switch {
		case r.Recipe == "":
			add(key+".recipe", r.Line, "want the recipe this rollout is for")
		case !recipeName.MatchString(r.Recipe):
			add(key+".recipe", at("recipe"), "want a recipe name ([a-z0-9][a-z0-9._-]*), got %q", r.Recipe)
		default:
			if first, dup := seen[r.Recipe]; dup {
				add(key+".recipe", at("recipe"), "recipe %s already has a rollout at line %d", r.Recipe, first)
			}
			seen[r.Recipe] = at("recipe")
		}
		if len(r.Channels) == 0 {
			add(key+".channels", at("channels"), `want the channels in promotion order, e.g. ["canary", "stable"]`)
		}
		chans := map[string]bool{}
		for _, c := range r.Channels {
			if !recipeName.MatchString(c) {
				add(key+".channels", at("channels"), "want channel names ([a-z0-9][a-z0-9._-]*), got %q", c)
			} else if chans[c] {
				add(key+".channels", at("channels"), "channel %q is listed twice", c)
			}
			chans[c] = true
		}
		if r.PromoteAfter == 0 && at("promote_after") == r.Line {
			r.PromoteAfter = defaultPromoteAfter
		}
		if r.PromoteAfter < 1 {
			add(key+".promote_after", at("promote_after"), "want a number of nodes, 1 or more, got %d", r.PromoteAfter)
		}
		if ra := r.RequireAttestation; ra.bad != "" {
			add(key+".require_attestation", at("require_attestation"), `want true, false or a list of channels, e.g. ["canary"], got %s`, ra.bad)
		} else {
			for _, c := range ra.Channels {
				if !chans[c] {
					add(key+".require_attestation", at("require_attestation"), "unknown channel %q (the rollout has %v)", c, r.Channels)
				}
			}
		}
		r.window = defaultWindow
		if r.Window != "" {
			d, err := time.ParseDuration(r.Window)
			if err != nil || d <= 0 {
				add(key+".window", at("window"), `want a duration such as "6h" or "90m", got %q`, r.Window)
			}
			r.window = d
		}
	}
	for i, n := range inv.Nodes {
		if n.Channel == "" {
			continue
		}
		recipe := n.Recipe
		if recipe == "" {
			recipe = inv.Default
		}
		line := n.Line
		if l := lines.inTable(i, "channel"); l > 0 {
			line = l
		}
		p, ok := inv.Policy(recipe)
		switch {
		case !ok:
			add(fmt.Sprintf("node[%d].channel", i), line, "recipe %q has no [[rollout]] table, so no channels", recipe)
		case !p.Has(n.Channel):
			add(fmt.Sprintf("node[%d].channel", i), line, "unknown channel %q (recipe %s has %v)", n.Channel, recipe, p.Channels)
		}
	}
}
