package netboot

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// TestRolloutVotes: issue 28's items 3 and 4. A report moves a rollout only when
// its node is in the inventory by MAC, and, when that node has a TPM on record
// (an AK, tpm = true, a pin) or its channel requires it, only attested. What did
// not count says why, in the API and on the fleet page. Before the fix each
// "not counted" case below promoted B to stable (or halted the rollout).
func TestRolloutVotes(t *testing.T) {
	const policy = `default = "default"
[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
promote_after = 1
window = "6h"
`
	const (
		stranger = "02:00:00:00:00:99" // in no [[node]] rule
		akName   = "000b" + "11111111111111111111111111111111" + "11111111111111111111111111111111"
	)
	for _, c := range []struct {
		name      string
		inventory string
		query     string // the boot script's
		node      string // who reports
		fail      bool   // a FAIL (on the stable build) instead of a PASS on B
		akOnFile  bool
		counted   bool
		why       string
	}{
		{"a listed canary without a TPM (control)", policy + "[[node]]\nmac = \"" + n1 + "\"\nchannel = \"canary\"\n", "mac=" + n1, n1, false, false, true, ""},
		{"a host= claim matching a canary glob", policy + "[[node]]\nhost = \"gpu-c-*\"\nchannel = \"canary\"\n", "mac=" + stranger + "&host=gpu-c-99", stranger, false, false, false, "not in the inventory by MAC"},
		{"an unknown MAC's FAIL", policy + "[[node]]\nmac = \"" + n1 + "\"\nchannel = \"canary\"\n", "mac=" + stranger, stranger, true, false, false, "not in the inventory by MAC"},
		{"an unattested PASS from a node with an AK on record", policy + "[[node]]\nmac = \"" + n1 + "\"\nchannel = \"canary\"\n", "mac=" + n1, n1, false, true, false, "has AK"},
		{"an unattested PASS from a tpm = true node", policy + "[[node]]\nmac = \"" + n1 + "\"\nchannel = \"canary\"\ntpm = true\n", "mac=" + n1, n1, false, false, false, "tpm = true"},
		{"an unattested PASS from a pinned node", policy + "[[node]]\nmac = \"" + n1 + "\"\nchannel = \"canary\"\nak_name = \"" + akName + "\"\n", "mac=" + n1, n1, false, false, false, "pinned"},
		{"an unattested PASS on a require_attestation channel", strings.Replace(policy, `window = "6h"`, `window = "6h"`+"\nrequire_attestation = [\"canary\"]", 1) + "[[node]]\nmac = \"" + n1 + "\"\nchannel = \"canary\"\n", "mac=" + n1, n1, false, false, false, "channel canary of default has require_attestation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newRolloutEnvWith(t, c.inventory, Options{OperatorToken: testOperator})
			a := e.build(t, "default").ID
			e.rollout(t) // A bootstraps every channel
			b := e.addBuild(t, "b", 8192).ID
			if st := e.rollout(t); st.Channels[0].Build != b || st.Channels[1].Build != a {
				t.Fatalf("B did not enter canary: %+v", st.Channels)
			}
			if c.akOnFile {
				if _, err := e.store.RecordAK(context.Background(), fleetdb.NodeAK{NodeID: c.node, AKName: akName, AKPublic: []byte{1}, RecordedAt: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			resp, script := e.get(t, "/boot.ipxe?"+c.query)
			m := scriptBuild.FindStringSubmatch(script)
			if resp.StatusCode != 200 || m == nil {
				t.Fatalf("boot: %d %s", resp.StatusCode, script)
			}
			if want := map[bool]string{false: b, true: a}[c.fail]; m[1] != want {
				t.Fatalf("served %s, want %s", m[1], want)
			}
			report := func(fail bool) []byte {
				if fail {
					return reportBody(t, Xeon8GPU, 1, true) // verdict FAIL
				}
				return reportBody(t, Epyc4GPU, 0, false)
			}
			if resp, body := e.post(t, "/reports?node="+c.node, m[2], report(c.fail)); resp.StatusCode != 201 {
				t.Fatalf("report: %d %s", resp.StatusCode, body)
			}
			st := e.rollout(t)
			moved := st.Halted || st.Channels[1].Build == b
			if moved != c.counted {
				t.Errorf("the rollout moved: %t, want %t: halted %t, channels %+v", moved, c.counted, st.Halted, st.Channels)
			}
			var nv NodeView
			_, api := e.get(t, "/api/nodes/"+c.node)
			if err := json.Unmarshal([]byte(api), &nv); err != nil || nv.Latest == nil || nv.Latest.Vote == nil {
				t.Fatalf("no vote in the API: %v %s", err, api)
			}
			if v := nv.Latest.Vote; v.Counted != c.counted || !strings.Contains(v.Reason, c.why) {
				t.Errorf("vote %+v, want counted %t with %q", v, c.counted, c.why)
			}
			_, page := e.get(t, "/")
			if got := strings.Contains(page, `class="not-counted"`) && strings.Contains(page, c.why); got == c.counted {
				t.Errorf("the fleet page shows why not counted: %t, want %t", got, !c.counted)
			}
		})
	}
}
