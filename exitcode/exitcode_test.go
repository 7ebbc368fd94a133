package exitcode

import (
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	base := errors.New("boom")
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{base, 1},
		{Tag(Recipe, base), 3},
		{fmt.Errorf("wrapped: %w", Tag(Integrity, base)), 6},
		{Tag(Network, Tag(Integrity, base)), 5}, // the outermost tag wins
	}
	for _, c := range cases {
		if got := Of(c.err); got != c.want {
			t.Errorf("Of(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	if Tag(Build, nil) != nil {
		t.Error("Tag(nil) is not nil")
	}
	seen := map[Class]bool{}
	for _, n := range Names {
		if seen[n.Class] {
			t.Errorf("class %d listed twice", n.Class)
		}
		seen[n.Class] = true
	}
}
