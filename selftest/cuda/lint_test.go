package cuda_test

import (
	"maps"
	"testing"

	"github.com/peerboot/peerboot/selftest/cuda"
)

// LintPTX on small texts: each broken one is refused with the line (counted from
// 1 over the whole text, comments and blank lines aside) and the reason, so a
// failing test says where the shipped PTX went wrong.
func TestLintPTXSmall(t *testing.T) {
	const head = ".version 7.0\n.target sm_52\n.address_size 64\n"
	const k = ".visible .entry k(\n.param .u64 a,\n.param .u32 b\n)\n{\n.reg .b32 %r<3>;\n"
	for _, tc := range []struct {
		name string
		text string
		want map[string]int
		err  string
	}{
		{"header only", head, map[string]int{}, ""},
		{"two lines", ".version 7.0\n.target sm_52\n", nil, "header is not .version 7.0 / .target sm_52 / .address_size 64"},
		{"another target", ".version 7.0\n.target sm_80\n.address_size 64\n", nil, "header is not .version 7.0 / .target sm_52 / .address_size 64"},
		{"one entry", head + k + "L:\nld.param.u64 %r1, [a]; ld.param.u32 %r2, [b];\nbra.uni L; bra L;\nret;\n}\n", map[string]int{"k": 2}, ""},
		{"second load undeclared", head + k + "ld.param.u64 %r1, [a]; ld.param.u32 %r2, [c];\n}\n", nil,
			`line 10 ("ld.param.u64 %r1, [a]; ld.param.u32 %r2, [c];"): loads undeclared parameter c`},
		{"second branch not a label", head + k + "L:\nbra L; bra M;\n}\n", nil,
			`line 12 ("}"): branch to M, not a label of k`},
		{"entry inside a body", head + k + ".visible .entry j(\n)\n}\n", nil, `line 10 (".visible .entry j("): entry inside a body`},
		{"unterminated", head + k + "ret;\n", nil, "unterminated entry k"},
	} {
		got, err := cuda.LintPTX(tc.text)
		if tc.err == "" && (err != nil || !maps.Equal(got, tc.want)) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || err.Error() != tc.err) {
			t.Errorf("%s: %v, %v; want the error %q", tc.name, got, err, tc.err)
		}
	}
}
