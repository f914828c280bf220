// Command simulate replays a scenario of group changes through allocation strategies, feeding each
// step's plan back as the next step's previous plan, and reports how many queues moved against the
// fewest a balanced plan needs, the load spread and the cross-zone queues.
//
//	go run ./hack/simulate -scenario scale-out -strategies Sticky,Averagely -format table
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

func main() {
	if err := mainErr(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "simulate:", err)
		os.Exit(1)
	}
}

func mainErr(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	scenario := fs.String("scenario", "scale-out", "a built-in scenario name ("+strings.Join(builtinNames(), ", ")+") or a scenario JSON file")
	strategies := fs.String("strategies", "", "comma-separated strategy names; empty means every registered strategy except ByConfig")
	format := fs.String("format", "json", "output format: json, table, svg or markdown")
	maxSkew := fs.Int("max-skew", 0, "Sticky's MaxSkew")
	zoneRepair := fs.Int("zone-repair-moves", allocate.DefaultZoneRepairMoves, "Sticky's ZoneRepairMoves: the most queues a replan moves beyond what balance forces, for locality")
	balanceBy := fs.String("balance-by", allocate.BalanceByQueues, "what Sticky balances: Queues or Load (the scenario's queueLoad)")
	tolerance := fs.Int("load-tolerance", 10, "Sticky's load tolerance, in percent, and the bound withinLoadBound checks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sc, err := loadScenario(*scenario)
	if err != nil {
		return err
	}
	names, skipped, err := strategyNames(*strategies)
	if err != nil {
		return err
	}
	out, err := run(sc, names, options{maxSkew: int32(*maxSkew), zoneRepair: ptr(int32(*zoneRepair)), balanceBy: *balanceBy, tolerance: float64(*tolerance) / 100})
	if err != nil {
		return err
	}
	out.Skipped = skipped
	switch *format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "table":
		return writeTable(w, out)
	case "svg":
		return writeSVG(w, sc, out)
	case "markdown":
		return writeMarkdown(w, sc, out)
	default:
		return fmt.Errorf("unknown -format %q (json, table, svg, markdown)", *format)
	}
}

func ptr[T any](v T) *T { return &v }

// writeTable prints one row per strategy and step.
func writeTable(w io.Writer, out Output) error {
	// The rows are built in memory, where writes cannot fail, and written out once.
	var b strings.Builder
	fmt.Fprintln(&b, "STRATEGY\tSTEP\tMOVED\tLOWER BOUND\tBALANCE MOVES\tLOCALITY MOVES\tMAX\tMIN\tCROSS-ZONE\tMIN CROSS-ZONE\tSETTLE MOVES\tSETTLED CROSS-ZONE\tBALANCED\tMAX LOAD\tMEAN LOAD\tMOVED LOAD\tWITHIN LOAD BOUND\tWITHIN LOAD AIM\tPREVIOUS WITHIN TOLERANCE\tERROR")
	for _, r := range out.Results {
		for i, s := range r.Steps {
			fmt.Fprintf(&b, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%.4g\t%.4g\t%.4g\t%v\t%v\t%v\t%s\n",
				r.Strategy, out.Labels[i], s.Moved, s.LowerBound, s.BalanceMoves, s.LocalityMoves, s.MaxLoad, s.MinLoad, s.CrossZone, s.MinCrossZone, s.SettleMoves, s.SettledCrossZone, s.Balanced,
				s.MaxMemberLoad, s.MeanMemberLoad, s.MovedLoad, s.WithinLoadBound, s.WithinLoadAim, s.PreviousWithinTolerance, s.Error)
		}
	}
	for _, s := range out.Skipped {
		fmt.Fprintln(&b, "skipped "+s)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if _, err := io.WriteString(tw, b.String()); err != nil {
		return err
	}
	return tw.Flush()
}

// writeMarkdown prints a table of moved / lower bound per step (rows) and strategy (columns), with the
// load spread and balance, for the docs.
func writeMarkdown(w io.Writer, sc Scenario, out Output) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n%s\n\n", sc.Name, sc.Description)
	fmt.Fprint(&b, "| step |")
	for _, r := range out.Results {
		fmt.Fprintf(&b, " %s |", r.Strategy)
	}
	fmt.Fprint(&b, "\n|---|")
	for range out.Results {
		fmt.Fprint(&b, "---|")
	}
	fmt.Fprintln(&b)
	for i, label := range out.Labels {
		fmt.Fprintf(&b, "| %s |", label)
		for _, r := range out.Results {
			s := r.Steps[i]
			if s.Error != "" {
				fmt.Fprint(&b, " error |")
				continue
			}
			if s.MeanMemberLoad > 0 {
				mark := ""
				if !s.WithinLoadBound {
					mark = " ✗"
				}
				fmt.Fprintf(&b, " %d moved (load %.3g); busiest %.2f× mean%s |", s.Moved, s.MovedLoad, s.MaxMemberLoad/s.MeanMemberLoad, mark)
				continue
			}
			mark := ""
			if !s.Balanced {
				mark = " ✗"
			}
			settled := ""
			if s.SettleMoves > 0 {
				settled = fmt.Sprintf(", +%d settling to %d", s.SettleMoves, s.SettledCrossZone)
			}
			fmt.Fprintf(&b, " %d / %d (%d–%d%s, %d cross of min %d%s) |", s.Moved, s.LowerBound, s.MinLoad, s.MaxLoad, mark, s.CrossZone, s.MinCrossZone, settled)
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintln(&b)
	_, err := io.WriteString(w, b.String())
	return err
}
