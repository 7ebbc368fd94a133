package kernel

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Fragment is one named config fragment (or patch) with its bytes.
type Fragment struct {
	Name string
	Data []byte
}

// Dropped is a fragment option that kconfig did not keep.
type Dropped struct {
	Fragment string
	Symbol   string // CONFIG_FOO
	Want     string // "y", "m", a value, or "is not set"
	Got      string
	Why      string // the symbol's Kconfig dependencies, when found
}

func (d Dropped) String() string {
	s := fmt.Sprintf("%s: %s=%s was dropped by kconfig (final .config: %s)", d.Fragment, d.Symbol, d.Want, d.Got)
	if d.Want == notSet {
		s = fmt.Sprintf("%s: %s is not set in the fragment but kconfig set it (final .config: %s)", d.Fragment, d.Symbol, d.Got)
	}
	if d.Why != "" {
		s += "; " + d.Why
	}
	return s
}

const notSet = "is not set"

var (
	setRe   = regexp.MustCompile(`^(CONFIG_[A-Za-z0-9_]+)=(.*)$`)
	unsetRe = regexp.MustCompile(`^# (CONFIG_[A-Za-z0-9_]+) is not set$`)
)

// ParseConfig reads .config-style text into symbol -> value ("is not set" for
// explicit unsets). Other lines are ignored.
func ParseConfig(text string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if mm := setRe.FindStringSubmatch(line); mm != nil {
			m[mm[1]] = mm[2]
		} else if mm := unsetRe.FindStringSubmatch(line); mm != nil {
			m[mm[1]] = notSet
		}
	}
	return m
}

// CheckConfig compares what the fragments asked for (later fragments win, as in
// merge_config.sh) with the final .config.
func CheckConfig(frags []Fragment, final string) []Dropped {
	want := map[string]string{}
	from := map[string]string{}
	for _, f := range frags {
		for sym, v := range ParseConfig(string(f.Data)) {
			want[sym], from[sym] = v, f.Name
		}
	}
	got := ParseConfig(final)
	var out []Dropped
	for sym, w := range want {
		g, ok := got[sym]
		if !ok {
			g = notSet
		}
		if w == g || (w == notSet && !ok) {
			continue
		}
		if g == notSet && !ok {
			g = "absent"
		}
		out = append(out, Dropped{Fragment: from[sym], Symbol: sym, Want: w, Got: g})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Fragment != out[j].Fragment {
			return out[i].Fragment < out[j].Fragment
		}
		return out[i].Symbol < out[j].Symbol
	})
	return out
}

// ExplainDropped fills Why from the Kconfig files of the tree at root: the
// symbol's "depends on" lines, or that no Kconfig defines it (a typo or an option
// of another kernel version).
func ExplainDropped(root string, dropped []Dropped) {
	if len(dropped) == 0 {
		return
	}
	deps := map[string][]string{}
	defined := map[string]string{}
	wanted := map[string]bool{}
	for _, d := range dropped {
		wanted[strings.TrimPrefix(d.Symbol, "CONFIG_")] = true
	}
	filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasPrefix(e.Name(), "Kconfig") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		cur := ""
		for _, line := range strings.Split(string(data), "\n") {
			t := strings.TrimSpace(line)
			if f := strings.Fields(t); len(f) == 2 && (f[0] == "config" || f[0] == "menuconfig") {
				cur = ""
				if wanted[f[1]] {
					cur = f[1]
					defined[cur] = rel
				}
				continue
			}
			if cur != "" && strings.HasPrefix(t, "depends on ") {
				deps[cur] = append(deps[cur], strings.TrimPrefix(t, "depends on "))
			}
		}
		return nil
	})
	for i := range dropped {
		sym := strings.TrimPrefix(dropped[i].Symbol, "CONFIG_")
		switch {
		case defined[sym] == "":
			dropped[i].Why = "no Kconfig in this kernel defines it"
		case len(deps[sym]) > 0:
			dropped[i].Why = fmt.Sprintf("%s: depends on %s", defined[sym], strings.Join(deps[sym], " && "))
		default:
			dropped[i].Why = fmt.Sprintf("%s: check its select/choice constraints", defined[sym])
		}
	}
}
