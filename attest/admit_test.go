package attest

import (
	"errors"
	"strings"
	"testing"
)

func TestAdmit(t *testing.T) {
	const ak, other, ek, otherEK = "000baaaaaaaaaaaaaaaaaaaa", "000bbbbbbbbbbbbbbbbbbbbb", "000beeeeeeeeeeeeeeeeeeee", "000bffffffffffffffffffff"
	res := &Result{AKName: ak, EKName: ek}
	for _, c := range []struct {
		name   string
		f      AKFacts
		record bool
		err    string // "" admitted
	}{
		{"no AK, no window (the TOFU that was)", AKFacts{}, false, "AK not enrolled"},
		{"no AK, window open", AKFacts{Enrolling: true}, true, ""},
		{"the AK on record", AKFacts{Recorded: ak}, false, ""},
		{"another AK on record, window open", AKFacts{Recorded: other, Enrolling: true}, false, "AK changed"},
		{"pinned, none on record", AKFacts{PinnedAK: ak}, true, ""},
		{"pinned, another on record", AKFacts{PinnedAK: ak, Recorded: other}, false, ""},
		{"another pinned, window open", AKFacts{PinnedAK: other, Enrolling: true}, false, "the inventory pins AK"},
		{"EK pinned and matching, no window", AKFacts{PinnedEK: ek}, false, "AK not enrolled"},
		{"EK pinned and matching, window open", AKFacts{PinnedEK: ek, Enrolling: true}, true, ""},
		{"another EK pinned", AKFacts{PinnedEK: otherEK, Recorded: ak}, false, "EK mismatch"},
	} {
		c.f.Node = "n1"
		adm, err := Admit(c.f, res)
		var conf *Conflict
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &conf)):
			t.Errorf("%s: %v, want a Conflict with %q", c.name, err, c.err)
		case adm.Record != c.record:
			t.Errorf("%s: record %t, want %t", c.name, adm.Record, c.record)
		}
	}
}
