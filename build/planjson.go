package build

// StageJSON is one stage of `plan --json` (docs/commands.md, "Machine-readable output").
type StageJSON struct {
	Name       string     `json:"name"`
	Version    int        `json:"version"`
	Status     string     `json:"status"` // "cached", "remote" (in the remote cache), "run" or "blocked"
	Key        string     `json:"key"`    // "" when blocked
	Fields     []string   `json:"fields"` // recipe fields the key covers; "*" the whole recipe
	Items      []ItemJSON `json:"items"`
	Unresolved []string   `json:"unresolved"`
}

// ItemJSON is one line of a stage's key. Value is what the key hashes (a
// digest, a stage key, a field's JSON); Display is a field's value as a recipe
// writes it, only for fields.
type ItemJSON struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Value   string `json:"value"`
	Display string `json:"display,omitempty"`
}

// Status is the stage's state as plan prints it: cached, remote, run or blocked.
func (s *Stage) Status() string {
	switch {
	case s.Key == "":
		return "blocked"
	case s.Cached:
		return "cached"
	case s.Remote:
		return "remote"
	}
	return "run"
}

// JSON lists the plan's stages for `plan --json`.
func (p *Plan) JSON() []StageJSON {
	out := []StageJSON{}
	for _, s := range p.Stages {
		j := StageJSON{Name: string(s.Name), Version: s.Version, Status: s.Status(), Key: s.Key,
			Fields: append([]string{}, s.Fields...), Items: []ItemJSON{}, Unresolved: append([]string{}, s.Unresolved...)}
		for _, it := range s.Items {
			ij := ItemJSON{Kind: it.Kind, Name: it.Name, Value: it.Value}
			if it.Kind == "field" && it.Name != "recipe" {
				ij.Display, _ = FieldTOML(p.Recipe, it.Name)
			}
			j.Items = append(j.Items, ij)
		}
		out = append(out, j)
	}
	return out
}
