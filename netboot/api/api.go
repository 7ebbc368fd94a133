// Package api is the JSON of serve's operator API that has no other home: the
// bodies `peerboot rollout` sends and the answers it decodes. The server
// (netboot) and its client (netboot/client) both use these types, so a field
// renamed on one side is renamed on the other. A rollout's status and its
// events are fleetdb.RolloutStatus and rollout.Event, shared the same way.
package api

import "time"

// Action is the optional body of POST /api/rollouts/{recipe}/{promote,halt,resume}
// and of a node's clear and ak-reset: the build to promote, why a rollout halts.
type Action struct {
	Build  string `json:"build,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// EnrollRequest is POST /api/attest/enroll's body.
type EnrollRequest struct {
	Nodes []string `json:"nodes"` // MACs or node ids; none: every node
	For   string   `json:"for"`   // a Go duration
}

// Enrolled is POST /api/attest/enroll's answer: the nodes ("*": every node)
// and when their window closes.
type Enrolled struct {
	Nodes []string  `json:"nodes"`
	Until time.Time `json:"until"`
}

// AKReset is POST /api/nodes/{node}/ak-reset's answer: the node and the AK
// it no longer has on record.
type AKReset struct {
	Node   string `json:"node"`
	AKName string `json:"ak_name"`
}

// SoakStop is POST /api/nodes/{node}/soak/stop's answer: the node's burn-in and
// the stop request on it (Already: an earlier request, whose time and author stay).
// The node reads the request in the answer to its next progress POST.
type SoakStop struct {
	Node    string    `json:"node"`
	State   string    `json:"state"`
	Rounds  int       `json:"rounds"`
	StopAt  time.Time `json:"stop_requested_at"`
	StopBy  string    `json:"stop_by"`
	Reason  string    `json:"reason,omitempty"`
	Already bool      `json:"already"`
}
