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
// the other recipe's build is refused as naming the wrong recipe (422): the
// catalogue knows the build's recipe though this process issued no token for it.
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
			if c.other {
				if resp.StatusCode != 422 {
					t.Fatalf("a report naming recipe default for recipe other's build %s: %d %s, want 422", build, resp.StatusCode, body)
				}
				if st := e.rollout(t); st.Halted || len(st.HeldBack) != 0 || len(st.Builds) != len(before.Builds) {
					t.Errorf("a refused report moved default's rollout: before %+v, after %+v", before, st)
				}
				return
			}
			if resp.StatusCode != 201 || json.Unmarshal([]byte(body), &got) != nil || got.ID == 0 || got.Verdict != "fail" {
				t.Fatalf("report: %d %s", resp.StatusCode, body)
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
