package cuda

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var (
	lintEntry = regexp.MustCompile(`^\.visible \.entry (\w+)\($`)
	lintParam = regexp.MustCompile(`^\.param \.(u32|u64) (\w+),?$`)
	lintReg   = regexp.MustCompile(`^\.reg \.\w+ %(\w+)<(\d+)>;$`)
	lintUse   = regexp.MustCompile(`%([a-z]+)(\d+)\b`)
	lintLabel = regexp.MustCompile(`^(\w+):$`)
	lintBra   = regexp.MustCompile(`\bbra(?:\.uni)? (\w+);`)
	lintLdPar = regexp.MustCompile(`ld\.param\.\w+ %\w+, \[(\w+)\];`)
)

// LintPTX is a structural check of the hand-written PTX this package and
// selftest/nccl ship, for tests on machines without a GPU or ptxas: the header
// (ISA 7.0, sm_52, 64-bit), balanced braces, every .entry's parameter count, every
// parameter loaded is declared, every branch target is a label of the same kernel,
// and every register number is inside its .reg declaration. It returns the
// parameter count of each entry.
func LintPTX(text string) (map[string]int, error) {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, "//"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 3 || lines[0] != ".version 7.0" || lines[1] != ".target sm_52" || lines[2] != ".address_size 64" {
		return nil, fmt.Errorf("header is not .version 7.0 / .target sm_52 / .address_size 64")
	}
	entries := map[string]int{}
	depth := 0
	var (
		entry  string
		inPar  bool
		params map[string]bool
		regs   map[string]int
		labels map[string]bool
		bras   []string
	)
	for n, l := range lines[3:] {
		where := func(format string, args ...any) error {
			return fmt.Errorf("line %d (%q): %s", n+4, l, fmt.Sprintf(format, args...))
		}
		switch {
		case lintEntry.MatchString(l):
			if depth != 0 || inPar {
				return nil, where("entry inside a body")
			}
			entry = lintEntry.FindStringSubmatch(l)[1]
			if _, dup := entries[entry]; dup {
				return nil, where("duplicate entry")
			}
			entries[entry] = 0
			inPar, params, regs, labels, bras = true, map[string]bool{}, map[string]int{}, map[string]bool{}, nil
			continue
		case inPar && l == ")":
			inPar = false
			continue
		case inPar:
			m := lintParam.FindStringSubmatch(l)
			if m == nil {
				return nil, where("not a .param line")
			}
			params[m[2]] = true
			entries[entry]++
			continue
		}
		for _, c := range l {
			switch c {
			case '{':
				depth++
			case '}':
				depth--
			}
		}
		if depth < 0 {
			return nil, where("unbalanced }")
		}
		if entry == "" {
			return nil, where("code outside an entry")
		}
		if m := lintReg.FindStringSubmatch(l); m != nil {
			regs[m[1]], _ = strconv.Atoi(m[2])
			continue
		}
		if m := lintLabel.FindStringSubmatch(l); m != nil {
			labels[m[1]] = true
		}
		for _, m := range lintBra.FindAllStringSubmatch(l, -1) {
			bras = append(bras, m[1])
		}
		for _, m := range lintLdPar.FindAllStringSubmatch(l, -1) {
			if !params[m[1]] {
				return nil, where("loads undeclared parameter %s", m[1])
			}
		}
		for _, m := range lintUse.FindAllStringSubmatch(l, -1) {
			k, _ := strconv.Atoi(m[2])
			lim, ok := regs[m[1]]
			if !ok {
				continue // special registers: %tid, %ctaid, %clock64 ...
			}
			if k >= lim {
				return nil, where("%%%s%s outside .reg %%%s<%d>", m[1], m[2], m[1], lim)
			}
		}
		if depth == 0 {
			for _, b := range bras {
				if !labels[b] {
					return nil, where("branch to %s, not a label of %s", b, entry)
				}
			}
			entry = ""
		}
	}
	if depth != 0 || inPar {
		return nil, fmt.Errorf("unterminated entry %s", entry)
	}
	return entries, nil
}
