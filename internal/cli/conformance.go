package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/conformance"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// labConformanceCmd is `lab conformance`: the upstream [sig-network] e2e suite against the running lab,
// or (--compare) against a lab on kube-proxy (nftables) and one on ironlb's proxy, brought up and down
// in turn.
func labConformanceCmd(cfg *lab.Config, load func() (*lab.Lab, error)) *cobra.Command {
	var o conformance.Options
	var compare, longLane bool
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run Kubernetes' [sig-network] e2e suite against the lab: a line per test, a table, N passed, N failed",
		Long: `Runs the upstream e2e test binary (hack/e2e-binaries.sh builds e2e.test from the pinned Kubernetes
module) against the lab that is up, from the lab's client namespace, with --provider=local, in
--procs parallel processes under the ginkgo CLI (hack/ginkgo-binary.sh builds it at the version
Kubernetes pins; --procs 1 runs e2e.test alone). The default --focus and --skip select issue 16's network scope (docs/conformance.md lists what is skipped and why).
It prints a line per test as it ends, then a table of every test and the closing line "N passed, N
failed"; the JUnit file, the suite's output and its progress lines are written to --report-dir. It exits
1 when a test failed.

With --compare, no lab may be up: it brings up a lab with kube-proxy in nftables mode, runs the
selection, takes it down, does the same with ironlb's proxy (lab up --proxy=ironlb), and prints both
columns side by side with the regressions (passed on kube-proxy, not on ironlb) marked.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.Check(); err != nil {
				return err
			}
			ctx := c.Context()
			sel, err := conformance.Select(ctx, o)
			if err != nil {
				return err
			}
			if longLane && o.Procs > 1 {
				main, long, n := conformance.Lanes(o.Selection, sel, regexp.MustCompile(conformance.LongPattern))
				if long != nil {
					o.Selection, o.Long, o.LongProcs = *main, long, n
					o.Procs = max(o.Procs-n, 2)
					fmt.Printf("%d long tests run from the start in a lane of their own, in %d processes, beside the other %d in %d\n", n, n, len(sel)-n, o.Procs)
				}
			}
			if compare {
				return runCompare(ctx, *cfg, load, o, len(sel))
			}
			l, err := load()
			if errors.Is(err, lab.ErrNoLab) {
				return fmt.Errorf("no lab is up: bring one up first (ironlb lab up --proxy=ironlb), or use --compare, which brings up its own")
			}
			if err != nil {
				return err
			}
			if _, procs, _ := l.Present(); procs == 0 {
				return fmt.Errorf("lab %s is recorded in %s but nothing of it runs: ironlb lab down, then lab up", l.Plan.Config.Name, l.State.Dir)
			}
			rs, err := runOne(ctx, l, o, len(sel))
			if err != nil {
				return err
			}
			fmt.Print(conformance.Table(rs))
			if _, failed, _ := conformance.Counts(rs); failed > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.E2EBin, "e2e-bin", envOr("IRONLB_E2E_BIN", lab.DefaultE2EBin()), "directory with e2e.test (hack/e2e-binaries.sh builds it)")
	f.StringVar(&o.Focus, "focus", conformance.DefaultFocus, "ginkgo --focus: the tests to run (a regular expression over their full names)")
	f.StringVar(&o.Skip, "skip", conformance.DefaultSkip(), "ginkgo --skip: the tests to leave out")
	f.StringVar(&o.ReportDir, "report-dir", filepath.Join(os.TempDir(), "ironlb-conformance"), "where the JUnit file (junit-PROXY.xml), the suite's output (e2e-PROXY.log) and its progress lines go")
	f.DurationVar(&o.Timeout, "timeout", 90*time.Minute, "the whole suite's timeout (ginkgo --timeout)")
	f.IntVar(&o.Procs, "procs", conformance.DefaultProcs, "parallel test processes (ginkgo --procs, as upstream's CI runs the suite; [Serial] tests run alone at the end); 1 runs e2e.test alone, one test at a time")
	f.BoolVar(&longLane, "long-lane", true, "with --procs above 1, run the selected tests that alone take as long as the rest (the rolling-update and source-ranges LoadBalancers tests, about 15 min each) from the start in a ginkgo run of their own beside the others, one process each, taken from --procs")
	f.StringVar(&o.Client, "client", "", "the lab host the suite runs in (default: mypc2, behind the router, in a lab up --bgp, whose address is outside the nodes' subnet as a real client's is; mypc otherwise)")
	f.BoolVar(&compare, "compare", false, "run the selection on a kube-proxy (nftables) lab and on an ironlb-proxy lab, each brought up and down here, and compare")
	return cmd
}

// runOne runs the selection on lab l, naming its report files after the lab's proxy.
func runOne(ctx context.Context, l *lab.Lab, o conformance.Options, total int) ([]conformance.Result, error) {
	o.Name, o.Out = l.Plan.Config.ProxyMode, os.Stdout
	client := o.Client
	if client == "" {
		client = conformance.DefaultClient(l.Plan)
	}
	fmt.Printf("running %d tests on lab %s (proxy %s) from %s in %d processes; output in %s\n", total, l.Plan.Config.Name, o.Name, client, max(o.Procs, 1), o.LogFile())
	t := time.Now()
	rs, err := conformance.Run(ctx, l, o, total)
	if err != nil {
		return nil, err
	}
	fmt.Printf("%d tests in %s on proxy %s; JUnit report: %s\n", len(rs), time.Since(t).Round(time.Second), o.Name, o.JUnitFile())
	if n := total - len(rs); n > 0 {
		fmt.Printf("%d of the %d selected tests did not run (the suite timed out or stopped: see %s)\n", n, total, o.LogFile())
	}
	fmt.Println()
	return rs, nil
}

// runCompare brings up a lab per proxy in turn (kube-proxy nftables, then ironlb), runs the selection
// on each and takes it down, then prints the two columns side by side.
func runCompare(ctx context.Context, cfg lab.Config, load func() (*lab.Lab, error), o conformance.Options, total int) error {
	if l, err := load(); err == nil {
		return fmt.Errorf("lab %s is up: --compare brings up its own labs (kube-proxy nftables, then ironlb); take it down first (ironlb lab down)", l.Plan.Config.Name)
	} else if !errors.Is(err, lab.ErrNoLab) {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	results := map[string][]conformance.Result{}
	modes := []string{lab.ProxyNFTables, lab.ProxyIronLB}
	for _, mode := range modes {
		c := withDefaults(cfg)
		c.ProxyMode, c.Self = mode, self
		p, err := lab.NewPlan(c)
		if err != nil {
			return err
		}
		l := lab.New(p, logf)
		fmt.Printf("bringing up lab %s with --proxy=%s\n", c.Name, mode)
		rs, err := func() ([]conformance.Result, error) {
			defer func() {
				if err := l.Down(context.WithoutCancel(ctx)); err != nil {
					logf("lab down: %v", err)
				}
			}()
			if err := l.Up(ctx, false); err != nil {
				return nil, fmt.Errorf("lab up --proxy=%s: %w", mode, err)
			}
			return runOne(ctx, l, o, total)
		}()
		if err != nil {
			return err
		}
		fmt.Print(conformance.Table(rs), "\n")
		results[mode] = rs
	}
	fmt.Print(conformance.CompareTable("kube-proxy-"+modes[0], results[modes[0]], "ironlb", results[modes[1]]))
	if _, failed, _ := conformance.Counts(results[modes[1]]); failed > 0 {
		return exitError{1}
	}
	return nil
}
