package selftest

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Layout for the console view: tables aligned like text/tabwriter (two spaces between
// columns, widths in runes), matrices that split into column blocks rather than wrap
// mid-cell, and prose wrapped at word boundaries under a hanging indent.

// DefaultWidth is the width Render lays out for: a terminal's classic 80 columns.
const DefaultWidth = 80

// minWidth is the narrowest layout attempted; below it lines simply run long.
const minWidth = 40

func textWidth(s string) int { return utf8.RuneCountInString(s) }

// columnWidths is the widest cell of each column (the last column of a row is not
// padded, as tabwriter does not pad it).
func columnWidths(rows [][]string) []int {
	var w []int
	for _, row := range rows {
		for c, cell := range row {
			if c == len(w) {
				w = append(w, 0)
			}
			w[c] = max(w[c], textWidth(cell))
		}
	}
	return w
}

// tableWidth is how wide rows lay out.
func tableWidth(rows [][]string) int {
	w := columnWidths(rows)
	total := 0
	for c, x := range w {
		total += x
		if c < len(w)-1 {
			total += 2
		}
	}
	return total
}

// writeTable lays rows out in aligned columns; the first cell carries the indent.
func writeTable(b *strings.Builder, rows [][]string) {
	w := columnWidths(rows)
	for _, row := range rows {
		var line strings.Builder
		for c, cell := range row {
			line.WriteString(cell)
			if c < len(row)-1 {
				line.WriteString(strings.Repeat(" ", w[c]-textWidth(cell)+2))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// writeMatrix lays out an n x n matrix with "GPUk" labels: in one block when it fits
// width, else in blocks of as many columns as fit, each block with the row labels.
func writeMatrix(b *strings.Builder, width int, cells [][]string) {
	n := len(cells)
	labels := make([]string, n)
	for i := range labels {
		labels[i] = fmt.Sprintf("GPU%d", i)
	}
	labelW := 2 + textWidth(labels[max(n-1, 0)])
	colW := make([]int, n)
	for c := 0; c < n; c++ {
		colW[c] = textWidth(labels[c])
		for r := 0; r < n; r++ {
			colW[c] = max(colW[c], textWidth(cells[r][c]))
		}
	}
	for start := 0; start < n; {
		end, used := start, labelW
		for end < n && (end == start || used+2+colW[end] <= width) {
			used += 2 + colW[end]
			end++
		}
		if start > 0 {
			b.WriteString("\n")
		}
		rows := [][]string{{"  "}}
		for c := start; c < end; c++ {
			rows[0] = append(rows[0], labels[c])
		}
		for r := 0; r < n; r++ {
			row := []string{"  " + labels[r]}
			for c := start; c < end; c++ {
				row = append(row, cells[r][c])
			}
			rows = append(rows, row)
		}
		writeTable(b, rows)
		start = end
	}
}

// matrixWidth is how wide cells lay out in one block.
func matrixWidth(cells [][]string) int {
	n := len(cells)
	w := 2 + textWidth(fmt.Sprintf("GPU%d", max(n-1, 0)))
	for c := 0; c < n; c++ {
		cw := textWidth(fmt.Sprintf("GPU%d", c))
		for r := 0; r < n; r++ {
			cw = max(cw, textWidth(cells[r][c]))
		}
		w += 2 + cw
	}
	return w
}

// wrap writes prefix+text, breaking text at spaces so no line passes width; lines
// after the first start with indent spaces. A word longer than a line stays whole.
func wrap(b *strings.Builder, width int, prefix string, indent int, text string) {
	width = max(width, minWidth)
	line := prefix
	room := width - textWidth(prefix)
	first := true
	for _, word := range strings.Fields(text) {
		wl := textWidth(word)
		switch {
		case first:
			line += word
			room -= wl
			first = false
		case wl+1 <= room:
			line += " " + word
			room -= wl + 1
		default:
			b.WriteString(line + "\n")
			line = strings.Repeat(" ", indent) + word
			room = width - indent - wl
		}
	}
	b.WriteString(line + "\n")
}
