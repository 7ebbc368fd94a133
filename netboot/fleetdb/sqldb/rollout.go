package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/rollout"
	"github.com/peerboot/peerboot/selftest"
)

// rolloutMigration is migration 4: what the rollouts keep. rollout_builds numbers
// every build in the order the service first saw it (seq: "newer" means a higher
// seq); rollout_verdicts is each node's latest verdict on each build and the channel
// it was on; rollout_applied makes a verdict's consequences happen once per report,
// however often it is replayed or at whichever replica.
const rolloutMigration = `CREATE TABLE rollout_builds (
	seq {{ID}},
	recipe TEXT NOT NULL,
	build TEXT NOT NULL,
	first_seen BIGINT NOT NULL,
	UNIQUE (recipe, build)
);
CREATE TABLE rollout_channels (
	recipe TEXT NOT NULL,
	channel TEXT NOT NULL,
	build TEXT NOT NULL,
	since BIGINT NOT NULL,
	PRIMARY KEY (recipe, channel)
);
CREATE TABLE rollout_state (
	recipe TEXT PRIMARY KEY,
	halted BIGINT NOT NULL DEFAULT 0,
	reason TEXT NOT NULL DEFAULT '',
	since BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE rollout_events (
	id {{ID}},
	recipe TEXT NOT NULL,
	at BIGINT NOT NULL,
	kind TEXT NOT NULL,
	build TEXT NOT NULL DEFAULT '',
	from_channel TEXT NOT NULL DEFAULT '',
	to_channel TEXT NOT NULL DEFAULT '',
	node_id TEXT NOT NULL DEFAULT '',
	reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX rollout_events_by_recipe ON rollout_events (recipe, id);
CREATE TABLE rollout_verdicts (
	recipe TEXT NOT NULL,
	build TEXT NOT NULL,
	node_id TEXT NOT NULL,
	channel TEXT NOT NULL,
	verdict TEXT NOT NULL,
	at BIGINT NOT NULL,
	PRIMARY KEY (recipe, build, node_id)
);
CREATE INDEX rollout_verdicts_by_node ON rollout_verdicts (node_id, at);
CREATE TABLE rollout_applied (sha256 TEXT PRIMARY KEY, at BIGINT NOT NULL);
CREATE TABLE rollout_holds (
	node_id TEXT PRIMARY KEY,
	recipe TEXT NOT NULL,
	failed_build TEXT NOT NULL,
	serve_build TEXT NOT NULL,
	since BIGINT NOT NULL
)`

const maxEvents = 50

// rolloutLockKey keeps the recipe locks apart from the migration lock (727265).
const rolloutLockKey = 727266

// lockRecipe serializes the decisions about one recipe across replicas until the
// transaction ends.
func (s *DB) lockRecipe(ctx context.Context, tx *sql.Tx, recipe string) error {
	if s.d.name != "postgres" {
		return nil // SQLite: the write transaction is the only writer
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, rolloutLockKey, recipe)
	return err
}

// decide runs fn in a write transaction holding recipe's lock.
func (s *DB) decide(ctx context.Context, recipe string, fn func(*sql.Tx) error) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := s.lockRecipe(ctx, tx, recipe); err != nil {
			return fmt.Errorf("locking the rollout of %s: %w", recipe, err)
		}
		return fn(tx)
	})
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}

func loadRolloutState(ctx context.Context, q querier, recipe string) (rollout.State, string, error) {
	st := rollout.State{Channels: map[string]rollout.Assignment{}}
	rows, err := q.QueryContext(ctx, `SELECT channel, build, since FROM rollout_channels WHERE recipe = $1`, recipe)
	if err != nil {
		return st, "", err
	}
	for rows.Next() {
		var ch, b string
		var since int64
		if err := rows.Scan(&ch, &b, &since); err != nil {
			rows.Close()
			return st, "", err
		}
		st.Channels[ch] = rollout.Assignment{Build: b, Since: fromMicros(since)}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, "", err
	}
	var halted int64
	var reason string
	err = q.QueryRowContext(ctx, `SELECT halted, reason FROM rollout_state WHERE recipe = $1`, recipe).Scan(&halted, &reason)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return st, "", err
	}
	st.Halted = halted != 0
	return st, reason, nil
}

// record stores an event and what it changes.
func record(ctx context.Context, tx *sql.Tx, ev rollout.Event) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO rollout_events (recipe, at, kind, build, from_channel, to_channel, node_id, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		ev.Recipe, micros(ev.At), string(ev.Kind), ev.Build, ev.From, ev.To, ev.Node, ev.Reason); err != nil {
		return err
	}
	var err error
	switch ev.Kind {
	case rollout.Enter, rollout.Promote:
		_, err = tx.ExecContext(ctx, `INSERT INTO rollout_channels (recipe, channel, build, since) VALUES ($1, $2, $3, $4)
ON CONFLICT (recipe, channel) DO UPDATE SET build = excluded.build, since = excluded.since`, ev.Recipe, ev.To, ev.Build, micros(ev.At))
	case rollout.Halt, rollout.Resume:
		halted := 0
		if ev.Kind == rollout.Halt {
			halted = 1
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO rollout_state (recipe, halted, reason, since) VALUES ($1, $2, $3, $4)
ON CONFLICT (recipe) DO UPDATE SET halted = excluded.halted, reason = excluded.reason, since = excluded.since`, ev.Recipe, halted, ev.Reason, micros(ev.At))
	}
	return err
}

func (s *DB) SeeBuild(ctx context.Context, p rollout.Policy, build string, at time.Time) ([]rollout.Event, error) {
	var evs []rollout.Event
	err := s.decide(ctx, p.Recipe, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO rollout_builds (recipe, build, first_seen) VALUES ($1, $2, $3) ON CONFLICT (recipe, build) DO NOTHING`, p.Recipe, build, micros(at))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // seen before
		}
		st, _, err := loadRolloutState(ctx, tx, p.Recipe)
		if err != nil {
			return err
		}
		evs = rollout.NewBuild(p, st, build, at)
		for _, ev := range evs {
			if err := record(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recording build %s of %s: %w", build, p.Recipe, err)
	}
	return evs, nil
}

func loadHold(ctx context.Context, q querier, node string) (*rollout.Hold, error) {
	h := &rollout.Hold{Node: node}
	var since int64
	err := q.QueryRowContext(ctx, `SELECT recipe, failed_build, serve_build, since FROM rollout_holds WHERE node_id = $1`, node).Scan(&h.Recipe, &h.Failed, &h.Serve, &since)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	h.Since = fromMicros(since)
	return h, nil
}

func (s *DB) RecordVerdict(ctx context.Context, p rollout.Policy, v fleetdb.RolloutVerdict) (*fleetdb.VerdictOutcome, error) {
	out := &fleetdb.VerdictOutcome{}
	if v.At.IsZero() {
		v.At = time.Now()
	}
	if v.Channel == "" {
		v.Channel = p.Default()
	}
	verdict := rollout.Verdict{Node: v.Node, Channel: v.Channel, Build: v.Build, Pass: v.Verdict == selftest.Pass, At: v.At}
	err := s.decide(ctx, p.Recipe, func(tx *sql.Tx) error {
		out.Events = nil
		res, err := tx.ExecContext(ctx, `INSERT INTO rollout_applied (sha256, at) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING`, v.SHA256, micros(v.At))
		if err != nil {
			return err
		}
		if v.ReportID > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO report_votes (report_id, recipe, counted, reason) VALUES ($1, $2, 1, '') ON CONFLICT (report_id) DO NOTHING`,
				v.ReportID, p.Recipe); err != nil {
				return err
			}
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			out.Replay = true
			return nil
		}
		stored := selftest.Fail
		if verdict.Pass {
			stored = selftest.Pass
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO rollout_verdicts (recipe, build, node_id, channel, verdict, at) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (recipe, build, node_id) DO UPDATE SET channel = excluded.channel, verdict = excluded.verdict, at = excluded.at`,
			p.Recipe, v.Build, v.Node, v.Channel, stored, micros(v.At)); err != nil {
			return err
		}
		st, _, err := loadRolloutState(ctx, tx, p.Recipe)
		if err != nil {
			return err
		}
		latest, err := buildVerdicts(ctx, tx, p.Recipe, v.Build)
		if err != nil {
			return err
		}
		out.Events = append(out.Events, rollout.AfterVerdict(p, st, verdict, latest)...)

		cur, err := loadHold(ctx, tx, v.Node)
		if err != nil {
			return err
		}
		if cur != nil && cur.Recipe != p.Recipe {
			cur = nil // held for another recipe: this verdict does not concern that hold
		}
		var lastPass string
		err = tx.QueryRowContext(ctx, `SELECT build FROM rollout_verdicts WHERE recipe = $1 AND node_id = $2 AND verdict = $3 AND build <> $4 ORDER BY at DESC LIMIT 1`,
			p.Recipe, v.Node, selftest.Pass, v.Build).Scan(&lastPass)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		seqs, err := buildSeqs(ctx, tx, p.Recipe)
		if err != nil {
			return err
		}
		newer := func(a, b string) bool {
			sa, oka := seqs[a]
			sb, okb := seqs[b]
			return oka && okb && sa > sb
		}
		next := rollout.NodeAfterVerdict(p.Recipe, cur, verdict, lastPass, newer)
		switch {
		case next == cur:
		case next == nil:
			if _, err := tx.ExecContext(ctx, `DELETE FROM rollout_holds WHERE node_id = $1`, v.Node); err != nil {
				return err
			}
			out.Events = append(out.Events, rollout.Event{Kind: rollout.Cleared, Recipe: p.Recipe, Build: v.Build, Node: v.Node,
				Reason: fmt.Sprintf("build %s, newer than %s, passed", v.Build, cur.Failed), At: v.At})
		default:
			if _, err := tx.ExecContext(ctx, `INSERT INTO rollout_holds (node_id, recipe, failed_build, serve_build, since) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (node_id) DO UPDATE SET recipe = excluded.recipe, failed_build = excluded.failed_build, serve_build = excluded.serve_build, since = excluded.since`,
				v.Node, p.Recipe, next.Failed, next.Serve, micros(next.Since)); err != nil {
				return err
			}
			reason := fmt.Sprintf("FAIL on build %s: served %s", next.Failed, next.Serve)
			if next.Serve == "" {
				reason = fmt.Sprintf("FAIL on build %s: no build passed on it before, served its channel's", next.Failed)
			}
			out.Events = append(out.Events, rollout.Event{Kind: rollout.Held, Recipe: p.Recipe, Build: next.Serve, Node: v.Node, Reason: reason, At: v.At})
		}
		for _, ev := range out.Events {
			if err := record(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recording the verdict of %s on build %s: %w", v.Node, v.Build, err)
	}
	return out, nil
}

func buildVerdicts(ctx context.Context, q querier, recipe, build string) ([]rollout.Verdict, error) {
	rows, err := q.QueryContext(ctx, `SELECT node_id, channel, verdict, at FROM rollout_verdicts WHERE recipe = $1 AND build = $2`, recipe, build)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []rollout.Verdict
	for rows.Next() {
		var v rollout.Verdict
		var verdict string
		var at int64
		if err := rows.Scan(&v.Node, &v.Channel, &verdict, &at); err != nil {
			return nil, err
		}
		v.Build, v.Pass, v.At = build, verdict == selftest.Pass, fromMicros(at)
		out = append(out, v)
	}
	return out, rows.Err()
}

func buildSeqs(ctx context.Context, q querier, recipe string) (map[string]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT build, seq FROM rollout_builds WHERE recipe = $1`, recipe)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var b string
		var seq int64
		if err := rows.Scan(&b, &seq); err != nil {
			return nil, err
		}
		out[b] = seq
	}
	return out, rows.Err()
}

func (s *DB) ServeBuild(ctx context.Context, p rollout.Policy, channel, node string) (*fleetdb.ServeChoice, error) {
	if channel == "" {
		channel = p.Default()
	}
	st, _, err := loadRolloutState(ctx, s.db, p.Recipe)
	if err != nil {
		return nil, fmt.Errorf("reading the rollout of %s: %w", p.Recipe, err)
	}
	h, err := loadHold(ctx, s.db, node)
	if err != nil {
		return nil, fmt.Errorf("reading the hold of %s: %w", node, err)
	}
	if h != nil && h.Recipe != p.Recipe {
		h = nil
	}
	return &fleetdb.ServeChoice{Build: rollout.Serve(p, st, channel, h), Channel: channel, ChannelBuild: st.Channels[channel].Build, Hold: h}, nil
}

func (s *DB) manual(ctx context.Context, p rollout.Policy, what string, fn func(tx *sql.Tx, st rollout.State) (rollout.Event, error)) (rollout.Event, error) {
	var ev rollout.Event
	err := s.decide(ctx, p.Recipe, func(tx *sql.Tx) error {
		st, _, err := loadRolloutState(ctx, tx, p.Recipe)
		if err != nil {
			return err
		}
		if ev, err = fn(tx, st); err != nil {
			return err
		}
		return record(ctx, tx, ev)
	})
	if err != nil {
		return rollout.Event{}, fmt.Errorf("%s %s: %w", what, p.Recipe, err)
	}
	return ev, nil
}

func (s *DB) Promote(ctx context.Context, p rollout.Policy, build string, at time.Time) (rollout.Event, error) {
	return s.manual(ctx, p, "promoting", func(tx *sql.Tx, st rollout.State) (rollout.Event, error) {
		if build != "" {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM rollout_builds WHERE recipe = $1 AND build = $2`, p.Recipe, build).Scan(&n); err != nil {
				return rollout.Event{}, err
			}
			if n == 0 {
				return rollout.Event{}, fmt.Errorf("build %s is not a build of %s the service has seen: %w", build, p.Recipe, fleetdb.ErrNotFound)
			}
		}
		ev, err := rollout.ManualPromote(p, st, build, at)
		if err != nil {
			return ev, fmt.Errorf("%w: %w", fleetdb.ErrRolloutState, err)
		}
		return ev, nil
	})
}

func (s *DB) Halt(ctx context.Context, p rollout.Policy, reason string, at time.Time) (rollout.Event, error) {
	return s.manual(ctx, p, "halting", func(tx *sql.Tx, st rollout.State) (rollout.Event, error) {
		if st.Halted {
			return rollout.Event{}, fmt.Errorf("%w: already halted", fleetdb.ErrRolloutState)
		}
		if reason == "" {
			reason = "manual"
		}
		return rollout.Event{Kind: rollout.Halt, Recipe: p.Recipe, Reason: reason, At: at}, nil
	})
}

func (s *DB) Resume(ctx context.Context, p rollout.Policy, at time.Time) (rollout.Event, error) {
	return s.manual(ctx, p, "resuming", func(tx *sql.Tx, st rollout.State) (rollout.Event, error) {
		if !st.Halted {
			return rollout.Event{}, fmt.Errorf("%w: not halted", fleetdb.ErrRolloutState)
		}
		return rollout.Event{Kind: rollout.Resume, Recipe: p.Recipe, Reason: "manual", At: at}, nil
	})
}

func (s *DB) ClearHold(ctx context.Context, node string, at time.Time) (rollout.Event, error) {
	h, err := loadHold(ctx, s.db, node)
	if err != nil {
		return rollout.Event{}, fmt.Errorf("reading the hold of %s: %w", node, err)
	}
	if h == nil {
		return rollout.Event{}, fmt.Errorf("node %s is not held back: %w", node, fleetdb.ErrNotFound)
	}
	var ev rollout.Event
	err = s.decide(ctx, h.Recipe, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM rollout_holds WHERE node_id = $1`, node)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("node %s is not held back: %w", node, fleetdb.ErrNotFound)
		}
		ev = rollout.Event{Kind: rollout.Cleared, Recipe: h.Recipe, Build: h.Failed, Node: node, Reason: "manual", At: at}
		return record(ctx, tx, ev)
	})
	if err != nil {
		return rollout.Event{}, fmt.Errorf("clearing %s: %w", node, err)
	}
	return ev, nil
}

func (s *DB) RolloutStatus(ctx context.Context, p rollout.Policy) (*fleetdb.RolloutStatus, error) {
	fail := func(err error) (*fleetdb.RolloutStatus, error) {
		return nil, fmt.Errorf("reading the rollout of %s: %w", p.Recipe, err)
	}
	st, reason, err := loadRolloutState(ctx, s.db, p.Recipe)
	if err != nil {
		return fail(err)
	}
	out := &fleetdb.RolloutStatus{Recipe: p.Recipe, PromoteAfter: p.PromoteAfter, Window: p.Window.String(), Halted: st.Halted,
		Channels: []fleetdb.ChannelStatus{}, Builds: []fleetdb.BuildStatus{}, HeldBack: []rollout.Hold{}, Events: []rollout.Event{}}
	if st.Halted {
		out.HaltReason = reason
	}
	on := map[string][]string{}
	for _, ch := range p.Channels {
		a := st.Channels[ch]
		out.Channels = append(out.Channels, fleetdb.ChannelStatus{Name: ch, Build: a.Build, Since: a.Since})
		if a.Build != "" {
			on[a.Build] = append(on[a.Build], ch)
		}
	}
	rows, err := s.db.QueryContext(ctx, `SELECT b.build, b.seq, b.first_seen,
	(SELECT COUNT(*) FROM rollout_verdicts v WHERE v.recipe = b.recipe AND v.build = b.build AND v.verdict = $2),
	(SELECT COUNT(*) FROM rollout_verdicts v WHERE v.recipe = b.recipe AND v.build = b.build AND v.verdict <> $2)
FROM rollout_builds b WHERE b.recipe = $1 ORDER BY b.seq`, p.Recipe, selftest.Pass)
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var b fleetdb.BuildStatus
		var first int64
		if err := rows.Scan(&b.Build, &b.Seq, &first, &b.Pass, &b.Fail); err != nil {
			rows.Close()
			return fail(err)
		}
		b.FirstSeen, b.Channels = fromMicros(first), on[b.Build]
		if b.Channels == nil {
			b.Channels = []string{}
		}
		out.Builds = append(out.Builds, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	rows, err = s.db.QueryContext(ctx, `SELECT node_id, failed_build, serve_build, since FROM rollout_holds WHERE recipe = $1 ORDER BY since, node_id`, p.Recipe)
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		h := rollout.Hold{Recipe: p.Recipe}
		var since int64
		if err := rows.Scan(&h.Node, &h.Failed, &h.Serve, &since); err != nil {
			rows.Close()
			return fail(err)
		}
		h.Since = fromMicros(since)
		out.HeldBack = append(out.HeldBack, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	rows, err = s.db.QueryContext(ctx, `SELECT at, kind, build, from_channel, to_channel, node_id, reason FROM rollout_events WHERE recipe = $1 ORDER BY id DESC LIMIT $2`, p.Recipe, maxEvents)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		ev := rollout.Event{Recipe: p.Recipe}
		var at int64
		if err := rows.Scan(&at, &ev.Kind, &ev.Build, &ev.From, &ev.To, &ev.Node, &ev.Reason); err != nil {
			return fail(err)
		}
		ev.At = fromMicros(at)
		out.Events = append(out.Events, ev)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return out, nil
}

func (s *DB) NodeRollout(ctx context.Context, node string) (*fleetdb.NodeRollout, error) {
	out := &fleetdb.NodeRollout{}
	err := s.db.QueryRowContext(ctx, `SELECT build, recipe FROM boots WHERE node_id = $1 ORDER BY id DESC LIMIT 1`, node).Scan(&out.LastServedBuild, &out.LastServedRecipe)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("reading the boots of %s: %w", node, err)
	}
	if out.Hold, err = loadHold(ctx, s.db, node); err != nil {
		return nil, fmt.Errorf("reading the hold of %s: %w", node, err)
	}
	out.HeldBack = out.Hold != nil
	return out, nil
}
