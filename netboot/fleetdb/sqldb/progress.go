package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// progressMigration is migration 7 (issue 32): each node's latest burn-in progress,
// one row a node (bounded as the nodes are: retention's orphan sweep takes the row
// of a node it deletes). The summary columns are what the fleet page reads.
const progressMigration = `CREATE TABLE soak_progress (
	node_id TEXT PRIMARY KEY,
	received_at BIGINT NOT NULL,
	recipe TEXT NOT NULL,
	build TEXT NOT NULL,
	remote TEXT NOT NULL,
	state TEXT NOT NULL,
	elapsed_ms BIGINT NOT NULL,
	requested_ms BIGINT NOT NULL,
	rounds BIGINT NOT NULL,
	faulty BIGINT NOT NULL,
	first_fault TEXT NOT NULL,
	body {{BLOB}} NOT NULL
)`

// progressStopMigration is migration 8 (issue 32): an operator's request that the
// node's burn-in stop (POST /api/nodes/{node}/soak/stop); stop_at 0 is none.
const progressStopMigration = `ALTER TABLE soak_progress ADD COLUMN stop_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE soak_progress ADD COLUMN stop_by TEXT NOT NULL DEFAULT '';
ALTER TABLE soak_progress ADD COLUMN stop_reason TEXT NOT NULL DEFAULT '';`

// sameBurnIn is true in SetProgress's upsert while the stored progress and the new
// one are the same burn-in: the stored one still running and the new one no earlier
// in it. A stop request outlives neither the burn-in's end nor a reboot into another.
const sameBurnIn = `soak_progress.state = 'running' AND excluded.elapsed_ms >= soak_progress.elapsed_ms`

func (s *DB) SetProgress(ctx context.Context, p fleetdb.Progress) error {
	if p.ReceivedAt.IsZero() {
		p.ReceivedAt = time.Now()
	}
	at := p.ReceivedAt.UnixMicro()
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO nodes (id, first_seen, last_seen) VALUES ($1, $2, $2)
ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen`, p.NodeID, at); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO soak_progress (node_id, received_at, recipe, build, remote, state, elapsed_ms, requested_ms, rounds, faulty, first_fault, body)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (node_id) DO UPDATE SET received_at = excluded.received_at, recipe = excluded.recipe, build = excluded.build, remote = excluded.remote,
	state = excluded.state, elapsed_ms = excluded.elapsed_ms, requested_ms = excluded.requested_ms, rounds = excluded.rounds,
	faulty = excluded.faulty, first_fault = excluded.first_fault, body = excluded.body,
	stop_at = CASE WHEN `+sameBurnIn+` THEN soak_progress.stop_at ELSE 0 END,
	stop_by = CASE WHEN `+sameBurnIn+` THEN soak_progress.stop_by ELSE '' END,
	stop_reason = CASE WHEN `+sameBurnIn+` THEN soak_progress.stop_reason ELSE '' END`,
			p.NodeID, at, p.Recipe, p.Build, p.Remote, p.State, p.ElapsedMS, p.RequestedMS, p.Rounds, p.Faulty, p.FirstFault, p.Body)
		return err
	})
	if err != nil {
		return fmt.Errorf("storing the burn-in progress of %s: %w", p.NodeID, err)
	}
	return nil
}

const progressColumns = `node_id, received_at, recipe, build, remote, state, elapsed_ms, requested_ms, rounds, faulty, first_fault, stop_at, stop_by, stop_reason`

func scanProgress(sc interface{ Scan(...any) error }, body *[]byte) (fleetdb.Progress, error) {
	var p fleetdb.Progress
	var at, stopAt int64
	dst := []any{&p.NodeID, &at, &p.Recipe, &p.Build, &p.Remote, &p.State, &p.ElapsedMS, &p.RequestedMS, &p.Rounds, &p.Faulty, &p.FirstFault, &stopAt, &p.StopBy, &p.StopReason}
	if body != nil {
		dst = append(dst, body)
	}
	err := sc.Scan(dst...)
	p.ReceivedAt = time.UnixMicro(at).UTC()
	if stopAt != 0 {
		p.StopAt = time.UnixMicro(stopAt).UTC()
	}
	return p, err
}

func (s *DB) Progress(ctx context.Context, node string) (*fleetdb.Progress, error) {
	var body []byte
	p, err := scanProgress(s.db.QueryRowContext(ctx, `SELECT `+progressColumns+`, body FROM soak_progress WHERE node_id = $1`, node), &body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the burn-in progress of %s: %w", node, err)
	}
	p.Body = body
	return &p, nil
}

func (s *DB) Progresses(ctx context.Context) (map[string]fleetdb.Progress, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+progressColumns+` FROM soak_progress`)
	if err != nil {
		return nil, fmt.Errorf("listing burn-in progress: %w", err)
	}
	defer rows.Close()
	out := map[string]fleetdb.Progress{}
	for rows.Next() {
		p, err := scanProgress(rows, nil)
		if err != nil {
			return nil, fmt.Errorf("listing burn-in progress: %w", err)
		}
		out[p.NodeID] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing burn-in progress: %w", err)
	}
	return out, nil
}

func (s *DB) RequestStop(ctx context.Context, node string, at time.Time, by, reason string) (*fleetdb.Progress, bool, error) {
	if at.IsZero() {
		at = time.Now()
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE soak_progress SET stop_at = $2, stop_by = $3, stop_reason = $4
WHERE node_id = $1 AND state = 'running' AND stop_at = 0`, node, at.UnixMicro(), by, reason)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("recording the stop of %s's burn-in: %w", node, err)
	}
	p, err := s.Progress(ctx, node)
	return p, n == 1, err
}
