// Package rollout holds the rules that move a recipe's builds through its channels
// and hold back nodes a build failed on. It decides only: the caller loads the state
// (inside the transaction that will record the outcome), calls these functions and
// stores the events they return. No I/O, no clock: every time is an argument.
package rollout

import (
	"errors"
	"fmt"
	"time"
)

// Policy is one recipe's [[rollout]] table.
type Policy struct {
	Recipe string
	// Channels in promotion order; the last one is where nodes that name no channel go.
	Channels []string
	// PromoteAfter distinct nodes of a channel posting PASS for its build, within Window
	// of the build entering the channel and with no FAIL, promote it to the next channel.
	PromoteAfter int
	Window       time.Duration
	// RequireAttestation lists the channels on which only attested reports vote.
	RequireAttestation []string
}

// Requires says whether ch's votes must be attested.
func (p Policy) Requires(ch string) bool {
	for _, c := range p.RequireAttestation {
		if c == ch {
			return true
		}
	}
	return false
}

// Voter is what the server knows of a stored report's node when deciding whether
// its verdict counts toward a rollout (Counts).
type Voter struct {
	Node string
	// Listed: the inventory names the node's MAC in a [[node]] rule. A hostname
	// glob, a serial or an address is a claim anyone can make, never a voter.
	Listed  bool
	Recipe  string // the recipe the inventory gives the node
	Channel string // its channel ("" : the policy's default)
	// Attested: the report came with evidence that verified (a TPM quote).
	Attested bool
	// Why the node must attest, if it must: an AK on record, tpm = true or a
	// pinned AK/EK in the inventory. "": it need not (unless its channel does).
	MustAttest string
}

// Counts decides whether a report of v about recipe is a vote in p; when it is
// not, why says so for the fleet page.
func Counts(p Policy, recipe string, v Voter) (ok bool, why string) {
	ch := v.Channel
	if ch == "" {
		ch = p.Default()
	}
	switch {
	case !v.Listed:
		return false, fmt.Sprintf("node %s is not in the inventory by MAC: only [[node]] mac = rules vote", v.Node)
	case v.Recipe != recipe:
		return false, fmt.Sprintf("the inventory gives node %s recipe %s, not %s", v.Node, v.Recipe, recipe)
	case v.Attested:
		return true, ""
	case v.MustAttest != "":
		return false, fmt.Sprintf("unattested: node %s votes only with an attested report (%s)", v.Node, v.MustAttest)
	case p.Requires(ch):
		return false, fmt.Sprintf("unattested: channel %s of %s has require_attestation", ch, p.Recipe)
	}
	return true, ""
}

// Default is the channel of nodes that name none: the last.
func (p Policy) Default() string {
	if len(p.Channels) == 0 {
		return ""
	}
	return p.Channels[len(p.Channels)-1]
}

// Next is the channel after ch; ok is false for the last one (or an unknown one).
func (p Policy) Next(ch string) (string, bool) {
	for i, c := range p.Channels {
		if c == ch && i+1 < len(p.Channels) {
			return p.Channels[i+1], true
		}
	}
	return "", false
}

// Has says whether ch is one of the policy's channels.
func (p Policy) Has(ch string) bool {
	for _, c := range p.Channels {
		if c == ch {
			return true
		}
	}
	return false
}

// Assignment is the build a channel serves and since when.
type Assignment struct {
	Build string
	Since time.Time
}

// State is a recipe's rollout as stored.
type State struct {
	Channels map[string]Assignment // channel -> build; a channel without a build is absent
	Halted   bool
}

// EventKind is what an Event records.
type EventKind string

// Event kinds: the rules' own (Apply acts on them), then the holds the store
// records beside them (Apply ignores those).
const (
	Enter   EventKind = "enter"   // a build goes onto a channel (a new build, or bootstrap)
	Promote EventKind = "promote" // a build moves from one channel to the next
	Halt    EventKind = "halt"    // automatic promotion stops (a FAIL, or an operator)
	Resume  EventKind = "resume"  // automatic promotion starts again
	Held    EventKind = "hold"    // a node is held back on the build it last passed
	Cleared EventKind = "clear"   // a node's hold ends
)

// Event is one decision, recorded as it is made.
type Event struct {
	Kind   EventKind `json:"kind"`
	Recipe string    `json:"recipe"`
	Build  string    `json:"build,omitempty"`
	From   string    `json:"from,omitempty"`
	To     string    `json:"to,omitempty"`
	Node   string    `json:"node,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Apply returns st with ev's channel changes and halt state applied.
func Apply(st State, ev Event) State {
	out := State{Channels: map[string]Assignment{}, Halted: st.Halted}
	for k, v := range st.Channels {
		out.Channels[k] = v
	}
	switch ev.Kind {
	case Enter, Promote:
		out.Channels[ev.To] = Assignment{Build: ev.Build, Since: ev.At}
	case Halt:
		out.Halted = true
	case Resume:
		out.Halted = false
	}
	return out
}

// NewBuild decides where a build seen for the first time goes: onto every channel
// when the recipe has none with a build yet (the first build bootstraps the
// rollout), else onto the first channel.
func NewBuild(p Policy, st State, build string, now time.Time) []Event {
	if len(p.Channels) == 0 {
		return nil
	}
	if len(st.Channels) == 0 {
		evs := make([]Event, 0, len(p.Channels))
		for _, ch := range p.Channels {
			evs = append(evs, Event{Kind: Enter, Recipe: p.Recipe, Build: build, To: ch, Reason: "first build of the recipe", At: now})
		}
		return evs
	}
	return []Event{{Kind: Enter, Recipe: p.Recipe, Build: build, To: p.Channels[0], Reason: "new build", At: now}}
}

// Verdict is a node's latest verdict on a build, and the channel it was on.
type Verdict struct {
	Node    string
	Channel string
	Build   string
	Pass    bool
	At      time.Time
}

// AfterVerdict decides what v changes, given every node's latest verdict on v's
// build (v among them): a FAIL halts the rollout; a PASS that makes PromoteAfter
// distinct passing nodes of the channel within the window, none failing, promotes
// the channel's build to the next channel. A verdict on a build its channel no
// longer serves (a held-back node's, or a late one) promotes nothing.
func AfterVerdict(p Policy, st State, v Verdict, latest []Verdict) []Event {
	if !v.Pass {
		if st.Halted {
			return nil
		}
		return []Event{{Kind: Halt, Recipe: p.Recipe, Build: v.Build, Node: v.Node,
			Reason: fmt.Sprintf("FAIL from node %s on build %s", v.Node, v.Build), At: v.At}}
	}
	if st.Halted {
		return nil
	}
	a, ok := st.Channels[v.Channel]
	if !ok || a.Build != v.Build {
		return nil
	}
	next, ok := p.Next(v.Channel)
	if !ok || st.Channels[next].Build == v.Build {
		return nil
	}
	end := a.Since.Add(p.Window)
	passed := map[string]bool{}
	for _, o := range latest {
		if o.Build != v.Build || o.Channel != v.Channel || o.At.Before(a.Since) {
			continue
		}
		if !o.Pass {
			return nil
		}
		if !o.At.After(end) {
			passed[o.Node] = true
		}
	}
	if len(passed) < p.PromoteAfter {
		return nil
	}
	return []Event{{Kind: Promote, Recipe: p.Recipe, Build: v.Build, From: v.Channel, To: next,
		Reason: fmt.Sprintf("%d passes", len(passed)), At: v.At}}
}

// ErrPromote is why a manual promotion cannot be made.
var ErrPromote = errors.New("cannot promote")

// ManualPromote moves build ("" : the build of the first channel whose build differs
// from the next channel's) from the last channel it is on to the next one; a build on
// no channel goes onto the first. It works while the rollout is halted.
func ManualPromote(p Policy, st State, build string, now time.Time) (Event, error) {
	if len(p.Channels) == 0 {
		return Event{}, fmt.Errorf("%w: recipe %s has no channels", ErrPromote, p.Recipe)
	}
	if build == "" {
		for i := 0; i+1 < len(p.Channels); i++ {
			a, b := st.Channels[p.Channels[i]], st.Channels[p.Channels[i+1]]
			if a.Build != "" && a.Build != b.Build {
				build = a.Build
				break
			}
		}
		if build == "" {
			return Event{}, fmt.Errorf("%w: every channel of %s serves the same build; name one", ErrPromote, p.Recipe)
		}
	}
	from := ""
	for _, ch := range p.Channels {
		if st.Channels[ch].Build == build {
			from = ch
		}
	}
	to := p.Channels[0]
	if from != "" {
		next, ok := p.Next(from)
		if !ok {
			return Event{}, fmt.Errorf("%w: build %s is already on %s, the last channel of %s", ErrPromote, build, from, p.Recipe)
		}
		to = next
	}
	return Event{Kind: Promote, Recipe: p.Recipe, Build: build, From: from, To: to, Reason: "manual", At: now}, nil
}

// Hold is a node held back after a build failed on it: it is served Serve (the last
// build that passed on it; "" none: its channel's build) until an operator clears it
// or a build newer than Failed passes on it.
type Hold struct {
	Node   string    `json:"node"`
	Recipe string    `json:"recipe"`
	Failed string    `json:"failed_build"`
	Serve  string    `json:"serve_build,omitempty"`
	Since  time.Time `json:"since"`
}

// NodeAfterVerdict is a node's hold after v: a FAIL holds it on lastPass (the build
// that last passed on it, other than v's); a PASS on a build newer than the held
// one's failed build clears it; anything else leaves cur as it is. newer(a, b)
// says whether a entered the catalogue after b.
func NodeAfterVerdict(recipe string, cur *Hold, v Verdict, lastPass string, newer func(a, b string) bool) *Hold {
	if !v.Pass {
		if lastPass == v.Build {
			lastPass = ""
		}
		return &Hold{Node: v.Node, Recipe: recipe, Failed: v.Build, Serve: lastPass, Since: v.At}
	}
	if cur != nil && v.Build != cur.Failed && newer(v.Build, cur.Failed) {
		return nil
	}
	return cur
}

// Serve is the build a node gets: its hold's build when it has one, else its
// channel's ("" : the default channel's). "" when the channel has no build yet.
func Serve(p Policy, st State, channel string, hold *Hold) string {
	if hold != nil && hold.Serve != "" {
		return hold.Serve
	}
	if channel == "" {
		channel = p.Default()
	}
	return st.Channels[channel].Build
}
