package fleetdb

import (
	"context"
	"time"
)

// Progress is a node's latest burn-in progress (POST /progress): the document as
// posted, and the few fields the fleet page shows without reading it.
type Progress struct {
	NodeID     string
	ReceivedAt time.Time
	Recipe     string // the build's recipe (from the token)
	Build      string
	Remote     string
	// From the document (selftest.SoakProgress), checked when it was received.
	State       string
	ElapsedMS   int64
	RequestedMS int64
	Rounds      int
	Faulty      int    // rounds that found something
	FirstFault  string // the first of them, or how it stopped
	Body        []byte // only from Progress
	// StopAt is when an operator asked this burn-in to stop (zero: nobody has), StopBy
	// from where (the write's remote address) and StopReason why (may be ""). The
	// node reads it in the answer to its next progress; SetProgress keeps it while the
	// same burn-in goes on and drops it when a new one starts.
	StopAt     time.Time
	StopBy     string
	StopReason string
}

// ProgressStore keeps the latest burn-in progress of each node: one row a node, so a
// restart of serve does not forget a burn-in under way, and the store stays bounded
// by its nodes.
type ProgressStore interface {
	// SetProgress replaces node's progress (and notes the node as seen).
	SetProgress(ctx context.Context, p Progress) error
	// Progress is node's latest with its body; nil, nil when it has none.
	Progress(ctx context.Context, node string) (*Progress, error)
	// Progresses is every node's latest without bodies, by node id.
	Progresses(ctx context.Context) (map[string]Progress, error)
	// RequestStop records that an operator asked node's running burn-in to stop, once
	// (a second request keeps the first's time and author), and returns the progress
	// as it is after and whether this request was recorded; a burn-in no longer
	// running comes back unchanged; nil when the node has no progress.
	RequestStop(ctx context.Context, node string, at time.Time, by, reason string) (*Progress, bool, error)
}
