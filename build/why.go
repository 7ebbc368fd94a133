package build

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/store"
)

// planRecord is what a build remembers of its plan, so `plan --why` can name
// what changed each key since: every stage's key lines and every recipe leaf.
type planRecord struct {
	Stages []stageRecord     `json:"stages"`
	Fields map[string]string `json:"fields"`
}

type stageRecord struct {
	Name  string `json:"name"`
	Key   string `json:"key"`
	Items []Item `json:"items"`
}

func (p *Plan) record() planRecord {
	rec := planRecord{Fields: map[string]string{}}
	for _, s := range p.Stages {
		rec.Stages = append(rec.Stages, stageRecord{string(s.Name), s.Key, s.Items})
	}
	for _, leaf := range RecipeLeaves() {
		v, _ := fieldValue(p.Recipe, leaf)
		rec.Fields[leaf] = v
	}
	return rec
}

// SaveRecord remembers p as the recipe's last built plan (written atomically).
func SaveRecord(st *store.Store, p *Plan) error {
	b, err := json.MarshalIndent(p.record(), "", "  ")
	if err != nil {
		return err
	}
	path := st.PlanPath(p.Recipe.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, append(b, '\n'), 0o644)
}

// previousKeys are the stage keys of the recipe's last recorded build (empty
// when there is none): the outputs a commit may resume hashing from.
func previousKeys(st *store.Store, name string) map[StageName]string {
	out := map[StageName]string{}
	b, err := os.ReadFile(st.PlanPath(name))
	if err != nil {
		return out
	}
	var prev planRecord
	if json.Unmarshal(b, &prev) != nil {
		return out
	}
	for _, s := range prev.Stages {
		out[StageName(s.Name)] = s.Key
	}
	return out
}

// Why prints, for every stage whose key differs from the recipe's last build,
// the key lines that changed: the recipe fields by name, the inputs and data
// files by digest, and the stages upstream.
func (p *Plan) Why(w io.Writer, st *store.Store) error {
	b, err := os.ReadFile(st.PlanPath(p.Recipe.Name))
	if errors.Is(err, fs.ErrNotExist) {
		// A question this store cannot answer yet, not a failure of peerboot's.
		return exitcode.Tag(exitcode.Usage, fmt.Errorf("no earlier build of recipe %q in this store: nothing to compare with (build it first)", p.Recipe.Name))
	}
	if err != nil {
		return err
	}
	var prev planRecord
	if err := json.Unmarshal(b, &prev); err != nil {
		return fmt.Errorf("%s: %w", st.PlanPath(p.Recipe.Name), err)
	}
	before := map[string]stageRecord{}
	for _, s := range prev.Stages {
		before[s.Name] = s
	}
	now := p.record()
	for i, s := range p.Stages {
		old, ok := before[string(s.Name)]
		switch {
		case !ok:
			fmt.Fprintf(w, "%d. %-9s new stage since the last build\n", i+1, s.Name)
			continue
		case old.Key == s.Key:
			fmt.Fprintf(w, "%d. %-9s unchanged\n", i+1, s.Name)
			continue
		}
		fmt.Fprintf(w, "%d. %-9s key changed\n", i+1, s.Name)
		for _, line := range itemDiff(old.Items, s.Items) {
			fmt.Fprintf(w, "     %s\n", line)
		}
		if hasWhole(s.Items) {
			for _, leaf := range RecipeLeaves() {
				if prev.Fields[leaf] != now.Fields[leaf] {
					fmt.Fprintf(w, "     recipe field %s: %s -> %s\n", leaf, short(prev.Fields[leaf]), short(now.Fields[leaf]))
				}
			}
		}
		if old.Items != nil && len(itemDiff(old.Items, s.Items)) == 0 {
			fmt.Fprintf(w, "     the stage's code changed (version %d)\n", s.Version)
		}
	}
	return nil
}

func hasWhole(items []Item) bool {
	for _, it := range items {
		if it.Kind == "field" && it.Name == "recipe" {
			return true
		}
	}
	return false
}

// itemDiff names the key lines added, removed or changed between two stages.
func itemDiff(old, now []Item) []string {
	type k struct{ kind, name string }
	was := map[k]string{}
	for _, it := range old {
		was[k{it.Kind, it.Name}] = it.Value
	}
	var out []string
	seen := map[k]bool{}
	for _, it := range now {
		key := k{it.Kind, it.Name}
		seen[key] = true
		v, ok := was[key]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s: added (%s)", it.Kind, it.Name, short(it.Value)))
		case v != it.Value && !(it.Kind == "field" && it.Name == "recipe"):
			out = append(out, fmt.Sprintf("%s %s: %s -> %s", it.Kind, it.Name, short(v), short(it.Value)))
		case v != it.Value:
			out = append(out, "the resolved recipe changed:")
		}
	}
	for _, it := range old {
		if !seen[k{it.Kind, it.Name}] {
			out = append(out, fmt.Sprintf("%s %s: removed", it.Kind, it.Name))
		}
	}
	return out
}

func short(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
