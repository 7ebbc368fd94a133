package attest

import "fmt"

// Which AK may quote for a node is a decision apart from whether a quote
// verifies (Verify): Verify checks the evidence against the AK it carries,
// Admit then says whether that AK is the node's. The collector gathers the
// facts (the inventory's pins, the AK on record, an open enrollment window),
// records the AK when told to, and keeps every refusal as a conflict.

// AKFacts is what the collector knows of a node's TPM.
type AKFacts struct {
	Node string
	// PinnedAK and PinnedEK are the inventory's ak_name and ek_name ("": none).
	PinnedAK, PinnedEK string
	// Recorded is the AK on record ("": none).
	Recorded string
	// Enrolling: an operator's enrollment window is open for the node.
	Enrolling bool
}

// Admission is a quote's AK accepted; Record says to record it as the node's
// (How says why, for the log).
type Admission struct {
	Record bool
	How    string
}

// Conflict is an AK refused although its quote verified: the node page lists
// it for the operator. Reason is worded for that page.
type Conflict struct{ Reason string }

func (c *Conflict) Error() string { return c.Reason }

func conflict(format string, a ...any) error { return &Conflict{Reason: fmt.Sprintf(format, a...)} }

// Admit decides whether res's AK (and EK) may quote for f.Node:
//
//   - an EK pinned in the inventory must be the one the evidence names; it is a
//     check only, never a reason to admit an AK (nothing here proves the AK is
//     in that EK's TPM, and an EK public is no secret);
//   - an AK pinned in the inventory is the node's, whatever is on record;
//   - else the AK on record is;
//   - else the AK is recorded only inside an enrollment window.
func Admit(f AKFacts, res *Result) (Admission, error) {
	if f.PinnedEK != "" && res.EKName != f.PinnedEK {
		return Admission{}, conflict("EK mismatch: the inventory pins EK %s for node %s, the evidence names %s", short(f.PinnedEK), f.Node, short(res.EKName))
	}
	switch {
	case f.PinnedAK != "":
		if res.AKName != f.PinnedAK {
			return Admission{}, conflict("AK changed: the inventory pins AK %s for node %s, this quote is signed by %s", short(f.PinnedAK), f.Node, short(res.AKName))
		}
		return Admission{Record: f.Recorded == "", How: "pinned in the inventory"}, nil
	case f.Recorded != "":
		if res.AKName != f.Recorded {
			return Admission{}, conflict("AK changed: node %s has AK %s on record, this quote is signed by %s (a replaced TPM: peerboot rollout ak-reset %s, then enroll it)",
				f.Node, short(f.Recorded), short(res.AKName), f.Node)
		}
		return Admission{}, nil
	case f.Enrolling:
		return Admission{Record: true, How: "enrollment window"}, nil
	}
	return Admission{}, conflict("AK not enrolled: node %s has no AK on record and no enrollment window is open (peerboot rollout enroll %s, or ak_name in the inventory); AK %s",
		f.Node, f.Node, short(res.AKName))
}
