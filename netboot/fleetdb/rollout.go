package fleetdb

import (
	"context"
	"errors"
	"time"

	"github.com/peerboot/peerboot/rollout"
)

// ErrRolloutState is a manual action the rollout's state refuses (halting a halted
// rollout, promoting a build that cannot move): the API answers 409.
var ErrRolloutState = errors.New("rollout state")

// RolloutStore keeps the rollouts. Every decision runs in one write transaction that
// first locks the recipe (pg_advisory_xact_lock in PostgreSQL; SQLite has one writer),
// reads the state, applies the rollout rules and records their events, so replicas
// over one database never decide twice.
type RolloutStore interface {
	// SeeBuild records a build of p's recipe; the first time, the rules put it on
	// channels. It returns the events it recorded.
	SeeBuild(ctx context.Context, p rollout.Policy, build string, at time.Time) ([]rollout.Event, error)
	// RecordVerdict records a node's verdict on a build and its consequences, once per
	// report (SHA256): a replayed report returns Replay and changes nothing.
	RecordVerdict(ctx context.Context, p rollout.Policy, v RolloutVerdict) (*VerdictOutcome, error)
	// ServeBuild says which build a node on channel gets.
	ServeBuild(ctx context.Context, p rollout.Policy, channel, node string) (*ServeChoice, error)
	// Promote, Halt and Resume are the operator's.
	Promote(ctx context.Context, p rollout.Policy, build string, at time.Time) (rollout.Event, error)
	Halt(ctx context.Context, p rollout.Policy, reason string, at time.Time) (rollout.Event, error)
	Resume(ctx context.Context, p rollout.Policy, at time.Time) (rollout.Event, error)
	// ClearHold ends a node's hold (ErrNotFound: it has none).
	ClearHold(ctx context.Context, node string, at time.Time) (rollout.Event, error)
	// RolloutStatus is a recipe's channels, builds, holds and recent events.
	RolloutStatus(ctx context.Context, p rollout.Policy) (*RolloutStatus, error)
	// NodeRollout is a node's hold and the build last served to it.
	NodeRollout(ctx context.Context, node string) (*NodeRollout, error)
}

// RolloutVerdict is one stored report as the rollout sees it.
type RolloutVerdict struct {
	// ReportID, when set, is the stored report: its vote (counted) is recorded in
	// the verdict's transaction (report_votes).
	ReportID                     int64
	Recipe, Build, Node, Channel string
	Verdict                      string // selftest.Pass; anything else counts as a failure
	SHA256                       string // of the report: its consequences happen once
	At                           time.Time
}

// VerdictOutcome is what a verdict changed.
type VerdictOutcome struct {
	Replay bool
	Events []rollout.Event
}

// ServeChoice is the build a node gets, and why.
type ServeChoice struct {
	Build        string        // "" when the channel has no build yet
	Channel      string        // the node's channel (its rollout's default when it names none)
	ChannelBuild string        // the channel's build
	Hold         *rollout.Hold // nil: not held back
}

// ChannelStatus is one channel of a rollout.
type ChannelStatus struct {
	Name  string    `json:"name"`
	Build string    `json:"build"` // "" none yet
	Since time.Time `json:"since"`
}

// BuildStatus is one build of a rollout, in the order it was first seen, with the
// nodes whose latest verdict on it passed and failed.
type BuildStatus struct {
	Build     string    `json:"build"`
	Seq       int64     `json:"seq"`
	FirstSeen time.Time `json:"first_seen"`
	Pass      int       `json:"pass"`
	Fail      int       `json:"fail"`
	Channels  []string  `json:"channels"` // the channels serving it
}

// RolloutStatus is a recipe's rollout.
type RolloutStatus struct {
	Recipe       string          `json:"recipe"`
	Channels     []ChannelStatus `json:"channels"`
	PromoteAfter int             `json:"promote_after"`
	Window       string          `json:"window"`
	Halted       bool            `json:"halted"`
	HaltReason   string          `json:"halt_reason,omitempty"`
	Builds       []BuildStatus   `json:"builds"`
	HeldBack     []rollout.Hold  `json:"held_back"`
	Events       []rollout.Event `json:"events"` // newest first, at most maxEvents
}

// NodeRollout is a node's part in a rollout.
type NodeRollout struct {
	LastServedBuild  string        `json:"last_served_build"`
	LastServedRecipe string        `json:"last_served_recipe"`
	HeldBack         bool          `json:"held_back"`
	Hold             *rollout.Hold `json:"hold,omitempty"`
}
