package attestation

import (
	"context"
	"fmt"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// Which AK a node may quote with (issue 28: trust on first use let an
// attacker's swtpm register a node's first AK and lock the real node out) is
// attest.Admit's decision: an ak_name pinned in the inventory, else the AK on
// record, else one recorded inside an enrollment window an operator opened
// (peerboot rollout enroll, or serve --enroll DURATION for every node); an
// ek_name pin is a check only. Here are its facts and its consequences: every
// AK refused after its quote verified is kept as a conflict (the node page and
// the API list them), so a replaced TPM or a forger shows instead of silently
// failing; peerboot rollout ak-reset NODE forgets the AK on record.

// trustAK admits res's AK for node or refuses it (a *Refusal), recording it
// when admitted for the first time.
func (s *Stage) trustAK(ctx context.Context, rep Report, res *attest.Result, akPublic []byte) error {
	st, node := s.cfg.Store, rep.Node
	f := attest.AKFacts{Node: node, PinnedAK: rep.PinnedAK, PinnedEK: rep.PinnedEK}
	rec, err := st.NodeAK(ctx, node)
	if err != nil {
		return refuse(Unavailable, err)
	}
	if rec != nil {
		f.Recorded = rec.AKName
	}
	if f.PinnedAK == "" && f.Recorded == "" {
		if f.Enrolling, err = st.Enrolling(ctx, node, s.cfg.Now()); err != nil {
			return refuse(Unavailable, err)
		}
	}
	conflict := func(why error) error {
		c := fleetdb.AKConflict{NodeID: node, AKName: res.AKName, EKName: res.EKName, Last: s.cfg.Now(), Remote: rep.Remote}
		if err := st.AddAKConflict(ctx, c, conflictsPerNode); err != nil {
			s.cfg.Log.Error("recording an AK conflict", "node", node, "error", err.Error())
		}
		return refuse(Forbidden, why)
	}
	adm, err := attest.Admit(f, res)
	if err != nil {
		return conflict(err)
	}
	if !adm.Record {
		return nil
	}
	got, err := st.RecordAK(ctx, fleetdb.NodeAK{NodeID: node, AKName: res.AKName, AKPublic: akPublic, EKName: res.EKName, RecordedAt: s.cfg.Now()})
	if err != nil {
		return refuse(Unavailable, err)
	}
	if got.AKName != res.AKName && f.PinnedAK == "" {
		// Another POST (at another replica, perhaps) recorded its AK first.
		return conflict(fmt.Errorf("AK changed: node %s recorded AK %s first, this quote is signed by %s", node, Clip(got.AKName), Clip(res.AKName)))
	}
	s.cfg.Log.Info("AK recorded", "node", node, "ak", res.AKName, "how", adm.How)
	if f.Enrolling {
		// A node's own window admits one AK: whoever quotes next is a conflict.
		if err := st.CloseEnrollment(ctx, node); err != nil {
			s.cfg.Log.Error("closing an enrollment window", "node", node, "error", err.Error())
		}
	}
	return nil
}
