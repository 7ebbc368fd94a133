package didyoumean

import "testing"

func TestClosest(t *testing.T) {
	commands := []string{"build", "doctor", "fetch", "flash", "lock", "plan", "recipe", "report", "reports", "run", "serve", "show", "sign", "verify", "version"}
	cases := []struct{ typed, want string }{
		{"flsh", "flash"},   // a letter left out
		{"biuld", "build"},  // two letters swapped
		{"doctr", "doctor"}, // a letter left out
		{"shwo", "show"},    // swapped at the end
		{"verfiy", "verify"},
		{"BUILD", "build"}, // case does not matter
		{"rep", "report"},  // a prefix, when nothing is within reach by edits
		{"frobnicate", ""}, // nothing near
		{"xyz", ""},
		{"", ""},
		{"lcok", "lock"},
		{"pln", "plan"},
	}
	for _, c := range cases {
		if got := Closest(c.typed, commands); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.typed, got, c.want)
		}
	}
}

func TestDistance(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"build", "biuld", 1}, {"flash", "flsh", 1},
		{"kitten", "sitting", 3}, {"ab", "ba", 1}, {"abc", "ca", 3}, {"xeon-8gpu", "xeon8gpu", 1},
	}
	for _, c := range cases {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Distance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (not symmetric)", c.b, c.a, got, c.want)
		}
	}
}
