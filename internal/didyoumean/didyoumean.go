// Package didyoumean finds the known name a user most likely meant: a typo one or
// two edits away (a swapped pair of letters counts as one), or a unique prefix.
package didyoumean

import "strings"

// Closest returns the candidate nearest to name, or "" when none is near enough:
// within one edit for names of up to four letters, two for longer ones, or one
// that starts with name. Ties go to the earlier candidate, so callers list
// candidates in a stable order.
func Closest(name string, candidates []string) string {
	if name == "" {
		return ""
	}
	limit := 1
	if len(name) > 4 {
		limit = 2
	}
	lower := strings.ToLower(name)
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if c == name {
			continue
		}
		d := Distance(lower, strings.ToLower(c))
		if d < bestDist {
			best, bestDist = c, d
		}
	}
	if best != "" {
		return best
	}
	for _, c := range candidates {
		if strings.HasPrefix(strings.ToLower(c), lower) {
			return c
		}
	}
	return ""
}

// Distance is the optimal string alignment distance between a and b: insertions,
// deletions, substitutions and transpositions of adjacent letters each cost one
// ("biuld" is one edit from "build", where plain Levenshtein counts two).
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
