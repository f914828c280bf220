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

	// Legend.
	x := svgLeft
	for i, r := range out.Results {
		fmt.Fprintf(&b, `<rect x="%d" y="56" width="12" height="12" fill="%s"/>`, x, svgColors[i%len(svgColors)])
		fmt.Fprintf(&b, `<text x="%d" y="66" font-size="12">%s</text>`+"\n", x+16, esc(r.Strategy))
		x += 30 + 8*len(r.Strategy)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="62" x2="%d" y2="62" stroke="black" stroke-width="2.5"/>`, x, x+12)
	fmt.Fprintf(&b, `<text x="%d" y="66" font-size="12">%s</text>`+"\n", x+16, esc(tickLegend))
	for _, s := range out.Skipped {
		fmt.Fprintf(&b, `<text x="%d" y="80" font-size="10" fill="#666">skipped %s</text>`+"\n", svgLeft, esc(s))
	}

	nSteps := len(out.Labels)
	plotW := float64(svgWidth - svgLeft - svgRight)
	groupW := plotW / float64(max(nSteps, 1))
	barW := math.Min(18, groupW*0.8/float64(max(len(out.Results), 1)))
	for pi, p := range panels {
		top := float64(svgTop + pi*(svgPanelH+svgPanelGap) + 18)
		bottom := top + svgPanelH - 18
		maxY := 1
		for _, r := range out.Results {
			for _, s := range r.Steps {
				lo, hi, tick := p.bar(s)
				maxY = max(maxY, lo, hi, tick)
			}
		}
		tickStep := niceStep(maxY)
		maxY = int(math.Ceil(float64(maxY)/float64(tickStep))) * tickStep
		y := func(v int) float64 { return bottom - float64(v)/float64(maxY)*(bottom-top) }

		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", svgLeft, top-8, esc(p.title))
		for v := 0; v <= maxY; v += tickStep {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, svgLeft, y(v), svgWidth-svgRight, y(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="10" text-anchor="end">%d</text>`+"\n", svgLeft-6, y(v)+3, v)
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", svgLeft, bottom, svgWidth-svgRight, bottom)
		for si, label := range out.Labels {
			gx := float64(svgLeft) + groupW*float64(si)
			start := gx + (groupW-barW*float64(len(out.Results)))/2
			for ri, r := range out.Results {
				s := r.Steps[si]
				bx := start + barW*float64(ri)
				color := svgColors[ri%len(svgColors)]
				if s.Error != "" {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" fill="%s">!</text>`, bx+barW/2-2, bottom-3, color)
					continue
				}
				lo, hi, tick := p.bar(s)
				h := math.Max(y(lo)-y(hi), 1.5) // a zero still shows as a sliver, so "none" differs from "missing"
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %d–%d</title></rect>`,
					bx+0.5, y(lo)-h, barW-1, h, color, esc(r.Strategy), esc(label), lo, hi)
				if tick >= 0 {
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="2.5"/>`,
						bx, y(tick), bx+barW, y(tick))
				}
			}
			fmt.Fprintln(&b)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="end" transform="rotate(-30 %.1f %.1f)">%s</text>`+"\n",
				gx+groupW/2+4, bottom+14, gx+groupW/2+4, bottom+14, esc(label))
		}
	}
	fmt.Fprintln(&b, "</svg>")
	_, err := w.Write(b.Bytes())
	return err
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
