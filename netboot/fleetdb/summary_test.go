package fleetdb_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/netboot"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/selftest"
)

// TestSummaryBounds: the summary written at POST time is bounded whatever the
// report holds, fail findings first.
func TestSummaryBounds(t *testing.T) {
	r := netboot.DemoReport(netboot.Epyc4GPU, 0, false)
	for i := 0; i < 40; i++ {
		r.Add(selftest.SevWarn, fmt.Sprintf("w.%d", i), strings.Repeat("é", 400), "")
	}
	r.Add(selftest.SevFail, "last.fail", "x", "")
	r.Settle()
	body, _ := selftest.Encode(r)
	sr := &fleetdb.StoredReport{Body: body}
	fleetdb.Summarize(sr, r)
	if len(sr.Failing) != fleetdb.MaxFailing || sr.Failing[0].ID != "last.fail" || sr.GPUs != 4 || sr.Size != int64(len(body)) {
		t.Fatalf("summary: %d failing, first %q, %d GPUs", len(sr.Failing), sr.Failing[0].ID, sr.GPUs)
	}
	js, _ := json.Marshal(sr.Failing)
	if len(js) > fleetdb.MaxFailing*(fleetdb.MaxMessage+200) {
		t.Errorf("summary is %d bytes", len(js))
	}
}
