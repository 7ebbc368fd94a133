package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// trustMigration is migration 6 (issue 28): who is believed.
//
//	report_votes        whether a stored report counted toward its recipe's
//	                    rollout, and why not (the fleet page shows it).
//	attest_predictions  the PCR 11 predicted for a build, recorded when its first
//	                    nonce is issued, so a build replaced since, or a replica
//	                    that never served it, still verifies its reports.
//	attest_nonces       from now on holds the spent nonces only, until they
//	                    expire: a nonce is an HMAC the server checks without a
//	                    row (package attestation), so fetching scripts can evict nothing.
//	                    Unspent rows of the old scheme are dropped.
//	ak_enrollment       open enrollment windows: node_id '*' is every node.
//	ak_conflicts        AKs that quoted correctly for a node with another AK on
//	                    record, kept for the operator (ak-reset), newest per AK.
const trustMigration = `CREATE TABLE report_votes (
	report_id BIGINT PRIMARY KEY REFERENCES reports (id) ON DELETE CASCADE,
	recipe TEXT NOT NULL,
	counted BIGINT NOT NULL,
	reason TEXT NOT NULL
);
CREATE TABLE attest_predictions (
	build TEXT PRIMARY KEY,
	pcr11 TEXT NOT NULL,
	why TEXT NOT NULL,
	at BIGINT NOT NULL
);
DELETE FROM attest_nonces WHERE used_at = 0;
CREATE TABLE ak_enrollment (
	node_id TEXT PRIMARY KEY,
	opened_at BIGINT NOT NULL,
	until_at BIGINT NOT NULL
);
CREATE TABLE ak_conflicts (
	node_id TEXT NOT NULL,
	ak_name TEXT NOT NULL,
	ek_name TEXT NOT NULL,
	first_at BIGINT NOT NULL,
	last_at BIGINT NOT NULL,
	tries BIGINT NOT NULL,
	remote TEXT NOT NULL,
	PRIMARY KEY (node_id, ak_name)
)`

func (s *DB) RecordVote(ctx context.Context, id int64, v fleetdb.Vote) error {
	counted := 0
	if v.Counted {
		counted = 1
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO report_votes (report_id, recipe, counted, reason) VALUES ($1, $2, $3, $4) ON CONFLICT (report_id) DO NOTHING`,
			id, v.Recipe, counted, v.Reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording the vote of report %d: %w", id, err)
	}
	return nil
}

func (s *DB) Votes(ctx context.Context, ids []int64) (map[int64]fleetdb.Vote, error) {
	out := map[int64]fleetdb.Vote{}
	err := inChunks(ids, func(in string, args []any) error {
		rows, err := s.db.QueryContext(ctx, `SELECT report_id, recipe, counted, reason FROM report_votes WHERE report_id IN `+in, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, counted int64
			var v fleetdb.Vote
			if err := rows.Scan(&id, &v.Recipe, &counted, &v.Reason); err != nil {
				return err
			}
			v.Counted = counted != 0
			out[id] = v
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("reading votes: %w", err)
	}
	return out, nil
}

func (s *DB) OpenEnrollment(ctx context.Context, node string, at, until time.Time) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM ak_enrollment WHERE until_at < $1`, at.UnixMicro()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ak_enrollment (node_id, opened_at, until_at) VALUES ($1, $2, $3)
ON CONFLICT (node_id) DO UPDATE SET opened_at = excluded.opened_at, until_at = excluded.until_at`, node, at.UnixMicro(), until.UnixMicro())
		return err
	})
	if err != nil {
		return fmt.Errorf("opening enrollment for %s: %w", node, err)
	}
	return nil
}

func (s *DB) Enrolling(ctx context.Context, node string, at time.Time) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM ak_enrollment WHERE node_id IN ($1, '*') AND opened_at <= $2 AND until_at > $2`, node, at.UnixMicro()).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("reading the enrollment of %s: %w", node, err)
	}
	return n > 0, nil
}

func (s *DB) CloseEnrollment(ctx context.Context, node string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM ak_enrollment WHERE node_id = $1`, node)
		return err
	})
	if err != nil {
		return fmt.Errorf("closing the enrollment of %s: %w", node, err)
	}
	return nil
}

func (s *DB) AddAKConflict(ctx context.Context, c fleetdb.AKConflict, keep int) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		at := c.Last.UnixMicro()
		if _, err := tx.ExecContext(ctx, `INSERT INTO ak_conflicts (node_id, ak_name, ek_name, first_at, last_at, tries, remote) VALUES ($1, $2, $3, $4, $4, 1, $5)
ON CONFLICT (node_id, ak_name) DO UPDATE SET last_at = excluded.last_at, tries = ak_conflicts.tries + 1, remote = excluded.remote, ek_name = excluded.ek_name`,
			c.NodeID, c.AKName, c.EKName, at, c.Remote); err != nil {
			return err
		}
		if keep > 0 {
			_, err := tx.ExecContext(ctx, `DELETE FROM ak_conflicts WHERE node_id = $1 AND ak_name NOT IN (
	SELECT ak_name FROM ak_conflicts WHERE node_id = $1 ORDER BY last_at DESC, ak_name LIMIT $2)`, c.NodeID, keep)
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording an AK conflict of %s: %w", c.NodeID, err)
	}
	return nil
}

func (s *DB) AKConflicts(ctx context.Context, node string) ([]fleetdb.AKConflict, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT node_id, ak_name, ek_name, first_at, last_at, tries, remote FROM ak_conflicts WHERE node_id = $1 ORDER BY last_at DESC, ak_name`, node)
	if err != nil {
		return nil, fmt.Errorf("listing the AK conflicts of %s: %w", node, err)
	}
	defer rows.Close()
	out := []fleetdb.AKConflict{}
	for rows.Next() {
		var c fleetdb.AKConflict
		var first, last int64
		if err := rows.Scan(&c.NodeID, &c.AKName, &c.EKName, &first, &last, &c.Tries, &c.Remote); err != nil {
			return nil, fmt.Errorf("listing the AK conflicts of %s: %w", node, err)
		}
		c.First, c.Last = time.UnixMicro(first).UTC(), time.UnixMicro(last).UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

func (s *DB) ResetAK(ctx context.Context, node string) (*fleetdb.NodeAK, error) {
	old, err := s.NodeAK(ctx, node)
	if err != nil {
		return nil, err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM node_aks WHERE node_id = $1`, node); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM ak_conflicts WHERE node_id = $1`, node)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resetting the AK of %s: %w", node, err)
	}
	return old, nil
}
