package recipe

import (
	"testing"

	"github.com/BurntSushi/toml"
)

const trickyTOML = `# a comment with = and [brackets] and "quotes"
name = "tricky # not a comment"   # a real comment
description = """
A multi-line string with [not.a.table] and
key = "not a key"
[[not.an.array]]
"""

[platform]
gpu_numa = [
  0, # first [socket]
  0,
  1, 1,
]
gpu_model = 'RTX "4090" ]'

[[repo]]
name = "one"
components = ["main", "contrib"]

[[repo]]
name = "two"
"quoted key" = 1
'single' = 2
components = [
  "main",
  "non-free",
]

[kernel]
source = { deb = "linux-source-6.1", version = "6.1 = ok {x}" }
cmdline = '''
console=[ttyS0] x=y
'''
fragments = ["a.config"]

[userspace]
exclude = [
  { package = "dpkg", reason = "a, b = c" },
  { package = "debconf", reason = "x" },
]

[driver.params."nvidia"]
NVreg_X = "1"

[selftest.thresholds.SYS]
min_unidir_gbps = 15.0
`

func TestLineIndex(t *testing.T) {
	// The text must be valid TOML, or the test proves nothing.
	var m map[string]any
	if _, err := toml.Decode(trickyTOML, &m); err != nil {
		t.Fatalf("trickyTOML is not valid TOML: %v", err)
	}
	idx := indexLines([]byte(trickyTOML))
	for path, want := range map[string]int{
		"name":                                    2,
		"description":                             3,
		"platform":                                9,
		"platform.gpu_numa":                       10,
		"platform.gpu_numa[0]":                    11,
		"platform.gpu_numa[1]":                    12,
		"platform.gpu_numa[2]":                    13,
		"platform.gpu_numa[3]":                    13,
		"platform.gpu_model":                      15,
		"repo":                                    17,
		"repo[0]":                                 17,
		"repo[0].name":                            18,
		"repo[0].components":                      19,
		"repo[0].components[1]":                   19,
		"repo[1]":                                 21,
		"repo[1].name":                            22,
		"repo[1].quoted key":                      23,
		"repo[1].single":                          24,
		"repo[1].components":                      25,
		"repo[1].components[0]":                   26,
		"repo[1].components[1]":                   27,
		"kernel":                                  30,
		"kernel.source":                           31,
		"kernel.source.deb":                       31,
		"kernel.source.version":                   31,
		"kernel.cmdline":                          32,
		"kernel.fragments":                        35,
		"userspace.exclude":                       38,
		"userspace.exclude[0]":                    39,
		"userspace.exclude[0].reason":             39,
		"userspace.exclude[1]":                    40,
		"userspace.exclude[1].package":            40,
		"driver.params.nvidia":                    43,
		"driver.params.nvidia.NVreg_X":            44,
		"selftest.thresholds.SYS":                 46,
		"selftest.thresholds.SYS.min_unidir_gbps": 47,
	} {
		if got, ok := idx[path]; !ok || got != want {
			t.Errorf("idx[%q] = %d, %v; want %d", path, got, ok, want)
		}
	}
	// Nothing inside strings or comments becomes a key.
	for _, path := range []string{
		"key", "not.a.table", "not.an.array", "description.key", "kernel.source.b",
		"userspace.exclude[0].b", "kernel.cmdline.x", "console", "platform.gpu_numa[4]",
		"repo[2]", "userspace.exclude[2]", "kernel.source.version.ok",
	} {
		if n, ok := idx[path]; ok {
			t.Errorf("idx has %q (line %d), which is not a key", path, n)
		}
	}
	// Lookups fall back to the nearest enclosing key.
	for path, want := range map[string]int{
		"repo[1].suite":                    21,
		"userspace.exclude[1].reason.more": 40,
		"selftest.thresholds.SYS.other":    46,
		"selftest.deadlines.total":         0,
		"platform.gpu_numa[9]":             10,
	} {
		if got := idx.line(path); got != want {
			t.Errorf("line(%q) = %d, want %d", path, got, want)
		}
	}
	// Paths without array indexes (as the TOML library reports unknown keys).
	for _, tt := range []struct {
		path string
		nth  int
		line int
		at   string
	}{
		{"repo.name", 0, 18, "repo[0].name"},
		{"repo.name", 1, 22, "repo[1].name"},
		{"repo.single", 0, 24, "repo[1].single"},
		{"userspace.exclude.reason", 1, 40, "userspace.exclude[1].reason"},
		{"repo.nothing", 0, 17, "repo.nothing"},
	} {
		line, at := idx.lineUnindexed(tt.path, tt.nth)
		if line != tt.line || at != tt.at {
			t.Errorf("lineUnindexed(%q, %d) = %d, %q; want %d, %q", tt.path, tt.nth, line, at, tt.line, tt.at)
		}
	}
}

func TestLineIndexNestedArraysOfTables(t *testing.T) {
	const text = `[[a]]
x = 1
[[a.b]]
y = 2
[[a.b]]
y = 3
[[a]]
x = 4
[[a.b]]
y = 5
[a.c]
z = 6
`
	idx := indexLines([]byte(text))
	for path, want := range map[string]int{
		"a[0]": 1, "a[0].x": 2, "a[0].b[0].y": 4, "a[0].b[1].y": 6,
		"a[1]": 7, "a[1].x": 8, "a[1].b[0].y": 10, "a[1].c.z": 12,
	} {
		if got := idx[path]; got != want {
			t.Errorf("idx[%q] = %d, want %d", path, got, want)
		}
	}
}

func TestCleanKey(t *testing.T) {
	for in, want := range map[string]string{
		`a`:                      "a",
		` a . b `:                "a.b",
		`"a b".c`:                "a b.c",
		`'x.y'.z`:                "x.y.z",
		`"q\"uote"`:              `q"uote`,
		`driver.params."nvidia"`: "driver.params.nvidia",
	} {
		if got := cleanKey(in); got != want {
			t.Errorf("cleanKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStripComment(t *testing.T) {
	for in, want := range map[string]string{
		`a = 1 # c`:     `a = 1 `,
		`a = "#x" # c`:  `a = "#x" `,
		`a = '#x'`:      `a = '#x'`,
		`a = "\"#" # c`: `a = "\"#" `,
		`# all`:         ``,
	} {
		if got := stripComment(in); got != want {
			t.Errorf("stripComment(%q) = %q, want %q", in, got, want)
		}
	}
}
