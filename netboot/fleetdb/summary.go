package fleetdb

import (
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// Summary bounds: the fleet page shows finding ids, the node page the whole report.
const (
	MaxFailing = 8
	MaxMessage = 200
)

// Summarize fills the summary columns of sr from its decoded report.
func Summarize(sr *StoredReport, rep *selftest.Report) {
	sr.Size = int64(len(sr.Body))
	sr.GPUs = len(rep.GPUs)
	if rep.NCCL != nil {
		sr.BusBWAtMax = rep.NCCL.BusBWAtMax
	}
	sr.Failing = []selftest.Finding{}
	for _, status := range []string{selftest.SevFail, selftest.SevWarn} {
		for _, f := range rep.Findings {
			if f.Status != status || len(sr.Failing) == MaxFailing {
				continue
			}
			msg := f.Message
			if len(msg) > MaxMessage {
				msg = strings.ToValidUTF8(msg[:MaxMessage], "") + "…"
			}
			sr.Failing = append(sr.Failing, selftest.Finding{ID: f.ID, Status: f.Status, Message: msg, Subject: f.Subject})
		}
	}
}
