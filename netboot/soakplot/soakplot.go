// Package soakplot draws a burn-in's plot (selftest.SoakPlot) as SVG on the server:
// peer copy-engine write bandwidth per ordered pair, and GPU temperature, over the
// soak's time. The fleet's node page inlines it; no JavaScript is involved. The same
// plot gives the same bytes: every figure is formatted here, in a fixed order.
package soakplot

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

// Chart geometry, in SVG user units.
const (
	width, height            = 720.0, 240.0
	left, right, top, bottom = 52.0, 132.0, 14.0, 34.0
)

// palette colours the lines; past its length they repeat (8 GPUs have 56 pairs).
var palette = []string{"#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#5d4037", "#455a64"}

// Bandwidth draws each pair's GB/s at the soak's largest copy size over time; ""
// when the plot has no bandwidth figure.
func Bandwidth(p selftest.SoakPlot) string {
	var lines []line
	for j, k := range p.Pairs {
		l := line{class: "pair", key: "data-pair", name: k.String(), label: fmt.Sprintf("GPU%d→GPU%d", k.Src, k.Dst)}
		for _, pt := range p.Points {
			if len(pt.GBps) == len(p.Pairs) && pt.GBps[j] > 0 {
				l.pts = append(l.pts, xy{pt.AtMS, pt.GBps[j]})
			}
		}
		lines = append(lines, l)
	}
	return chart(p, lines, "bandwidth", "GB/s", "peer copy-engine write bandwidth per GPU pair over the soak", 0)
}

// Temperature draws each GPU's temperature over time; "" when none was read.
func Temperature(p selftest.SoakPlot) string {
	var lines []line
	for j, g := range p.GPUs {
		l := line{class: "temp", key: "data-gpu", name: strconv.Itoa(g), label: fmt.Sprintf("GPU%d", g)}
		for _, pt := range p.Points {
			if len(pt.TempC) == len(p.GPUs) && pt.TempC[j] != 0 {
				l.pts = append(l.pts, xy{pt.AtMS, float64(pt.TempC[j])})
			}
		}
		lines = append(lines, l)
	}
	return chart(p, lines, "temperature", "°C", "GPU temperature over the soak", 20)
}

type xy struct {
	atMS int64
	v    float64
}

type line struct {
	class, key, name, label string
	pts                     []xy
}

func chart(p selftest.SoakPlot, lines []line, kind, unit, title string, floor float64) string {
	n := 0
	var tmax int64
	ymax, ymin := 0.0, math.Inf(1)
	for _, l := range lines {
		n += len(l.pts)
		for _, q := range l.pts {
			tmax = max(tmax, q.atMS)
			ymax = math.Max(ymax, q.v)
			ymin = math.Min(ymin, q.v)
		}
	}
	if n == 0 {
		return ""
	}
	for _, pt := range p.Points {
		tmax = max(tmax, pt.AtMS)
	}
	if tmax == 0 {
		tmax = 1000
	}
	ylo := 0.0
	if floor > 0 {
		// Temperatures sit far from 0: start the axis below the coolest reading.
		ylo = math.Max(0, math.Floor(math.Min(ymin, floor)/10)*10)
	}
	yhi := niceCeil(ymax * 1.1)
	if yhi <= ylo {
		yhi = ylo + 10
	}
	x := func(ms int64) float64 { return left + float64(ms)/float64(tmax)*(width-left-right) }
	y := func(v float64) float64 { return height - bottom - (v-ylo)/(yhi-ylo)*(height-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="soak-plot" data-kind="%s" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %s %s" width="%s" height="%s" role="img" aria-label="%s">`,
		kind, f0(width), f0(height), f0(width), f0(height), html.EscapeString(title))
	for i := 0; i <= 4; i++ {
		v := ylo + (yhi-ylo)*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="#e0e0e0"/><text x="%s" y="%s" font-size="10" text-anchor="end">%s</text>`,
			f1(left), f1(width-right), f1(y(v)), f1(y(v)), f1(left-4), f1(y(v)+3), strconv.FormatFloat(v, 'f', -1, 64))
	}
	for i := 0; i <= 4; i++ {
		ms := tmax * int64(i) / 4
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="10" text-anchor="middle">%s</text>`, f1(x(ms)), f1(height-bottom+14), Elapsed(ms))
	}
	fmt.Fprintf(&b, `<text x="12" y="%s" font-size="10" transform="rotate(-90 12 %s)" text-anchor="middle">%s</text>`, f1((height-bottom)/2), f1((height-bottom)/2), html.EscapeString(unit))
	fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="10" text-anchor="middle">time into the soak</text>`, f1((left+width-right)/2), f1(height-4))
	for _, pt := range p.Points {
		if pt.Fault {
			fmt.Fprintf(&b, `<line class="fault" data-round="%d" x1="%s" x2="%s" y1="%s" y2="%s" stroke="#c62828" stroke-dasharray="3 2"><title>round %d: a fault</title></line>`,
				pt.Round, f1(x(pt.AtMS)), f1(x(pt.AtMS)), f1(top), f1(height-bottom), pt.Round)
		}
	}
	legend := 0
	for i, l := range lines {
		if len(l.pts) == 0 {
			continue
		}
		color := palette[i%len(palette)]
		fmt.Fprintf(&b, `<polyline class="%s" %s="%s" data-points="%d" fill="none" stroke="%s" stroke-width="1.5" points="`, l.class, l.key, html.EscapeString(l.name), len(l.pts), color)
		for k, q := range l.pts {
			if k > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(f1(x(q.atMS)) + "," + f1(y(q.v)))
		}
		last := l.pts[len(l.pts)-1]
		fmt.Fprintf(&b, `"><title>%s: %s %s at %s</title></polyline>`, html.EscapeString(l.label), strconv.FormatFloat(last.v, 'f', -1, 64), html.EscapeString(unit), Elapsed(last.atMS))
		if legend < 12 {
			ly := top + 6 + float64(legend)*14
			fmt.Fprintf(&b, `<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s" stroke-width="2"/><text x="%s" y="%s" font-size="10">%s</text>`,
				f1(width-right+8), f1(width-right+22), f1(ly), f1(ly), color, f1(width-right+26), f1(ly+3), html.EscapeString(l.label))
		} else if legend == 12 {
			fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="10">…</text>`, f1(width-right+26), f1(top+6+12*14+3))
		}
		legend++
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// Elapsed writes a time into the soak as the plot's axis does: 0, 45 s, 12 min, 3 h 05.
func Elapsed(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case ms == 0:
		return "0"
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	}
	return fmt.Sprintf("%d h %02d", int(d.Hours()), int(d.Minutes())%60)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
