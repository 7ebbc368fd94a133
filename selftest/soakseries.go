package selftest

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// sparkLevels draw a value from 1/8 to 8/8 of its row's highest.
var sparkLevels = []rune("▁▂▃▄▅▆▇█")

// seriesRow is one line of the soak's time series: a value per series entry, NaN
// where the round has none.
type seriesRow struct {
	label string
	vals  []float64
	at    []float64 // the figures its end prints, when vals are relative (copies); nil: vals
	low   bool      // a column of several rounds shows the lowest (a dip must show), else the highest
	unit  string    // after the start/end figures
	prec  int       // decimals of the figures
}

// renderSoakSeries draws the soak's time series (Soak.Series) as one line per
// ordered pair's copy, the all-reduce, and each GPU's temperature and power, each
// a sparkline scaled from 0 to its own highest, with a line marking the rounds that
// found a fault and the time axis under them. Columns are equal spans of time (a
// downsampled series keeps old rounds sparser than new ones); a column shows the
// lowest bandwidth and the highest temperature and power of its rounds. Copy sizes
// cycle round by round, so a copy's line is each round's figure relative to the
// copy's first round at the same size.
func renderSoakSeries(b *strings.Builder, r *Report, width int) {
	s := r.Soak
	if s == nil || len(s.Series) < 2 {
		return
	}
	size := s.Series[0].Bytes
	var rows []seriesRow
	rows = append(rows, copyRows(s.Series, size)...)
	if ar := arRow(s.Series); ar != nil {
		rows = append(rows, *ar)
	}
	rows = append(rows, gpuRows(s.Series)...)
	if len(rows) == 0 {
		return
	}
	labelW := len("faults")
	for _, row := range rows {
		labelW = max(labelW, utf8.RuneCountInString(row.label))
	}
	labelW = min(labelW, 26)
	tails := make([]string, len(rows))
	tailW := 0
	for i, row := range rows {
		tails[i] = seriesTail(row, size)
		tailW = max(tailW, utf8.RuneCountInString(tails[i]))
	}
	n := len(s.Series)
	cols := max(min(width-2-labelW-2-2-tailW, n), 8)
	first, last := s.Series[0], s.Series[n-1]
	col := make([]int, n)
	for i, x := range s.Series {
		if span := last.AtMS - first.AtMS; span > 0 {
			col[i] = min(int((x.AtMS-first.AtMS)*int64(cols)/span), cols-1)
		}
	}
	wrap(b, width, "  ", 2, fmt.Sprintf("Over time: rounds %d to %d, %s to %s (%d of them kept in the series), %d columns of equal time.",
		first.Round, last.Round, soakClock(first.AtMS), soakClock(last.AtMS), n, cols))
	wrap(b, width, "  ", 2, "Each line runs from 0 to its own highest; a copy is relative to its first round of the same size (figures at "+HumanBytes(size)+"); a column shows its rounds' lowest bandwidth, highest temperature and power; ! marks a round with a fault.")
	for i, row := range rows {
		fmt.Fprintf(b, "  %-*s  %s  %s\n", labelW, clip(row.label, labelW), spark(row, col, cols), tails[i])
	}
	mark := []rune(strings.Repeat(" ", cols))
	for i, x := range s.Series {
		switch {
		case x.Faulty():
			mark[col[i]] = '!'
		case mark[col[i]] == ' ':
			mark[col[i]] = '.'
		}
	}
	fmt.Fprintf(b, "  %-*s  %s\n", labelW, "faults", string(mark))
	start, end := soakClock(first.AtMS), soakClock(last.AtMS)
	gap := max(cols-len(start)-len(end), 1)
	fmt.Fprintf(b, "  %-*s  %s%s%s\n", labelW, "", start, strings.Repeat(" ", gap), end)
}

// copyRows is one row per ordered pair (and local copy): its copy engine write where
// the soak has one, else its first method and direction; the figures the row's end
// prints are those at size.
func copyRows(series []SoakRound, size int64) []seriesRow {
	type key struct{ src, dst int }
	var order []key
	chosen := map[key]string{}
	for _, x := range series {
		for _, c := range x.Copies {
			k := key{c.Src, c.Dst}
			name := c.Method + " " + c.Direction
			if _, ok := chosen[k]; !ok {
				order = append(order, k)
				chosen[k] = name
			}
			if c.Method == MethodCE && c.Direction == DirWrite {
				chosen[k] = name
			}
		}
	}
	var rows []seriesRow
	for _, k := range order {
		label := fmt.Sprintf("GPU%d->GPU%d %s", k.src, k.dst, chosen[k])
		if k.src == k.dst {
			label = fmt.Sprintf("GPU%d local %s", k.src, strings.TrimSuffix(chosen[k], " "+DirLocal))
		}
		row := seriesRow{label: label, vals: make([]float64, len(series)), at: make([]float64, len(series)), low: true, unit: "GB/s", prec: 1}
		base := map[int64]float64{} // the copy's first figure at each size
		for i, x := range series {
			row.vals[i], row.at[i] = math.NaN(), math.NaN()
			for _, c := range x.Copies {
				if c.Src != k.src || c.Dst != k.dst || c.Method+" "+c.Direction != chosen[k] || c.Error != "" || c.GBps <= 0 {
					continue
				}
				if _, ok := base[x.Bytes]; !ok {
					base[x.Bytes] = c.GBps
				}
				row.vals[i] = c.GBps / base[x.Bytes]
				if x.Bytes == size {
					row.at[i] = c.GBps
				}
			}
		}
		rows = append(rows, row)
	}
	return rows
}

func arRow(series []SoakRound) *seriesRow {
	row := seriesRow{label: "all-reduce busbw", vals: make([]float64, len(series)), low: true, unit: "GB/s", prec: 1}
	have := false
	for i, x := range series {
		row.vals[i] = math.NaN()
		if a := x.AllReduce; a != nil && a.Error == "" && a.BusBWAtMax > 0 {
			row.vals[i], have = a.BusBWAtMax, true
		}
	}
	if !have {
		return nil
	}
	return &row
}

// gpuRows are each GPU's temperature and board power, where NVML answered them.
func gpuRows(series []SoakRound) []seriesRow {
	var gpus []int
	seen := map[int]bool{}
	for _, x := range series {
		for _, g := range x.GPUs {
			if !seen[g.GPU] {
				seen[g.GPU] = true
				gpus = append(gpus, g.GPU)
			}
		}
	}
	var rows []seriesRow
	for _, sensor := range []struct {
		name, unit string
		get        func(SoakGPU) *int
		div        float64
	}{
		{"°C", "°C", func(g SoakGPU) *int { return g.TemperatureC }, 1},
		{"power", "W", func(g SoakGPU) *int { return g.PowerMW }, 1000},
	} {
		for _, gpu := range gpus {
			row := seriesRow{label: fmt.Sprintf("GPU%d %s", gpu, sensor.name), vals: make([]float64, len(series)), unit: sensor.unit}
			have := false
			for i, x := range series {
				row.vals[i] = math.NaN()
				for _, g := range x.GPUs {
					if v := sensor.get(g); g.GPU == gpu && v != nil {
						row.vals[i], have = float64(*v)/sensor.div, true
					}
				}
			}
			if have {
				rows = append(rows, row)
			}
		}
	}
	return rows
}

// spark draws a row in cols columns, entry i in column col[i]; a column with no
// value is blank.
func spark(row seriesRow, col []int, cols int) string {
	top := 0.0
	for _, v := range row.vals {
		if !math.IsNaN(v) {
			top = max(top, v)
		}
	}
	vals := make([]float64, cols)
	for c := range vals {
		vals[c] = math.NaN()
	}
	for i, x := range row.vals {
		v := &vals[col[i]]
		switch {
		case math.IsNaN(x):
		case math.IsNaN(*v), row.low && x < *v, !row.low && x > *v:
			*v = x
		}
	}
	var out strings.Builder
	for _, v := range vals {
		if math.IsNaN(v) || top <= 0 {
			out.WriteRune(' ')
			continue
		}
		level := int(math.Ceil(v/top*float64(len(sparkLevels)))) - 1
		out.WriteRune(sparkLevels[min(max(level, 0), len(sparkLevels)-1)])
	}
	return out.String()
}

// seriesTail is a row's first and last figure and its extreme: "24.1→12.0 GB/s,
// min 11.8"; a copy's are those at size.
func seriesTail(row seriesRow, size int64) string {
	figs := row.vals
	if row.at != nil {
		figs = row.at
	}
	first, last, ext := math.NaN(), math.NaN(), math.NaN()
	for _, v := range figs {
		if math.IsNaN(v) {
			continue
		}
		if math.IsNaN(first) {
			first = v
		}
		last = v
		if math.IsNaN(ext) || row.low && v < ext || !row.low && v > ext {
			ext = v
		}
	}
	if math.IsNaN(first) {
		return "-"
	}
	word := "max"
	if row.low {
		word = "min"
	}
	return fmt.Sprintf("%.*f→%.*f %s, %s %.*f", row.prec, first, row.prec, last, row.unit, word, row.prec, ext)
}

// soakClock writes a time into the soak as T+h:mm:ss.
func soakClock(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	return fmt.Sprintf("T+%d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}

// clip shortens s to n runes.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}
