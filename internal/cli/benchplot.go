package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/bench/connbench"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/bench/proxybench"
)

// plotFlag adds --plot to a benchmark: where it saves its results as JSON and draws SVG pictures of them.
func plotFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "plot", "", "save the results as JSON in this directory and draw SVG pictures of them there (redraw: ironlb bench plot)")
}

// logWritten logs the files a benchmark's --plot wrote; a failure to draw does not fail the run.
func logWritten(files []string, err error) {
	for _, f := range files {
		logf("wrote %s", f)
	}
	if err != nil {
		logf("plots: %v", err)
	}
}

func benchPlotCmd() *cobra.Command {
	var out string
	var trial int
	cmd := &cobra.Command{
		Use:   "plot FILE.json...",
		Short: "Draw SVG pictures from results saved by a benchmark's --plot (bench-failover, bench-proxy, bench proxy-scale, bench-connections)",
		Long: `Reads results that a benchmark saved with --plot and draws them into --out:
  failover-*.json (lab bench-failover): failover-outage.svg, the outage of every run given, side by
    side (e.g. ironlb and MetalLB), and failover-timeline-NAME.svg, one trial of each run (the
    median trial by cut -> ARP, or --trial);
  proxy-lab.json, proxy-scale.json (lab bench-proxy, bench proxy-scale): NAME.svg, full sync time
    against the number of Services for both proxies, and NAME-change.svg, the distribution of the
    endpoint changes' times;
  connections.json (lab bench-connections): connections-stall.svg, the longest stall of a surviving
    flow per trial, one curve per configuration and event.
The same results give the same bytes.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, files []string) error {
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			var failovers []string
			var errs []error
			for _, f := range files {
				kind, err := resultsKind(f)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				switch kind {
				case failover.ResultsKind:
					failovers = append(failovers, f)
				case connbench.ResultsKind:
					svgs, err := connbench.RenderFile(out, f)
					for _, s := range svgs {
						fmt.Println(s)
					}
					errs = append(errs, err)
				case proxybench.ResultsKind:
					svgs, err := proxybench.RenderFile(out, f)
					for _, s := range svgs {
						fmt.Println(s)
					}
					errs = append(errs, err)
				default:
					errs = append(errs, fmt.Errorf("%s: results of kind %q: no picture for them", f, kind))
				}
			}
			if len(failovers) > 0 {
				svgs, err := failover.RenderFiles(out, failovers, trial)
				for _, s := range svgs {
					fmt.Println(s)
				}
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", ".", "directory to write the pictures to (e.g. docs/img)")
	cmd.Flags().IntVar(&trial, "trial", 0, "failover timelines: the trial to show, from 1 (default: the median trial)")
	return cmd
}

// resultsKind reads the kind of a results file.
func resultsKind(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var k struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(b, &k); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	return k.Kind, nil
}
