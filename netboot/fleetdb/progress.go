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
}
