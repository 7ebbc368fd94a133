package apt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// field is one "Key: value" entry of a deb822 paragraph. Continuation lines
// are kept joined by "\n" with their leading blank stripped, which is what
// both the multi-line hash lists in InRelease and the sources format need.
type field struct {
	Key, Value string
}

// paragraph is one stanza of a deb822 file, in file order.
type paragraph struct {
	Line   int // 1-based line where the stanza starts, for error messages
	Fields []field
}

// Get returns the value of key, compared case-insensitively as deb822 requires.
func (p *paragraph) Get(key string) (string, bool) {
	for _, f := range p.Fields {
		if strings.EqualFold(f.Key, key) {
			return f.Value, true
		}
	}
	return "", false
}

// maxLine bounds one physical line so a hostile file cannot make us buffer
// without limit; real Packages lines are far shorter.
const maxLine = 1 << 20

// readParagraphs calls fn for each paragraph of a deb822 stream. The
// paragraph handed to fn is reused afterwards, so fn must copy what it keeps.
// keep, when non-nil, selects the fields to store: Packages files carry large
// Description fields that nothing here needs. comments allows '#' lines,
// which sources files have and Packages files do not.
func readParagraphs(r io.Reader, keep func(key string) bool, comments bool, fn func(*paragraph) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		p       paragraph
		lineNo  int
		inPara  bool
		skipCur bool // current field is not kept; drop its continuation lines too
	)
	flush := func() error {
		if !inPara {
			return nil
		}
		inPara = false
		err := fn(&p)
		p.Fields = p.Fields[:0]
		return err
	}
	for {
		line, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("line %d: %w", lineNo+1, err)
		}
		if len(line) == 0 && errors.Is(err, io.EOF) {
			break
		}
		lineNo++
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case comments && len(line) > 0 && line[0] == '#':
			// A comment neither ends nor continues a paragraph.
		case len(bytes.TrimSpace(line)) == 0:
			if ferr := flush(); ferr != nil {
				return ferr
			}
		case line[0] == ' ' || line[0] == '\t':
			if !inPara {
				return fmt.Errorf("line %d: continuation line outside any field", lineNo)
			}
			if skipCur {
				break
			}
			last := &p.Fields[len(p.Fields)-1]
			last.Value += "\n" + string(bytes.TrimSpace(line))
		default:
			colon := bytes.IndexByte(line, ':')
			if colon <= 0 {
				return fmt.Errorf("line %d: expected \"Field: value\", got %q", lineNo, truncate(string(line), 60))
			}
			key := string(bytes.TrimSpace(line[:colon]))
			if !inPara {
				inPara = true
				p.Line = lineNo
			}
			if keep != nil && !keep(key) {
				skipCur = true
				break
			}
			skipCur = false
			p.Fields = append(p.Fields, field{Key: key, Value: string(bytes.TrimSpace(line[colon+1:]))})
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	return flush()
}

// readLine reads one line including its newline, refusing lines over maxLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	chunk, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		// Common case: no copy; the caller is done with it before the next read.
		return chunk, err
	}
	buf := append([]byte(nil), chunk...)
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxLine {
			return nil, fmt.Errorf("line longer than %d bytes", maxLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
