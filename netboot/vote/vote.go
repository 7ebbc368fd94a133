// Package vote is the report pipeline's last stage (docs/design.md, "serve's
// report pipeline"): whether a stored report is a vote in its recipe's
// rollout, and the vote's consequences. The rules are the pure rollout
// package's (rollout.Counts, and the ones RecordVerdict applies); this stage
// gathers their facts (the inventory's listing of the node, the report's
// attestation as stored, the node's AK) and records the outcome through the
// small interfaces of fleetdb.
package vote

import (
	"context"
	"log/slog"

	"github.com/peerboot/peerboot/netboot/attestation"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/rollout"
)

// Store is what the stage reads and writes.
type Store interface {
	fleetdb.AttestationReader
	NodeAK(ctx context.Context, node string) (*fleetdb.NodeAK, error)
	RecordVote(ctx context.Context, id int64, v fleetdb.Vote) error
	RecordVerdict(ctx context.Context, p rollout.Policy, v fleetdb.RolloutVerdict) (*fleetdb.VerdictOutcome, error)
}

// Listing is what the inventory says of a node: only a [[node]] rule naming
// its MAC lists it.
type Listing struct {
	Recipe, Channel string
	// MustAttest says why the node votes only attested ("": it need not),
	// from the inventory: a pinned TPM, or tpm = true.
	MustAttest string
}

// Facts are what the inventory and the catalogue say of a report: its
// recipe's rollout, and the node's listing.
type Facts struct {
	Recipe    string         // the recipe of the report's build
	Policy    rollout.Policy // the recipe's rollout
	HasPolicy bool           // false: the recipe has no rollout, nothing votes
	Listing   Listing
	Listed    bool // false: no [[node]] rule names the node's MAC
}

// Config is the stage's setting; Store is required.
type Config struct {
	Store Store
	Log   *slog.Logger
}

// Stage decides and records votes.
type Stage struct{ cfg Config }

// New makes the stage.
func New(cfg Config) *Stage {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Stage{cfg: cfg}
}

// Cast records a stored report's verdict with the rollout of its recipe, if
// the report is a vote (rollout.Counts): only a node the inventory names by
// MAC votes, and one with a TPM on record votes only attested. Whether it
// counted, and why not, is recorded for the pages. It runs for a report just
// stored and for a retry of one (idempotent in the store), so a replica that
// died between storing a report and deciding on it loses nothing once the
// node retries. A failure is logged: the report itself is stored.
func (s *Stage) Cast(ctx context.Context, sr *fleetdb.StoredReport, f Facts) {
	if sr.Build == "" || !f.HasPolicy {
		return
	}
	p, recipe := f.Policy, f.Recipe
	v, err := s.voter(ctx, sr, f)
	if err != nil {
		s.cfg.Log.Error("rollout: who reported", "node", sr.NodeID, "build", sr.Build, "error", err.Error())
		return // not counted, not recorded: the node's retry decides again
	}
	counted, why := rollout.Counts(p, recipe, v)
	if !counted {
		s.cfg.Log.Warn("rollout: report not counted", "node", sr.NodeID, "build", sr.Build, "verdict", sr.Verdict, "why", why)
		if sr.ID > 0 {
			if err := s.cfg.Store.RecordVote(ctx, sr.ID, fleetdb.Vote{Recipe: recipe, Reason: why}); err != nil {
				s.cfg.Log.Error("rollout: recording a vote", "node", sr.NodeID, "error", err.Error())
			}
		}
		return
	}
	// A vote: recorded with its consequences, in one transaction.
	out, err := s.cfg.Store.RecordVerdict(ctx, p, fleetdb.RolloutVerdict{ReportID: sr.ID, Recipe: recipe, Build: sr.Build, Node: sr.NodeID, Channel: v.Channel,
		Verdict: sr.Verdict, SHA256: sr.SHA256, At: sr.ReceivedAt})
	if err != nil {
		s.cfg.Log.Error("rollout: recording a verdict", "node", sr.NodeID, "build", sr.Build, "error", err.Error())
		return
	}
	for _, ev := range out.Events {
		LogEvent(s.cfg.Log, ev)
	}
}

// voter is what the inventory and the store say of a stored report's node. The
// report's attestation is read back from the store (a retry carries none of its
// own); the node is listed only by a [[node]] rule naming its MAC.
func (s *Stage) voter(ctx context.Context, sr *fleetdb.StoredReport, f Facts) (rollout.Voter, error) {
	v := rollout.Voter{Node: sr.NodeID, Attested: sr.Attestation == fleetdb.Attested}
	if sr.ID > 0 {
		got, err := s.cfg.Store.Attestations(ctx, []int64{sr.ID})
		if err != nil {
			return v, err
		}
		v.Attested = got[sr.ID].Status == fleetdb.Attested
	}
	if !f.Listed {
		return v, nil
	}
	l := f.Listing
	v.Listed, v.Recipe, v.Channel, v.MustAttest = true, l.Recipe, l.Channel, l.MustAttest
	if v.MustAttest == "" {
		ak, err := s.cfg.Store.NodeAK(ctx, sr.NodeID)
		if err != nil {
			return v, err
		}
		if ak != nil {
			v.MustAttest = "it has AK " + attestation.Clip(ak.AKName) + " on record"
		}
	}
	return v, nil
}

// LogEvent logs a rollout event the one way serve does.
func LogEvent(log *slog.Logger, ev rollout.Event) {
	log.Info("rollout: "+string(ev.Kind), "recipe", ev.Recipe, "build", ev.Build, "from", ev.From, "to", ev.To, "node", ev.Node, "reason", ev.Reason)
}
