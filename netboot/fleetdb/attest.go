package fleetdb

import (
	"context"
	"errors"
	"time"
)

// Attestation states of a report.
const (
	Attested   = "attested"
	Unattested = "unattested"
	Refused    = "refused" // a POST refused by a check: in the refusals, never a report
)

// Nonce is one spent nonce (package attestation: an unspent one is only its HMAC).
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

// NonceStore keeps the spent nonces (an unspent one is only its HMAC).
type NonceStore interface {
	// LookupNonce returns the nonce if node spent it (ErrNotFound: not spent).
	LookupNonce(ctx context.Context, nonce, node string) (*Nonce, error)
	// SpendNonce records n spent at n.UsedAt and drops the spent nonces expired
	// by then: true means this caller spent it; exactly one of concurrent
	// callers gets true, at whichever replica. (A report's nonce is spent by
	// AddReport, in the report's transaction.)
	SpendNonce(ctx context.Context, n Nonce) (bool, error)
}

// PredictionStore keeps each build's PCR 11 prediction, recorded when its
// first nonce is issued.
type PredictionStore interface {
	// SavePrediction records build's PCR 11 prediction (or why there is none)
	// unless it has one.
	SavePrediction(ctx context.Context, build, pcr11, why string, at time.Time) error
	// Prediction is build's recorded prediction; ok false: none recorded.
	Prediction(ctx context.Context, build string) (pcr11, why string, ok bool, err error)
}

// AKStore keeps the AK on record for each node.
type AKStore interface {
	// NodeAK returns the node's recorded AK (nil: none yet).
	NodeAK(ctx context.Context, node string) (*NodeAK, error)
	// RecordAK records ak unless the node has one; it returns the node's AK after.
	RecordAK(ctx context.Context, ak NodeAK) (*NodeAK, error)
}

// RefusalStore keeps the attested POSTs a check refused.
type RefusalStore interface {
	// AddRefusal records a refused POST, keeping the node's newest keep.
	AddRefusal(ctx context.Context, r AttestRefusal, keep int) error
	// Refusals lists a node's refusals, newest first, at most limit.
	Refusals(ctx context.Context, node string, limit int) ([]AttestRefusal, error)
	// RefusalCounts is every node's number of recorded refusals.
	RefusalCounts(ctx context.Context) (map[string]int64, error)
}

// AttestationReader reads back what a stored report's attestation was.
type AttestationReader interface {
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
