package netboot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The attestation tables (migration 5):
//
//	attest_nonces        since migration 6, one row per nonce spent, kept until it
//	                     expires (trust_store.go); spending is an INSERT, so of
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

// Attestation states of a report.
const (
	Attested   = "attested"
	Unattested = "unattested"
	Refused    = "refused" // a POST refused by a check: in the refusals, never a report
)

// Nonce is one spent nonce (attest.go: an unspent one is only its HMAC).
type Nonce struct {
	Nonce    string
	NodeID   string
	Build    string
	PCR11    string // hex; "": the build has no UKI to predict it from
	IssuedAt time.Time
	Expires  time.Time
	UsedAt   time.Time // zero: unspent
}

// NodeAK is the AK recorded for a node.
type NodeAK struct {
	NodeID     string
	AKName     string
	AKPublic   []byte
	EKName     string
	RecordedAt time.Time
}

// AttestRefusal is one refused attested POST.
type AttestRefusal struct {
	ID           int64     `json:"id"`
	NodeID       string    `json:"node"`
	At           time.Time `json:"at"`
	Reason       string    `json:"reason"`
	ReportSHA256 string    `json:"report_sha256"`
	Remote       string    `json:"remote"`
}

// ErrNonceSpent is AddReport's answer for an attested report whose nonce another
// POST spent first (or that expired meanwhile): nothing is stored.
var ErrNonceSpent = errors.New("nonce already used")

// AttestStore is what attestation needs of a Store; the SQL stores implement it.
type AttestStore interface {
	// SavePrediction records build's PCR 11 prediction (or why there is none)
	// unless it has one.
	SavePrediction(ctx context.Context, build, pcr11, why string, at time.Time) error
	// Prediction is build's recorded prediction; ok false: none recorded.
	Prediction(ctx context.Context, build string) (pcr11, why string, ok bool, err error)
	// LookupNonce returns the nonce if node spent it (ErrNotFound: not spent).
	LookupNonce(ctx context.Context, nonce, node string) (*Nonce, error)
	// SpendNonce records n spent at n.UsedAt and drops the spent nonces expired
	// by then: true means this caller spent it; exactly one of concurrent
	// callers gets true, at whichever replica.
	SpendNonce(ctx context.Context, n Nonce) (bool, error)
	// NodeAK returns the node's recorded AK (nil: none yet).
	NodeAK(ctx context.Context, node string) (*NodeAK, error)
	// RecordAK records ak unless the node has one; it returns the node's AK after.
	RecordAK(ctx context.Context, ak NodeAK) (*NodeAK, error)
	// AddRefusal records a refused POST, keeping the node's newest keep.
	AddRefusal(ctx context.Context, r AttestRefusal, keep int) error
	// Refusals lists a node's refusals, newest first, at most limit.
	Refusals(ctx context.Context, node string, limit int) ([]AttestRefusal, error)
	// RefusalCounts is every node's number of recorded refusals.
	RefusalCounts(ctx context.Context) (map[string]int64, error)
	// Attestations returns the attestation of each report id that has one
	// (reports stored before migration 5 have none: unattested).
	Attestations(ctx context.Context, ids []int64) (map[int64]ReportAttestation, error)
}

// ReportAttestation is what a report's attestation row says.
type ReportAttestation struct {
	Status string
	AKName string
	Nonce  string
}

var _ AttestStore = (*sqlStore)(nil)

func (s *sqlStore) SavePrediction(ctx context.Context, build, pcr11, why string, at time.Time) error {
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

func (s *sqlStore) Prediction(ctx context.Context, build string) (string, string, bool, error) {
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

func (s *sqlStore) LookupNonce(ctx context.Context, nonce, node string) (*Nonce, error) {
	var n Nonce
	var issued, expires, used int64
	err := s.db.QueryRowContext(ctx, `SELECT nonce, node_id, build, pcr11, issued_at, expires_at, used_at FROM attest_nonces WHERE nonce = $1 AND node_id = $2`, nonce, node).
		Scan(&n.Nonce, &n.NodeID, &n.Build, &n.PCR11, &issued, &expires, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
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

func (s *sqlStore) SpendNonce(ctx context.Context, n Nonce) (bool, error) {
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
func spendNonce(ctx context.Context, tx *sql.Tx, n Nonce) (bool, error) {
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

func (s *sqlStore) NodeAK(ctx context.Context, node string) (*NodeAK, error) {
	var a NodeAK
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

func (s *sqlStore) RecordAK(ctx context.Context, ak NodeAK) (*NodeAK, error) {
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

func (s *sqlStore) AddRefusal(ctx context.Context, r AttestRefusal, keep int) error {
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

func (s *sqlStore) Refusals(ctx context.Context, node string, limit int) ([]AttestRefusal, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, node_id, at, reason, report_sha256, remote FROM attest_refusals WHERE node_id = $1 ORDER BY id DESC LIMIT $2`, node, limit)
	if err != nil {
		return nil, fmt.Errorf("listing refusals of %s: %w", node, err)
	}
	defer rows.Close()
	out := []AttestRefusal{}
	for rows.Next() {
		var r AttestRefusal
		var at int64
		if err := rows.Scan(&r.ID, &r.NodeID, &at, &r.Reason, &r.ReportSHA256, &r.Remote); err != nil {
			return nil, fmt.Errorf("listing refusals of %s: %w", node, err)
		}
		r.At = time.UnixMicro(at).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *sqlStore) RefusalCounts(ctx context.Context) (map[string]int64, error) {
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

func (s *sqlStore) Attestations(ctx context.Context, ids []int64) (map[int64]ReportAttestation, error) {
	out := map[int64]ReportAttestation{}
	err := inChunks(ids, func(in string, args []any) error {
		rows, err := s.db.QueryContext(ctx, `SELECT report_id, status, ak_name, nonce FROM report_attestations WHERE report_id IN `+in, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var a ReportAttestation
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
func insertAttestation(ctx context.Context, tx *sql.Tx, r *StoredReport) error {
	status := r.Attestation
	if status == "" {
		status = Unattested
	}
	// The nonce is spent with the report, all or nothing: a replica killed before
	// the commit leaves it unspent, so the node's retry (at any replica) is stored.
	if status == Attested {
		spent, err := spendNonce(ctx, tx, Nonce{Nonce: r.Nonce, NodeID: r.NodeID, Build: r.NonceBuild, UsedAt: r.ReceivedAt, Expires: r.NonceExpires})
		if err != nil {
			return err
		}
		if !spent {
			return ErrNonceSpent
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO report_attestations (report_id, status, ak_name, nonce) VALUES ($1, $2, $3, $4)`,
		r.ID, status, r.AKName, r.Nonce)
	return err
}
