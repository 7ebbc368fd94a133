package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// The attestation tables (migration 5):
//
//	attest_nonces        since migration 6, one row per nonce spent, kept until it
//	                     expires (trust.go); spending is an INSERT, so of
//	                     two replicas only one wins.
//	node_aks             the AK recorded at a node's first attested boot (TOFU).
//	report_attestations  a report's attestation ("attested" with the AK, or
//	                     "unattested"), written in the report's own transaction.
//	attest_refusals      attested POSTs that failed a check, with the reason.
const attestMigration = `CREATE TABLE attest_nonces (
	nonce TEXT PRIMARY KEY,
	node_id TEXT NOT NULL,
	build TEXT NOT NULL,
	pcr11 TEXT NOT NULL,
	issued_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	used_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX attest_nonces_by_node ON attest_nonces (node_id, issued_at);
CREATE INDEX attest_nonces_by_expiry ON attest_nonces (expires_at);
CREATE TABLE node_aks (
	node_id TEXT PRIMARY KEY,
	ak_name TEXT NOT NULL,
	ak_public {{BLOB}} NOT NULL,
	ek_name TEXT NOT NULL,
	recorded_at BIGINT NOT NULL
);
CREATE TABLE report_attestations (
	report_id BIGINT PRIMARY KEY REFERENCES reports (id) ON DELETE CASCADE,
	status TEXT NOT NULL,
	ak_name TEXT NOT NULL,
	nonce TEXT NOT NULL
);
CREATE TABLE attest_refusals (
	id {{ID}},
	node_id TEXT NOT NULL,
	at BIGINT NOT NULL,
	reason TEXT NOT NULL,
	report_sha256 TEXT NOT NULL,
	remote TEXT NOT NULL
);
CREATE INDEX attest_refusals_by_node ON attest_refusals (node_id, id)`

func (s *DB) SavePrediction(ctx context.Context, build, pcr11, why string, at time.Time) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO attest_predictions (build, pcr11, why, at) VALUES ($1, $2, $3, $4) ON CONFLICT (build) DO NOTHING`,
			build, pcr11, why, at.UnixMicro())
		return err
	})
	if err != nil {
		return fmt.Errorf("recording the PCR 11 prediction of build %s: %w", build, err)
	}
	return nil
}

func (s *DB) Prediction(ctx context.Context, build string) (string, string, bool, error) {
	var pcr11, why string
	err := s.db.QueryRowContext(ctx, `SELECT pcr11, why FROM attest_predictions WHERE build = $1`, build).Scan(&pcr11, &why)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("reading the PCR 11 prediction of build %s: %w", build, err)
	}
	return pcr11, why, true, nil
}

func (s *DB) LookupNonce(ctx context.Context, nonce, node string) (*fleetdb.Nonce, error) {
	var n fleetdb.Nonce
	var issued, expires, used int64
	err := s.db.QueryRowContext(ctx, `SELECT nonce, node_id, build, pcr11, issued_at, expires_at, used_at FROM attest_nonces WHERE nonce = $1 AND node_id = $2`, nonce, node).
		Scan(&n.Nonce, &n.NodeID, &n.Build, &n.PCR11, &issued, &expires, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fleetdb.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading a nonce of %s: %w", node, err)
	}
	n.IssuedAt, n.Expires = time.UnixMicro(issued).UTC(), time.UnixMicro(expires).UTC()
	if used != 0 {
		n.UsedAt = time.UnixMicro(used).UTC()
	}
	return &n, nil
}

func (s *DB) SpendNonce(ctx context.Context, n fleetdb.Nonce) (bool, error) {
	var spent bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		spent, err = spendNonce(ctx, tx, n)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("spending a nonce of %s: %w", n.NodeID, err)
	}
	return spent, nil
}

// spendNonce records n spent in tx: true if this transaction spent it (the
// primary key lets one of any number of replicas insert it). Spent nonces are
// kept until they expire, which bounds them (a node spends one per attested
// report, at its report rate); an expired one is refused before it gets here.
// An attested report's nonce is spent in the report's own transaction
// (insertAttestation).
func spendNonce(ctx context.Context, tx *sql.Tx, n fleetdb.Nonce) (bool, error) {
	now := n.UsedAt.UnixMicro()
	if !n.UsedAt.Before(n.Expires) {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM attest_nonces WHERE expires_at < $1`, now); err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO attest_nonces (nonce, node_id, build, pcr11, issued_at, expires_at, used_at) VALUES ($1, $2, $3, $4, $5, $6, $5) ON CONFLICT (nonce) DO NOTHING`,
		n.Nonce, n.NodeID, n.Build, n.PCR11, now, n.Expires.UnixMicro())
	if err != nil {
		return false, err
	}
	c, err := res.RowsAffected()
	return c == 1, err
}

func (s *DB) NodeAK(ctx context.Context, node string) (*fleetdb.NodeAK, error) {
	var a fleetdb.NodeAK
	var at int64
	err := s.db.QueryRowContext(ctx, `SELECT node_id, ak_name, ak_public, ek_name, recorded_at FROM node_aks WHERE node_id = $1`, node).
		Scan(&a.NodeID, &a.AKName, &a.AKPublic, &a.EKName, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the AK of %s: %w", node, err)
	}
	a.RecordedAt = time.UnixMicro(at).UTC()
	return &a, nil
}

func (s *DB) RecordAK(ctx context.Context, ak fleetdb.NodeAK) (*fleetdb.NodeAK, error) {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO node_aks (node_id, ak_name, ak_public, ek_name, recorded_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (node_id) DO NOTHING`,
			ak.NodeID, ak.AKName, ak.AKPublic, ak.EKName, ak.RecordedAt.UnixMicro())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("recording the AK of %s: %w", ak.NodeID, err)
	}
	return s.NodeAK(ctx, ak.NodeID)
}

func (s *DB) AddRefusal(ctx context.Context, r fleetdb.AttestRefusal, keep int) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO attest_refusals (node_id, at, reason, report_sha256, remote) VALUES ($1, $2, $3, $4, $5)`,
			r.NodeID, r.At.UnixMicro(), r.Reason, r.ReportSHA256, r.Remote); err != nil {
			return err
		}
		if keep > 0 {
			_, err := tx.ExecContext(ctx, `DELETE FROM attest_refusals WHERE node_id = $1 AND id <= (SELECT id FROM attest_refusals WHERE node_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)`, r.NodeID, keep)
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording a refusal of %s: %w", r.NodeID, err)
	}
	return nil
}

func (s *DB) Refusals(ctx context.Context, node string, limit int) ([]fleetdb.AttestRefusal, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, node_id, at, reason, report_sha256, remote FROM attest_refusals WHERE node_id = $1 ORDER BY id DESC LIMIT $2`, node, limit)
	if err != nil {
		return nil, fmt.Errorf("listing refusals of %s: %w", node, err)
	}
	defer rows.Close()
	out := []fleetdb.AttestRefusal{}
	for rows.Next() {
		var r fleetdb.AttestRefusal
		var at int64
		if err := rows.Scan(&r.ID, &r.NodeID, &at, &r.Reason, &r.ReportSHA256, &r.Remote); err != nil {
			return nil, fmt.Errorf("listing refusals of %s: %w", node, err)
		}
		r.At = time.UnixMicro(at).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *DB) RefusalCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT node_id, COUNT(*) FROM attest_refusals GROUP BY node_id`)
	if err != nil {
		return nil, fmt.Errorf("counting refusals: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("counting refusals: %w", err)
		}
		out[id] = n
	}
	return out, rows.Err()
}

func (s *DB) Attestations(ctx context.Context, ids []int64) (map[int64]fleetdb.ReportAttestation, error) {
	out := map[int64]fleetdb.ReportAttestation{}
	err := inChunks(ids, func(in string, args []any) error {
		rows, err := s.db.QueryContext(ctx, `SELECT report_id, status, ak_name, nonce FROM report_attestations WHERE report_id IN `+in, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var a fleetdb.ReportAttestation
			if err := rows.Scan(&id, &a.Status, &a.AKName, &a.Nonce); err != nil {
				return err
			}
			out[id] = a
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("reading attestations: %w", err)
	}
	return out, nil
}

// insertAttestation writes r's attestation in the transaction that stores r,
// so a report is never stored attested without its row (nor the row without
// the report). A report without one reads as unattested.
func insertAttestation(ctx context.Context, tx *sql.Tx, r *fleetdb.StoredReport) error {
	status := r.Attestation
	if status == "" {
		status = fleetdb.Unattested
	}
	// The nonce is spent with the report, all or nothing: a replica killed before
	// the commit leaves it unspent, so the node's retry (at any replica) is stored.
	if status == fleetdb.Attested {
		spent, err := spendNonce(ctx, tx, fleetdb.Nonce{Nonce: r.Nonce, NodeID: r.NodeID, Build: r.NonceBuild, UsedAt: r.ReceivedAt, Expires: r.NonceExpires})
		if err != nil {
			return err
		}
		if !spent {
			return fleetdb.ErrNonceSpent
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO report_attestations (report_id, status, ak_name, nonce) VALUES ($1, $2, $3, $4)`,
		r.ID, status, r.AKName, r.Nonce)
	return err
}
