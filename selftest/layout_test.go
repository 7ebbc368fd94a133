package selftest

import (
	"fmt"
	"strings"
	"testing"
)

// A matrix too wide for the console is cut into blocks of as many columns as
// fit, to the column, each with its row labels and a blank line between
// blocks; one that fits is one block exactly matrixWidth wide.
func TestWriteMatrixBlocks(t *testing.T) {
	cells := [][]string{
		{"-", "123456", "7.5"},
		{"1.5", "-", "22.0"},
		{"2.5", "8", "-"},
	}
	oneColumnEach := "" +
		"        GPU0\n" +
		"  GPU0  -\n" +
		"  GPU1  1.5\n" +
		"  GPU2  2.5\n" +
		"\n" +
		"        GPU1\n" +
		"  GPU0  123456\n" +
		"  GPU1  -\n" +
		"  GPU2  8\n" +
		"\n" +
		"        GPU2\n" +
		"  GPU0  7.5\n" +
		"  GPU1  22.0\n" +
		"  GPU2  -\n"
	// Columns 4 ("GPU0"), 6 and 4 wide after the 6-wide labels: the first two
	// fill exactly 20.
	for _, tt := range []struct {
		width int
		want  string
	}{
		{20, "" +
			"        GPU0  GPU1\n" +
			"  GPU0  -     123456\n" +
			"  GPU1  1.5   -\n" +
			"  GPU2  2.5   8\n" +
			"\n" +
			"        GPU2\n" +
			"  GPU0  7.5\n" +
			"  GPU1  22.0\n" +
			"  GPU2  -\n"},
		{19, oneColumnEach},
		{26, "" +
			"        GPU0  GPU1    GPU2\n" +
			"  GPU0  -     123456  7.5\n" +
			"  GPU1  1.5   -       22.0\n" +
			"  GPU2  2.5   8       -\n"},
		// Narrower than one column: still one column a block, never none.
		{5, oneColumnEach},
	} {
		var b strings.Builder
		writeMatrix(&b, tt.width, cells)
		if b.String() != tt.want {
			t.Errorf("width %d:\n%s\nwant\n%s", tt.width, b.String(), tt.want)
		}
	}
	if got := matrixWidth(cells); got != 26 {
		t.Errorf("matrixWidth = %d, want 26", got)
	}
}

// matrixWidth is the width of the widest line writeMatrix draws in one block,
// with the row labels as wide as the last GPU's (GPU10 is one wider).
func TestMatrixWidthEleven(t *testing.T) {
	for _, n := range []int{1, 10, 11} {
		cells := make([][]string, n)
		for r := range cells {
			cells[r] = make([]string, n)
			for c := range cells[r] {
				cells[r][c] = "x"
			}
		}
		var b strings.Builder
		writeMatrix(&b, 1000, cells)
		widest := 0
		for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
			widest = max(widest, textWidth(line))
		}
		labelW := 2 + len(fmt.Sprintf("GPU%d", n-1))
		want := labelW
		for c := 0; c < n; c++ {
			want += 2 + len(fmt.Sprintf("GPU%d", c))
		}
		if got := matrixWidth(cells); got != want || widest != want {
			t.Errorf("%d GPUs: matrixWidth %d, widest line %d, want %d", n, got, widest, want)
		}
	}
}

// wrap breaks at spaces so that a line may fill the width exactly but never
// pass it; continuation lines start with indent spaces; a word longer than a
// line stays whole on its own line; a width under 40 counts as 40.
func TestWrap(t *testing.T) {
	// "  note: " is 8 wide: 32 columns left on the first line.
	words30 := strings.Repeat("a", 30)
	for _, tt := range []struct {
		name  string
		width int
		text  string
		want  string
	}{
		{"fills exactly", 40, words30 + " b", "  note: " + words30 + " b\n"},
		{"one over", 40, words30 + " bc", "  note: " + words30 + "\n    bc\n"},
		{"continuation fills exactly", 40, "x " + strings.Repeat("c", 34) + " d", "  note: x\n    " + strings.Repeat("c", 34) + " d\n"},
		{"continuation one over", 40, "x " + strings.Repeat("c", 34) + " de", "  note: x\n    " + strings.Repeat("c", 34) + "\n    de\n"},
		{"a long word whole", 40, "x " + strings.Repeat("w", 50) + " y", "  note: x\n    " + strings.Repeat("w", 50) + "\n    y\n"},
		{"width under the minimum", 10, words30 + " b", "  note: " + words30 + " b\n"},
		{"wider", 60, words30 + " " + words30, "  note: " + words30 + "\n    " + words30 + "\n"},
		{"no words", 40, "  ", "  note: \n"},
	} {
		var b strings.Builder
		wrap(&b, tt.width, "  note: ", 4, tt.text)
		if b.String() != tt.want {
			t.Errorf("%s:\n%q\nwant\n%q", tt.name, b.String(), tt.want)
		}
	}
}
