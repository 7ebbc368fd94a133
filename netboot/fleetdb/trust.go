package fleetdb

import (
	"context"
	"time"
)

// Vote is whether a report counted toward its recipe's rollout.
type Vote struct {
	Recipe  string `json:"recipe"`
	Counted bool   `json:"counted"`
	Reason  string `json:"reason,omitempty"` // why it did not
}

// VoteStore records whether each report counted toward its rollout.
type VoteStore interface {
	// RecordVote records report id's vote once: the first decision stands (a
	// retry of the report decides nothing new).
	RecordVote(ctx context.Context, id int64, v Vote) error
	// Votes returns the vote of each report id that has one.
	Votes(ctx context.Context, ids []int64) (map[int64]Vote, error)
}

// AKConflict is an AK whose quote verified for a node that has another on
// record (or none, outside an enrollment window): the operator decides
// (peerboot rollout ak-reset, enroll, or a pin in the inventory).
type AKConflict struct {
	NodeID string    `json:"node"`
	AKName string    `json:"ak_name"`
	EKName string    `json:"ek_name"`
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	Tries  int64     `json:"tries"`
	Remote string    `json:"remote"` // of the last try
	Why    string    `json:"why"`    // not stored: what the node page says
}

// EnrollStore keeps the AK enrollment windows and conflicts.
type EnrollStore interface {
	// OpenEnrollment lets node ("*": every node) record its first AK until until.
	OpenEnrollment(ctx context.Context, node string, at, until time.Time) error
	// Enrolling says whether node may record its first AK at at.
	Enrolling(ctx context.Context, node string, at time.Time) (bool, error)
	// CloseEnrollment ends node's own window (not the every-node one).
	CloseEnrollment(ctx context.Context, node string) error
	// AddAKConflict records (or counts again) an AK seen for a node, keeping
	// the node's keep most recent.
	AddAKConflict(ctx context.Context, c AKConflict, keep int) error
	// AKConflicts lists a node's, the most recent first.
	AKConflicts(ctx context.Context, node string) ([]AKConflict, error)
	// ResetAK forgets node's AK and its conflicts; it returns the AK it had (nil:
	// none).
	ResetAK(ctx context.Context, node string) (*NodeAK, error)
}
