package netboot

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReportFactsFromCatalogue: the rollout a report votes in is its build's
// recipe as the catalogue has it, not the recipe the report names. A token is
// good for any build id this server's secret signed (another replica may have
// served the build), so a report can come for a build this process never
// issued: one the catalogue no longer holds, or one Rescan found for a recipe
// without a rollout. Neither may move the default recipe's rollout because
// its body says "recipe": "default". A report for a build the catalogue lacks
// is stored (201): nothing here knows its recipe better than its body. One for
// the other recipe's build may be stored or refused as naming the wrong
// recipe (422); stored, it is no vote.
func TestReportFactsFromCatalogue(t *testing.T) {
	for _, c := range []struct {
		name  string
		other bool // the report is for the other recipe's build, else for one the catalogue lacks
	}{
		{"a build the catalogue does not hold", false},
		{"a build of a recipe without a rollout", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newRolloutEnv(t)
			e.boot(t, n1) // A bootstraps every channel
			build := "0123456789abcdef"
			if c.other {
				build = e.addOther(t).ID
			}
			before := e.rollout(t)

			// A FAIL from the canary node n1, whose body says recipe default.
			resp, body := e.post(t, "/reports?node="+n1, e.srv.Token(build, n1), reportBody(t, Xeon8GPU, 1, true))
			var got struct {
				ID      int64  `json:"id"`
				Verdict string `json:"verdict"`
			}
			if c.other && resp.StatusCode == 422 {
				if st := e.rollout(t); st.Halted || len(st.HeldBack) != 0 {
					t.Errorf("a refused report moved default's rollout: %+v", st)
				}
				return
			}
			if resp.StatusCode != 201 || json.Unmarshal([]byte(body), &got) != nil || got.ID == 0 || got.Verdict != "fail" {
				t.Fatalf("report: %d %s", resp.StatusCode, body)
			}
			if !c.other {
				return
			}
			// The other recipe has no rollout: the FAIL is no vote, and the
			// default rollout is as it was (not halted, n1 not held back).
			var nv NodeView
			if _, api := e.get(t, "/api/nodes/"+n1); json.Unmarshal([]byte(api), &nv) != nil || nv.Latest == nil || nv.Latest.ID != got.ID {
				t.Fatalf("node API: %s", api)
			}
			if nv.Latest.Vote != nil || nv.Rollout.HeldBack {
				t.Errorf("a FAIL of recipe other's build %s voted in default's rollout: vote %+v, rollout %+v", build, nv.Latest.Vote, nv.Rollout)
			}
			if st := e.rollout(t); st.Halted || len(st.HeldBack) != 0 || len(st.Builds) != len(before.Builds) {
				t.Errorf("default's rollout moved: before %+v, after %+v", before, st)
			}
		})
	}
}

// addOther writes a build of "other", a recipe without a [[rollout]], under
// the root and has a rollout read rescan the catalogue, which then holds it:
// the server issued nothing for it (it has no rollout to record it in).
func (e *rolloutEnv) addOther(t *testing.T) *Build {
	t.Helper()
	dir := filepath.Join(e.out, "other")
	fakeBuild(t, dir, "other", 4096)
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, "manifest.json"), later, later)
	e.bs.mu.Lock()
	e.bs.scanned = time.Time{}
	e.bs.mu.Unlock()
	e.rollout(t)
	b, err := LoadBuild(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.bs.ByID(b.ID); got == nil || got.Recipe != "other" {
		t.Fatalf("the rescan did not add the other recipe's build: %+v", got)
	}
	return b
}
