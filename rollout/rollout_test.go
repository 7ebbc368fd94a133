package rollout

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func pol() Policy {
	return Policy{Recipe: "default", Channels: []string{"canary", "beta", "stable"}, PromoteAfter: 2, Window: 6 * time.Hour}
}

func state(halted bool, chans ...string) State {
	st := State{Channels: map[string]Assignment{}, Halted: halted}
	for i := 0; i+1 < len(chans); i += 2 {
		st.Channels[chans[i]] = Assignment{Build: chans[i+1], Since: t0}
	}
	return st
}

func TestNewBuild(t *testing.T) {
	got := NewBuild(pol(), state(false), "A", t0)
	if len(got) != 3 || got[0].To != "canary" || got[2].To != "stable" || got[1].Build != "A" || got[0].Kind != Enter {
		t.Fatalf("bootstrap: %+v", got)
	}
	got = NewBuild(pol(), state(false, "canary", "A", "beta", "A", "stable", "A"), "B", t0)
	if len(got) != 1 || got[0].To != "canary" || got[0].Build != "B" {
		t.Fatalf("second build: %+v", got)
	}
	st := state(false)
	for _, ev := range NewBuild(pol(), st, "A", t0) {
		st = Apply(st, ev)
	}
	if Serve(pol(), st, "", nil) != "A" || Serve(pol(), st, "canary", nil) != "A" {
		t.Fatalf("after bootstrap: %+v", st)
	}
}

func TestAfterVerdict(t *testing.T) {
	in := func(d time.Duration) time.Time { return t0.Add(d) }
	v := func(node, ch, build string, pass bool, at time.Duration) Verdict {
		return Verdict{Node: node, Channel: ch, Build: build, Pass: pass, At: in(at)}
	}
	onCanary := state(false, "canary", "B", "beta", "A", "stable", "A")
	cases := []struct {
		name   string
		st     State
		v      Verdict
		latest []Verdict
		want   []Event
	}{
		{"one pass of two", onCanary, v("n1", "canary", "B", true, time.Hour), []Verdict{v("n1", "canary", "B", true, time.Hour)}, nil},
		{"two passes promote", onCanary, v("n2", "canary", "B", true, 2*time.Hour),
			[]Verdict{v("n1", "canary", "B", true, time.Hour), v("n2", "canary", "B", true, 2*time.Hour)},
			[]Event{{Kind: Promote, Recipe: "default", Build: "B", From: "canary", To: "beta", Reason: "2 passes", At: in(2 * time.Hour)}}},
		{"a pass outside the window does not count", onCanary, v("n2", "canary", "B", true, 7*time.Hour),
			[]Verdict{v("n1", "canary", "B", true, time.Hour), v("n2", "canary", "B", true, 7*time.Hour)}, nil},
		{"a pass from before the build entered does not count", onCanary, v("n2", "canary", "B", true, time.Hour),
			[]Verdict{v("n1", "canary", "B", true, -time.Hour), v("n2", "canary", "B", true, time.Hour)}, nil},
		{"passes on another channel do not count", onCanary, v("n2", "canary", "B", true, time.Hour),
			[]Verdict{v("n1", "stable", "B", true, time.Hour), v("n2", "canary", "B", true, time.Hour)}, nil},
		{"a fail on the channel blocks promotion", onCanary, v("n3", "canary", "B", true, 3*time.Hour),
			[]Verdict{v("n1", "canary", "B", true, time.Hour), v("n2", "canary", "B", false, 2*time.Hour), v("n3", "canary", "B", true, 3*time.Hour)}, nil},
		{"halted: no promotion", state(true, "canary", "B", "beta", "A"), v("n2", "canary", "B", true, time.Hour),
			[]Verdict{v("n1", "canary", "B", true, time.Hour), v("n2", "canary", "B", true, time.Hour)}, nil},
		{"a fail halts", onCanary, v("n1", "canary", "B", false, time.Hour), nil,
			[]Event{{Kind: Halt, Recipe: "default", Build: "B", Node: "n1", Reason: "FAIL from node n1 on build B", At: in(time.Hour)}}},
		{"a fail when halted changes nothing", state(true, "canary", "B"), v("n1", "canary", "B", false, time.Hour), nil, nil},
		{"last channel: nowhere to go", state(false, "canary", "B", "beta", "B", "stable", "B"), v("n2", "stable", "B", true, time.Hour),
			[]Verdict{v("n1", "stable", "B", true, time.Hour), v("n2", "stable", "B", true, time.Hour)}, nil},
		{"a pass on a build the channel no longer serves", onCanary, v("n2", "canary", "A", true, time.Hour),
			[]Verdict{v("n1", "canary", "A", true, time.Hour), v("n2", "canary", "A", true, time.Hour)}, nil},
		{"already on the next channel", state(false, "canary", "B", "beta", "B"), v("n2", "canary", "B", true, time.Hour),
			[]Verdict{v("n1", "canary", "B", true, time.Hour), v("n2", "canary", "B", true, time.Hour)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := AfterVerdict(pol(), c.st, c.v, c.latest)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestManualPromote(t *testing.T) {
	cases := []struct {
		name, build string
		st          State
		from, to    string
		err         bool
	}{
		{"the newest in the pipeline", "", state(false, "canary", "B", "beta", "A", "stable", "A"), "canary", "beta", false},
		{"from beta", "", state(false, "canary", "B", "beta", "B", "stable", "A"), "beta", "stable", false},
		{"named", "B", state(true, "canary", "B", "beta", "B", "stable", "A"), "beta", "stable", false},
		{"a build on no channel goes first", "C", state(false, "canary", "B", "beta", "B", "stable", "A"), "", "canary", false},
		{"already last", "A", state(false, "canary", "A", "beta", "A", "stable", "A"), "", "", true},
		{"nothing to promote", "", state(false, "canary", "A", "beta", "A", "stable", "A"), "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := ManualPromote(pol(), c.st, c.build, t0)
			if c.err {
				if !errors.Is(err, ErrPromote) {
					t.Fatalf("got %+v, %v; want ErrPromote", ev, err)
				}
				return
			}
			if err != nil || ev.From != c.from || ev.To != c.to || ev.Reason != "manual" || ev.Kind != Promote {
				t.Fatalf("got %+v, %v; want %s -> %s", ev, err, c.from, c.to)
			}
		})
	}
}

func TestNodeAfterVerdict(t *testing.T) {
	order := map[string]int{"A": 1, "B": 2, "C": 3}
	newer := func(a, b string) bool { return order[a] > order[b] }
	held := &Hold{Node: "n1", Recipe: "default", Failed: "B", Serve: "A", Since: t0}
	cases := []struct {
		name     string
		cur      *Hold
		v        Verdict
		lastPass string
		want     *Hold
	}{
		{"a fail holds on the last pass", nil, Verdict{Node: "n1", Build: "B", At: t0}, "A", held},
		{"a fail with no earlier pass holds on the channel", nil, Verdict{Node: "n1", Build: "B", At: t0}, "", &Hold{Node: "n1", Recipe: "default", Failed: "B", Since: t0}},
		{"the failed build itself is no rollback target", nil, Verdict{Node: "n1", Build: "B", At: t0}, "B", &Hold{Node: "n1", Recipe: "default", Failed: "B", Since: t0}},
		{"passing on the rollback build keeps the hold", held, Verdict{Node: "n1", Build: "A", Pass: true, At: t0}, "A", held},
		{"the failed build passing keeps the hold", held, Verdict{Node: "n1", Build: "B", Pass: true, At: t0}, "A", held},
		{"a newer build passing clears it", held, Verdict{Node: "n1", Build: "C", Pass: true, At: t0}, "A", nil},
		{"a pass with no hold", nil, Verdict{Node: "n1", Build: "C", Pass: true, At: t0}, "A", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := NodeAfterVerdict("default", c.cur, c.v, c.lastPass, newer)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
	st := state(false, "canary", "B", "stable", "A")
	if got := Serve(pol(), st, "canary", held); got != "A" {
		t.Errorf("held node served %q, want A", got)
	}
	if got := Serve(pol(), st, "canary", &Hold{Failed: "B"}); got != "B" {
		t.Errorf("held node with no rollback target served %q, want its channel's B", got)
	}
}

func TestCounts(t *testing.T) {
	p := Policy{Recipe: "r", Channels: []string{"canary", "stable"}, RequireAttestation: []string{"canary"}}
	for _, c := range []struct {
		name string
		v    Voter
		ok   bool
		why  string
	}{
		{"unlisted", Voter{Node: "n", Recipe: "r", Attested: true}, false, "not in the inventory by MAC"},
		{"another recipe", Voter{Node: "n", Listed: true, Recipe: "x", Attested: true}, false, "gives node n recipe x"},
		{"listed, stable, unattested", Voter{Node: "n", Listed: true, Recipe: "r"}, true, ""},
		{"listed, default channel is stable", Voter{Node: "n", Listed: true, Recipe: "r", Channel: ""}, true, ""},
		{"must attest, unattested", Voter{Node: "n", Listed: true, Recipe: "r", MustAttest: "an AK"}, false, "only with an attested report (an AK)"},
		{"must attest, attested", Voter{Node: "n", Listed: true, Recipe: "r", MustAttest: "an AK", Attested: true}, true, ""},
		{"canary requires, unattested", Voter{Node: "n", Listed: true, Recipe: "r", Channel: "canary"}, false, "channel canary of r has require_attestation"},
		{"canary requires, attested", Voter{Node: "n", Listed: true, Recipe: "r", Channel: "canary", Attested: true}, true, ""},
	} {
		ok, why := Counts(p, "r", c.v)
		if ok != c.ok || !strings.Contains(why, c.why) || (c.ok && why != "") {
			t.Errorf("%s: %t %q, want %t %q", c.name, ok, why, c.ok, c.why)
		}
	}
}
