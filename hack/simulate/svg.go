package main

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
)

// The figure: a title, a legend, then three panels sharing the step axis. Every panel groups one bar
// per strategy at each step, so strategies read side by side.
const (
	svgWidth     = 960
	svgLeft      = 60
	svgRight     = 20
	svgPanelH    = 170
	svgPanelGap  = 78
	svgTop       = 86
	svgFontStack = "DejaVu Sans, Helvetica, Arial, sans-serif"
)

var svgColors = []string{"#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

type svgPanel struct {
	title string
	// bar returns the bar's bottom and top for a strategy's step, and the lower-bound tick (-1 for none).
	bar func(s StepResult) (lo, hi, tick int)
}

func writeSVG(w io.Writer, sc Scenario, out Output) error {
	if hasLoad(sc) {
		return writePanels(w, sc, out, loadPanels, "110% of the mean; lower bound")
	}
	return writePanels(w, sc, out, countPanels, "lower bound")
}

// countPanels plot queue counts; loadPanels, for a scenario with loads, the load each member carries.
var (
	countPanels = []svgPanel{
		{"Queues moved (bars) against the fewest a balanced plan needs (black tick)", func(s StepResult) (int, int, int) {
			return 0, s.Moved, s.LowerBound
		}},
		{"Queues per member: bar spans min to max load", func(s StepResult) (int, int, int) {
			return s.MinLoad, s.MaxLoad, -1
		}},
		{"Queues read from a broker in another zone", func(s StepResult) (int, int, int) {
			return 0, s.CrossZone, -1
		}},
	}
	loadPanels = []svgPanel{
		{"Load of the busiest member, % of the members' mean (black tick: 110%)", func(s StepResult) (int, int, int) {
			if s.MeanMemberLoad == 0 {
				return 0, 0, 110
			}
			return 0, int(math.Round(100 * s.MaxMemberLoad / s.MeanMemberLoad)), 110
		}},
		{"Queues moved (bars) against the fewest a count-balanced plan needs (black tick)", func(s StepResult) (int, int, int) {
			return 0, s.Moved, s.LowerBound
		}},
		{"Load moved, % of the members' mean", func(s StepResult) (int, int, int) {
			if s.MeanMemberLoad == 0 {
				return 0, 0, -1
			}
			return 0, int(math.Round(100 * s.MovedLoad / s.MeanMemberLoad)), -1
		}},
	}
)

// hasLoad reports whether any step of sc gives queues a load.
func hasLoad(sc Scenario) bool {
	for _, st := range sc.Steps {
		if st.QueueLoad != nil {
			return true
		}
	}
	return false
}

// writePanels draws panels; tickLegend says what the black ticks mark.
func writePanels(w io.Writer, sc Scenario, out Output, panels []svgPanel, tickLegend string) error {
	height := svgTop + len(panels)*(svgPanelH+svgPanelGap) + 10
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n",
		svgWidth, height, svgWidth, height, svgFontStack)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="18" font-weight="bold">Scenario %s</text>`+"\n", svgLeft, esc(sc.Name))
	fmt.Fprintf(&b, `<text x="%d" y="44" font-size="12" fill="#444">%s</text>`+"\n", svgLeft, esc(sc.Description))
	writeLegend(&b, out, tickLegend)
	for pi, p := range panels {
		writePanel(&b, out, p, float64(svgTop+pi*(svgPanelH+svgPanelGap)+18))
	}
	fmt.Fprintln(&b, "</svg>")
	_, err := w.Write(b.Bytes())
	return err
}

// writeLegend draws each strategy's colour, what the ticks mark and the strategies skipped.
func writeLegend(b *bytes.Buffer, out Output, tickLegend string) {
	x := svgLeft
	for i, r := range out.Results {
		fmt.Fprintf(b, `<rect x="%d" y="56" width="12" height="12" fill="%s"/>`, x, svgColors[i%len(svgColors)])
		fmt.Fprintf(b, `<text x="%d" y="66" font-size="12">%s</text>`+"\n", x+16, esc(r.Strategy))
		x += 30 + 8*len(r.Strategy)
	}
	fmt.Fprintf(b, `<line x1="%d" y1="62" x2="%d" y2="62" stroke="black" stroke-width="2.5"/>`, x, x+12)
	fmt.Fprintf(b, `<text x="%d" y="66" font-size="12">%s</text>`+"\n", x+16, esc(tickLegend))
	for _, s := range out.Skipped {
		fmt.Fprintf(b, `<text x="%d" y="80" font-size="10" fill="#666">skipped %s</text>`+"\n", svgLeft, esc(s))
	}
}

// panelFrame is where one panel's bars go: its top and bottom, the width of a step's group of bars and
// of one bar, and its scale, 0 at the bottom to maxY at the top, with a gridline every tickStep.
type panelFrame struct {
	top, bottom, groupW, barW float64
	maxY, tickStep            int
}

// newPanelFrame lays out panel p with its top at top. The scale reaches the largest value any strategy's
// bars and ticks reach (at least 1), rounded up to a whole gridline.
func newPanelFrame(out Output, p svgPanel, top float64) panelFrame {
	plotW := float64(svgWidth - svgLeft - svgRight)
	f := panelFrame{top: top, bottom: top + svgPanelH - 18, groupW: plotW / float64(max(len(out.Labels), 1))}
	f.barW = math.Min(18, f.groupW*0.8/float64(max(len(out.Results), 1)))
	f.maxY = 1
	for _, r := range out.Results {
		for _, s := range r.Steps {
			lo, hi, tick := p.bar(s)
			f.maxY = max(f.maxY, lo, hi, tick)
		}
	}
	f.tickStep = niceStep(f.maxY)
	f.maxY = int(math.Ceil(float64(f.maxY)/float64(f.tickStep))) * f.tickStep
	return f
}

// y is the height at which value v sits.
func (f panelFrame) y(v int) float64 {
	return f.bottom - float64(v)/float64(f.maxY)*(f.bottom-f.top)
}

// writePanel draws panel p with its top at top: the title, the gridlines, and per step a group of bars,
// one per strategy, under the step's label.
func writePanel(b *bytes.Buffer, out Output, p svgPanel, top float64) {
	f := newPanelFrame(out, p, top)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", svgLeft, top-8, esc(p.title))
	for v := 0; v <= f.maxY; v += f.tickStep {
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, svgLeft, f.y(v), svgWidth-svgRight, f.y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="10" text-anchor="end">%d</text>`+"\n", svgLeft-6, f.y(v)+3, v)
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", svgLeft, f.bottom, svgWidth-svgRight, f.bottom)
	for si, label := range out.Labels {
		gx := float64(svgLeft) + f.groupW*float64(si)
		start := gx + (f.groupW-f.barW*float64(len(out.Results)))/2
		for ri, r := range out.Results {
			f.writeBar(b, p, r, si, label, start+f.barW*float64(ri), svgColors[ri%len(svgColors)])
		}
		fmt.Fprintln(b)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="end" transform="rotate(-30 %.1f %.1f)">%s</text>`+"\n",
			gx+f.groupW/2+4, f.bottom+14, gx+f.groupW/2+4, f.bottom+14, esc(label))
	}
}

// writeBar draws strategy r's bar for step si at x: "!" for a step that failed, else the range lo–hi of
// panel p's value and its tick.
func (f panelFrame) writeBar(b *bytes.Buffer, p svgPanel, r Result, si int, label string, x float64, color string) {
	s := r.Steps[si]
	if s.Error != "" {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="9" fill="%s">!</text>`, x+f.barW/2-2, f.bottom-3, color)
		return
	}
	lo, hi, tick := p.bar(s)
	h := math.Max(f.y(lo)-f.y(hi), 1.5) // a zero still shows as a sliver, so "none" differs from "missing"
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %d–%d</title></rect>`,
		x+0.5, f.y(lo)-h, f.barW-1, h, color, esc(r.Strategy), esc(label), lo, hi)
	if tick >= 0 {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="2.5"/>`,
			x, f.y(tick), x+f.barW, f.y(tick))
	}
}

// niceStep picks a 1, 2 or 5 times a power of ten so that 0..maxY has at most about five gridlines.
func niceStep(maxY int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if maxY/(m*p) <= 5 {
				return m * p
			}
		}
	}
}

func esc(s string) string { return html.EscapeString(s) }
