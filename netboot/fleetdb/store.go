// Package fleetdb is what peerboot serve keeps about its fleet: nodes, their
// boots and reports, each report's attestation and vote, spent nonces, AKs,
// enrollment windows and the rollouts' state. It holds the records and the
// small interfaces each stage of the report pipeline takes (docs/design.md,
// "serve's report pipeline"); sqldb implements them all over SQLite or
// PostgreSQL. Nothing here knows SQL or HTTP.
package fleetdb

import (
	"context"
	"errors"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

// ErrDuplicate is returned by Store.AddReport for a report whose sha256 is already
// stored: the collector answers it as a replay.
var ErrDuplicate = errors.New("report already received")

// ErrNotFound is returned for a node or report the store does not hold.
var ErrNotFound = errors.New("not found")

// Store is everything serve keeps; sqldb.DB (SQLite, PostgreSQL) implements
// it, and both dialects pass the same tests. Each stage of the report pipeline
// takes only the part it uses.
type Store interface {
	ReportStore
	BootStore
	FleetReader
	SecretStore
	NonceStore
	PredictionStore
	AKStore
	RefusalStore
	AttestationReader
	EnrollStore
	VoteStore
	RolloutStore
	ProgressStore
	Close() error
}

// ReportStore is the pipeline's store stage.
type ReportStore interface {
	// AddReport stores one report atomically: it is durable when AddReport returns nil.
	// A report whose SHA256 is already stored gives ErrDuplicate and changes nothing;
	// the id is then the stored report's when it is the same node's (a retry), else 0.
	// An attested report's nonce is spent in the same transaction: ErrNonceSpent when
	// another report spent it first.
	AddReport(ctx context.Context, r *StoredReport) (int64, error)
	// StoredReportID is the id of node's stored report with this sha256, 0 if
	// none: a retry of a report whose answer was lost.
	StoredReportID(ctx context.Context, node, sum string) (int64, error)
	// Prune applies a retention policy after a write concerning nodeID ("": only the
	// global bounds) and says how many reports it deleted.
	Prune(ctx context.Context, nodeID string, r Retention) (int64, error)
}

// BootStore records the boot-script fetches.
type BootStore interface {
	// RecordBoot notes that a node fetched its boot script, updating its MAC, hostname
	// and serial when given.
	RecordBoot(ctx context.Context, b Boot) error
	Prune(ctx context.Context, nodeID string, r Retention) (int64, error)
}

// FleetReader is what the fleet pages read.
type FleetReader interface {
	// Nodes lists every node with its latest report, newest report first.
	Nodes(ctx context.Context) ([]NodeSummary, error)
	// Node finds a node by id, MAC, hostname or serial.
	Node(ctx context.Context, key string) (*NodeSummary, error)
	// Reports lists a node's reports, newest first, at most limit (0: all).
	Reports(ctx context.Context, nodeID string, limit int) ([]StoredReport, error)
	// Report returns one report with its body.
	Report(ctx context.Context, id int64) (*StoredReport, error)
	// Count is how many reports the store holds (tests and the load figures).
	Count(ctx context.Context) (int64, error)
}

// SecretStore keeps the token secret, shared by the replicas.
type SecretStore interface {
	// Secret returns the server's token secret, creating it on first use.
	Secret(ctx context.Context, create func() ([]byte, error)) ([]byte, error)
}

// StoredReport is one received report and where it came from.
type StoredReport struct {
	ID         int64
	NodeID     string
	ReceivedAt time.Time
	Recipe     string // the build's recipe (from the token)
	Build      string // the build id the token was issued for
	Verdict    string
	SHA256     string // hex, of Body
	Remote     string // the client address
	Body       []byte // the report exactly as POSTed; only from Report
	// The summary, written at POST time, is what the lists show without the body.
	Size       int64   // bytes of Body
	GPUs       int     // len(gpus)
	BusBWAtMax float64 // nccl.busbw_at_max
	// Failing are the fail, then warn, findings: at most MaxFailing, without
	// evidence and hints, messages cut to MaxMessage bytes.
	Failing []selftest.Finding
	// Attestation is Attested or Unattested ("" reads as Unattested); AKName and
	// Nonce are the attested report's AK and the nonce it spent, NonceBuild and
	// NonceExpires what the nonce says of itself.
	Attestation, AKName, Nonce string
	NonceBuild                 string
	NonceExpires               time.Time
}

// Retention bounds what the store keeps; a field of zero or less is no bound.
type Retention struct {
	ReportsPerNode int   // a node's newest reports kept
	ReportBytes    int64 // report bodies kept in all; the oldest go first, each node's latest last
	BootsPerNode   int   // a node's newest boot records kept
	// UnreportedNodes bounds the nodes known only from boot-script fetches (anyone can
	// fetch a script for a made-up MAC): the least recently seen go first.
	UnreportedNodes int
}

// DefaultRetention is what a server keeps for the fields left zero (a negative field
// is no bound): 100 reports and boots a node, 8 GiB of reports, 10,000 nodes that
// never reported.
func DefaultRetention() Retention {
	return Retention{ReportsPerNode: 100, ReportBytes: 8 << 30, BootsPerNode: 100, UnreportedNodes: 10000}
}

// Boot is one boot-script fetch.
type Boot struct {
	NodeID   string
	MAC      string
	Hostname string
	Serial   string
	Recipe   string
	Build    string
	Remote   string
	At       time.Time
}

// NodeSummary is a node and its latest report (Latest nil: it never reported).
type NodeSummary struct {
	ID        string
	MAC       string
	Hostname  string
	Serial    string
	FirstSeen time.Time
	LastSeen  time.Time
	Boots     int64
	Reports   int64
	Latest    *StoredReport
}
