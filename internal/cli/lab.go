package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// labCmd is `ironlb lab`: its persistent flags and the lab they name on disk (load), and its
// subcommands, one file per group: lab_lifecycle.go (up, down), lab_ops.go (a running lab's status,
// exec, promql, kubectl, stop-node, start-node, link, push), conformance.go (the upstream e2e suite),
// lab_internal.go (what the lab runs itself), bench.go and chaos.go (the benchmarks in the lab).
func labCmd() *cobra.Command {
	cfg := lab.DefaultConfig()
	cfg.K8sBin = lab.DefaultK8sBin()
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "The seeds' kind cluster on one machine: network namespaces, a real control plane, no Docker",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&cfg.Name, "name", cfg.Name, "cluster name (nodes are NAME-control-plane, NAME-worker, NAME-worker2, ...)")
	pf.StringVar(&cfg.StateDir, "state-dir", envOr("IRONLB_LAB_DIR", cfg.StateDir), "where the lab keeps its record, certificates and logs")
	pf.StringVar(&cfg.K8sBin, "k8s-bin", envOr("IRONLB_K8S_BIN", cfg.K8sBin), "directory with etcd, kube-apiserver, ... (hack/k8s-binaries.sh builds them)")

	// load returns the lab recorded on disk (for every command but up).
	load := func() (*lab.Lab, error) {
		p, err := lab.State{Dir: cfg.StateDir}.ReadPlan()
		if err != nil {
			return nil, err
		}
		return lab.New(p, logf), nil
	}

	cmd.AddCommand(labUpCmd(&cfg), labDownCmd(&cfg, load), labStatusCmd(load), labExecCmd(load), labPromQLCmd(load),
		labStopNodeCmd(load), labStartNodeCmd(load), labKubectlCmd(load), labHelmCmd(load), labPushCmd(load), labConformanceCmd(&cfg, load),
		labAgentCmd(load), labAPIProxyCmd(load), labPodSDCmd(), labNSInitCmd(), labLinkCmd(load),
		benchFailoverCmd(load), benchSoakCmd(load), benchBGPCmd(load), benchNodeLossCmd(load), benchProxyCmd(load), benchConnectionsCmd(load), benchDSRThroughputCmd(load), chaosCmd(load))
	return cmd
}

func withDefaults(c lab.Config) lab.Config {
	d := lab.DefaultConfig()
	d.Name, d.StateDir, d.K8sBin = c.Name, c.StateDir, c.K8sBin
	// The chart and helm as `lab up` finds them (labs brought up by other commands: conformance).
	d.Chart, d.Helm = envOr("IRONLB_CHART", lab.DefaultChart), envOr("IRONLB_HELM", lab.DefaultHelm())
	if abs, err := filepath.Abs(d.Chart); err == nil {
		d.Chart = abs
	}
	return d
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee interface{ ExitCode() int }
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return 1
}

// withLab returns a RunE that loads the lab recorded on disk and runs run on it.
func withLab(load func() (*lab.Lab, error), run func(c *cobra.Command, args []string, l *lab.Lab) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		l, err := load()
		if err != nil {
			return err
		}
		return run(c, args, l)
	}
}

// benchRunE is withLab for the benchmarks, which take no arguments and run this binary inside the
// lab: it also sets *self to the binary's path before calling run.
func benchRunE(load func() (*lab.Lab, error), self *string, run func(c *cobra.Command, l *lab.Lab) error) func(*cobra.Command, []string) error {
	return withLab(load, func(c *cobra.Command, _ []string, l *lab.Lab) error {
		var err error
		if *self, err = os.Executable(); err != nil {
			return err
		}
		return run(c, l)
	})
}
