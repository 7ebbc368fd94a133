package recipe

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

// lineIndex maps key paths ("repo[1].suite") to the line that defines them. The TOML
// library keeps positions private, so we scan the text ourselves; it only has to be
// right for error messages, and falls back to the nearest enclosing key.
type lineIndex map[string]int

func indexLines(data []byte) lineIndex {
	idx := lineIndex{}
	arrays := map[string]int{} // array-of-tables path -> count so far
	table := ""
	inMultiString := ""
	depth := 0 // bracket depth of a multi-line value
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), len(data)+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if inMultiString != "" {
			if strings.Count(line, inMultiString)%2 == 1 {
				inMultiString = ""
			}
			continue
		}
		if depth > 0 {
			depth += bracketDelta(line)
			continue
		}
		switch {
		case line == "" || line[0] == '#':
		case strings.HasPrefix(line, "[["):
			name := cleanKey(strings.TrimSuffix(strings.TrimSpace(stripComment(line[2:])), "]]"))
			name = join(withIndexes(parent(name), arrays), lastSegment(name))
			arrays[name]++
			table = name + "[" + strconv.Itoa(arrays[name]-1) + "]"
			setOnce(idx, name, n)
			idx[table] = n
		case line[0] == '[':
			name := cleanKey(strings.TrimSuffix(strings.TrimSpace(stripComment(line[1:])), "]"))
			table = withIndexes(name, arrays)
			idx[table] = n
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			path := join(table, cleanKey(key))
			idx[path] = n
			value = strings.TrimSpace(value)
			for _, q := range []string{`"""`, `'''`} {
				if strings.HasPrefix(value, q) && strings.Count(value, q)%2 == 1 {
					inMultiString = q
				}
			}
			if strings.HasPrefix(value, "{") {
				indexInline(idx, path, value, n)
			}
			depth = bracketDelta(value)
		}
	}
	return idx
}

// indexInline records the keys of a one-line inline table, e.g. source = { deb = "x" }.
func indexInline(idx lineIndex, path, value string, n int) {
	body := strings.TrimSuffix(strings.TrimPrefix(stripComment(value), "{"), "}")
	for _, part := range strings.Split(body, ",") {
		if k, _, ok := strings.Cut(part, "="); ok {
			idx[join(path, cleanKey(k))] = n
		}
	}
}

func setOnce(idx lineIndex, k string, n int) {
	if _, ok := idx[k]; !ok {
		idx[k] = n
	}
}

// withIndexes turns "repo.extra" into "repo[2].extra" when repo is an array of tables.
func withIndexes(name string, arrays map[string]int) string {
	parts := strings.Split(name, ".")
	out := ""
	for _, p := range parts {
		out = join(out, p)
		if c, ok := arrays[out]; ok {
			out += "[" + strconv.Itoa(c-1) + "]"
		}
	}
	return out
}

func lastSegment(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}

func cleanKey(k string) string {
	parts := strings.Split(strings.TrimSpace(k), ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}

func stripComment(s string) string {
	inQuote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote != 0 && c == '\\' && inQuote == '"':
			i++
		case inQuote != 0 && c == inQuote:
			inQuote = 0
		case inQuote == 0 && (c == '"' || c == '\''):
			inQuote = c
		case inQuote == 0 && c == '#':
			return s[:i]
		}
	}
	return s
}

func bracketDelta(s string) int {
	s = stripComment(s)
	d := 0
	inQuote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote != 0 && c == '\\' && inQuote == '"':
			i++
		case inQuote != 0 && c == inQuote:
			inQuote = 0
		case inQuote == 0 && (c == '"' || c == '\''):
			inQuote = c
		case inQuote == 0 && (c == '[' || c == '{'):
			d++
		case inQuote == 0 && (c == ']' || c == '}'):
			d--
		}
	}
	if d < 0 {
		return 0
	}
	return d
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// parent drops the last segment of a key path: "a.b[2]" -> "a.b", "a.b" -> "a".
func parent(path string) string {
	if i := strings.LastIndexByte(path, '['); i > 0 && strings.HasSuffix(path, "]") && i > strings.LastIndexByte(path, '.') {
		return path[:i]
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// line returns the line defining path or its nearest enclosing key; 0 if none.
func (idx lineIndex) line(path string) int {
	for p := path; p != ""; p = parent(p) {
		if n, ok := idx[p]; ok {
			return n
		}
	}
	return 0
}
