package netboot

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/swtpmtest"
)

// TestRetryCannotMoveAStoredReportToAnotherBuild: a report already stored
// votes, on its retry, for the build it was stored under, never for the build
// of the token the retry carries. Canary n1 has tpm = true, so only its
// attested reports vote; it boots build A's UKI, whose baked-in command line
// carries a static token, and its attested PASS is stored for no build (a
// static token names none): no vote. Then B enters canary. A stranger reads
// the stored body (/api/reports/ID: the pages are open) and n1's token for B
// (/boot.ipxe?mac=n1) and POSTs the same bytes under that token, with a
// made-up Peerboot-Attestation header (the retry path skips the evidence) and
// without one (the duplicate path). Before the fix the server took it as n1's
// retry, read the stored report's attestation back and cast an attested PASS
// for B: B was promoted to stable though no node ever booted it.
func TestRetryCannotMoveAStoredReportToAnotherBuild(t *testing.T) {
	const inventory = `default = "default"
[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
promote_after = 1
window = "6h"

[[node]]
mac = "` + n1 + `"
channel = "canary"
tpm = true
`
	const static = "static-uki-token"
	for _, evidence := range []string{"made-up", ""} {
		t.Run("evidence "+evidence, func(t *testing.T) {
			e := newRolloutEnvWith(t, inventory, Options{OperatorToken: testOperator, PredictPCR11: stubPCR11, StaticTokens: []string{static}})
			ab := e.build(t, "default")
			a := ab.ID
			if st := e.rollout(t); st.Channels[0].Build != a || st.Channels[1].Build != a {
				t.Fatalf("bootstrap: %+v", st.Channels)
			}
			uki, err := os.ReadFile(filepath.Join(ab.Dir, "peerboot.efi"))
			if err != nil {
				t.Fatal(err)
			}
			// n1, enrolled, boots A's UKI: a nonce under the static token, an attested PASS.
			if resp, body := e.post(t, "/api/attest/enroll", testOperator, []byte(`{"nodes": ["`+n1+`"], "for": "1h"}`)); resp.StatusCode != 200 {
				t.Fatalf("enroll: %d %s", resp.StatusCode, body)
			}
			resp, out := e.post(t, "/attest/nonce?node="+n1, static, nil)
			var n struct{ Nonce, Build string }
			if resp.StatusCode != 200 || json.Unmarshal([]byte(out), &n) != nil || n.Build != a {
				t.Fatalf("nonce: %d %s", resp.StatusCode, out)
			}
			tp := swtpmtest.Start(t)
			measureBoot(t, tp, uki)
			body := reportBody(t, Epyc4GPU, 1, false)
			_, hdr := quoted(t, tp, n.Nonce, body)
			resp, out = e.postAttested(t, "/reports?node="+n1, static, hdr, body)
			if resp.StatusCode != 201 || !strings.Contains(out, `"attestation":"attested"`) {
				t.Fatalf("n1's attested report: %d %s", resp.StatusCode, out)
			}
			var stored struct{ ID int64 }
			json.Unmarshal([]byte(out), &stored)

			// B enters canary; nobody boots it.
			b := e.addBuild(t, "b", 8192).ID
			if st := e.rollout(t); st.Channels[0].Build != b || st.Channels[1].Build != a {
				t.Fatalf("B did not enter canary: %+v", st.Channels)
			}
			// The stranger: the stored body, and n1's token for B.
			_, got := e.get(t, "/api/reports/"+itoa(stored.ID))
			if !bytes.Equal([]byte(got), body) {
				t.Fatalf("/api/reports/%d is not the body posted", stored.ID)
			}
			build, tokB := e.boot(t, n1)
			if build != b {
				t.Fatalf("n1 was served %s, want B", build)
			}
			resp, out = e.postAttested(t, "/reports?node="+n1, tokB, evidence, []byte(got))
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
				t.Errorf("n1's report of A re-posted under B's token: %d %s, want it refused", resp.StatusCode, out)
			}
			if st := e.rollout(t); st.Channels[1].Build != a || st.Halted || st.Builds[1].Pass != 0 {
				t.Errorf("a report stored for no build became a vote for B: stable %s, halted %t, B %+v", st.Channels[1].Build, st.Halted, st.Builds[1])
			}
		})
	}
}
