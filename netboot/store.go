package netboot

import (
	"context"
	"errors"
	"time"
)

// ErrDuplicate is returned by Store.AddReport for a report whose sha256 is already
// stored: the collector answers it as a replay.
var ErrDuplicate = errors.New("report already received")

// ErrNotFound is returned for a node or report the store does not hold.
var ErrNotFound = errors.New("not found")

// Store keeps nodes, their boots and their self-test reports. SQLite (the default) and
// PostgreSQL implement it with the same schema and migrations; both pass storetest.
type Store interface {
	// AddReport stores one report atomically: it is durable when AddReport returns nil.
	// A report whose SHA256 is already stored gives ErrDuplicate and changes nothing.
	AddReport(ctx context.Context, r *StoredReport) (int64, error)
	// RecordBoot notes that a node fetched its boot script, updating its MAC, hostname
	// and serial when given.
	RecordBoot(ctx context.Context, b Boot) error
	// Nodes lists every node with its latest report, newest report first.
	Nodes(ctx context.Context) ([]NodeSummary, error)
	// Node finds a node by id, MAC, hostname or serial.
	Node(ctx context.Context, key string) (*NodeSummary, error)
	// Reports lists a node's reports, newest first, at most limit (0: all).
	Reports(ctx context.Context, nodeID string, limit int) ([]StoredReport, error)
	// Report returns one report with its body.
	Report(ctx context.Context, id int64) (*StoredReport, error)
	// Secret returns the server's token secret, creating it on first use.
	Secret(ctx context.Context, create func() ([]byte, error)) ([]byte, error)
	// Count is how many reports the store holds (tests and the load figures).
	Count(ctx context.Context) (int64, error)
	Close() error
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
	Body       []byte // the report exactly as POSTed; nil in listings
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
