package cli

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/apiserver"
	"github.com/ironlb/ironlb/internal/testbed/bench/bgpfail"
	"github.com/ironlb/ironlb/internal/testbed/bench/connbench"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/bench/nodeloss"
	"github.com/ironlb/ironlb/internal/testbed/bench/proxybench"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

func benchFailoverCmd(load func() (*lab.Lab, error)) *cobra.Command {
	o := failover.Options{Log: logf}
	var restore bool
	var plotDir string
	cmd := &cobra.Command{
		Use:   "bench-failover",
		Short: "Cut the power of an address's announcer again and again and measure the outage from the client (ironlb or MetalLB speakers)",
		Args:  cobra.NoArgs,
		RunE: benchRunE(load, &o.Self, func(c *cobra.Command, l *lab.Lab) error {
			label := o.Speaker
			if o.Speaker == "metallb" {
				label = "MetalLB v0.16.1 speaker, memberlist " + o.Memberlist
				if o.CutWindow == 0 {
					o.CutWindow = map[string]time.Duration{"default": 10 * time.Second, "tuned": 2 * time.Second}[o.Memberlist]
				}
			} else if o.CutWindow == 0 {
				o.CutWindow = 2 * time.Second
			}
			logf("bench-failover: %s, %d trials, cut %s, probing every 20 ms from %s", label, o.Trials, o.Cut, l.Plan.Config.ClientName)
			recs, err := failover.RunRecords(c.Context(), l, o)
			if restore && o.Speaker != "ironlb" {
				if rerr := failover.Restore(c.Context(), o); rerr != nil && err == nil {
					err = rerr
				}
			}
			failover.Table(os.Stdout, label, failover.Trials(recs))
			if plotDir != "" && len(recs) > 0 {
				memberlist := ""
				if o.Speaker == "metallb" {
					memberlist = o.Memberlist
				}
				logWritten(failover.SavePlots(plotDir, failover.Results{Label: label, Speaker: o.Speaker, Memberlist: memberlist,
					Nodes: failover.NodeMACs(l), Records: recs}))
			}
			return afterTrials(len(recs), err)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.Trials, "trials", 20, "power cuts")
	f.StringVar(&o.Speaker, "speaker", "ironlb", "ironlb or metallb (v0.16.1, built by `make metallb`)")
	f.StringVar(&o.Memberlist, "memberlist", "default", "MetalLB's memberlist settings: default or tuned (50ms probes, 25ms timeout, suspicion x1, 10ms gossip)")
	f.StringVar(&o.Cut, "node", "myk8s-worker3", "the node to cut (the address is chosen so that it announces)")
	f.DurationVar(&o.CutWindow, "cut-window", 0, "probing after the cut before the node returns (default 2s; MetalLB default memberlist 10s)")
	f.DurationVar(&o.BackWindow, "back-window", 12*time.Second, "probing after the node's return")
	f.StringVar(&o.RawDir, "raw-dir", "", "write each trial's probe log here")
	f.BoolVar(&restore, "restore", true, "put ironlb's speaker back after a MetalLB run")
	plotFlag(cmd, &plotDir)
	return cmd
}

func benchSoakCmd(load func() (*lab.Lab, error)) *cobra.Command {
	o := failover.SoakOptions{Options: failover.Options{Log: logf}}
	cmd := &cobra.Command{
		Use:   "bench-soak",
		Short: "Run the speakers with no failure but lossy links and saturated cores, and count false alarms (ironlb or MetalLB)",
		Args:  cobra.NoArgs,
		RunE: benchRunE(load, &o.Self, func(c *cobra.Command, l *lab.Lab) error {
			r, err := failover.Soak(c.Context(), l, o)
			if o.Speaker != "ironlb" {
				if rerr := failover.Restore(c.Context(), o.Options); rerr != nil && err == nil {
					err = rerr
				}
			}
			if err != nil {
				return err
			}
			failover.SoakTable(os.Stdout, []failover.SoakResult{r})
			return nil
		}),
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 10*time.Minute, "how long")
	f.IntVar(&o.Loss, "loss", 1, "percent of packets dropped on every node link, each direction")
	f.BoolVar(&o.Load, "load", true, "saturate both cores with stress-ng")
	f.StringVar(&o.Speaker, "speaker", "ironlb", "ironlb or metallb")
	f.StringVar(&o.Memberlist, "memberlist", "default", "MetalLB's memberlist settings: default or tuned")
	f.StringVar(&o.Cut, "node", "myk8s-worker3", "the node that announces the address")
	return cmd
}

func benchBGPCmd(load func() (*lab.Lab, error)) *cobra.Command {
	o := bgpfail.Options{Log: logf}
	var restore, loadCPU bool
	var spread int
	var soak time.Duration
	cmd := &cobra.Command{
		Use:   "bench-bgp",
		Short: "BGP mode (lab up --bgp): cut a node's power again and again and time the router's withdrawal and the client's outage; or count flaps over a soak",
		Args:  cobra.NoArgs,
		RunE: benchRunE(load, &o.Self, func(c *cobra.Command, l *lab.Lab) error {
			if o.Speaker == "metallb" && o.BFD > 0 {
				return fmt.Errorf("MetalLB's native BGP mode has no BFD: use --bfd 0")
			}
			if o.Window == 0 {
				o.Window = 2 * time.Second
				if o.BFD == 0 {
					o.Window = o.HoldTime + 3*time.Second
				}
			}
			defer func() {
				if restore && o.Speaker != "ironlb" {
					if rerr := failover.Restore(context.WithoutCancel(c.Context()), failover.Options{Self: o.Self, Log: logf}); rerr != nil {
						logf("restoring ironlb's speaker: %v", rerr)
					}
				}
			}()
			if soak > 0 {
				r, err := bgpfail.Soak(c.Context(), l, o, soak, loadCPU)
				if err != nil {
					return err
				}
				bgpfail.SoakTable(os.Stdout, []bgpfail.SoakResult{r})
				return nil
			}
			if spread > 0 {
				applied, err := bgpfail.Setup(c.Context(), l, o)
				if err != nil {
					return err
				}
				mon, err := bgpfail.Watch(l, bgpfail.VIP)
				if err != nil {
					return err
				}
				err = bgpfail.Ready(c.Context(), l, o, mon, applied, 120*time.Second)
				mon.Close()
				if err != nil {
					return err
				}
				byNode, byPod, err := bgpfail.MeasureSpread(c.Context(), l, o.Self, spread)
				if err != nil {
					return err
				}
				fmt.Printf("\n%s: %d requests from %s, each on a new connection\nby receiving node (router's ECMP):\n", o.Label(), spread, lab.Client2Name)
				bgpfail.SpreadTable(os.Stdout, byNode)
				fmt.Println("by pod:")
				bgpfail.SpreadTable(os.Stdout, byPod)
				return nil
			}
			logf("bench-bgp: %s, %d trials, cut %s, %s probing every 10 ms", o.Label(), o.Trials, o.Cut, lab.Client2Name)
			trials, err := bgpfail.Run(c.Context(), l, o)
			bgpfail.Table(os.Stdout, o.Label(), trials)
			return afterTrials(len(trials), err)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.Trials, "trials", 10, "power cuts")
	f.StringVar(&o.Speaker, "speaker", "ironlb", "ironlb or metallb (v0.16.1 native BGP, built by `make metallb`)")
	f.DurationVar(&o.BFD, "bfd", 50*time.Millisecond, "BFD transmit/receive interval (multiplier 3); 0 for no BFD")
	f.DurationVar(&o.HoldTime, "hold-time", 9*time.Second, "BGP hold time (keepalive a third)")
	f.StringVar(&o.Cut, "node", "myk8s-worker3", "the node to cut (it has no pod of the workload)")
	f.DurationVar(&o.Window, "cut-window", 0, "probing after the cut before the node returns (default 2s with BFD, hold time + 3s without)")
	f.StringVar(&o.RawDir, "raw-dir", "", "write each trial's route events and probe log here")
	f.BoolVar(&restore, "restore", true, "put ironlb's speaker back after a MetalLB run")
	f.IntVar(&spread, "spread", 0, "instead of cutting nodes: send this many requests and print the spread over nodes and pods")
	f.DurationVar(&soak, "soak", 0, "instead of cutting nodes: run this long without failures and count BFD/BGP flaps")
	f.BoolVar(&loadCPU, "load", true, "with --soak: saturate both cores with stress-ng")
	return cmd
}

func benchProxyCmd(load func() (*lab.Lab, error)) *cobra.Command {
	o := proxybench.Options{Log: logf}
	var cidr, plotDir string
	cmd := &cobra.Command{
		Use:   "bench-proxy",
		Short: "kube-proxy (nftables) vs ironlb proxy in one lab (lab up --proxy=nftables): full sync time and peak RSS at 1k-30k Services, one endpoint change, wrk through a NodePort",
		Long: `Runs ironlb's proxy on one node (--ironlb-node) and kube-proxy on the others, creates Services with
two fake endpoints each, restarts each proxy on its node from an empty ruleset and times its first full
sync (start -> the last Service's ClusterIP in the node's nftables, read over netlink) and its peak RSS,
then changes one endpoint at a time (at the count closest to 10,000) and times its arrival in each
node's ruleset, then runs wrk from the client through a NodePort on each node and directly to the pod.
Everything it creates or changes is undone at the end, on failure and on Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(load, &o.Self, func(c *cobra.Command, l *lab.Lab) error {
			var err error
			if o.ServiceCIDR, err = netip.ParsePrefix(cidr); err != nil {
				return fmt.Errorf("--service-cidr: %w", err)
			}
			wrk := o.WrkDuration.String()
			if o.SkipWrk {
				wrk = "skipped"
			}
			logf("bench-proxy: kube-proxy on %s vs ironlb on %s; Services %v (%d restarts each), %d endpoint changes, wrk %s",
				o.KubeProxyNode, o.IronLBNode, o.Services, o.SyncTrials, o.Changes, wrk)
			r, err := proxybench.Run(c.Context(), l, o)
			proxybench.Table(os.Stdout, r)
			if plotDir != "" && len(r.Sync)+len(r.Changes) > 0 {
				logWritten(proxybench.SavePlots(plotDir, proxybench.Saved{Name: "proxy-lab", Where: "in the lab", Result: r}))
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.Services, "services", []int{1000, 10000, 30000}, "Service counts (2 endpoints each) for the full syncs")
	f.IntVar(&o.SyncTrials, "sync-trials", 3, "restarts of each proxy per Service count")
	f.IntVar(&o.Changes, "changes", 10, "endpoint changes at the Service count closest to 10,000 (0: none)")
	f.DurationVar(&o.WrkDuration, "wrk-duration", 10*time.Second, "each wrk run")
	f.IntVar(&o.WrkRounds, "wrk-rounds", 3, "wrk runs per target (interleaved)")
	f.BoolVar(&o.SkipWrk, "skip-wrk", false, "no wrk")
	f.BoolVar(&o.SkipSync, "skip-sync", false, "no restarts (the Services are still made for --changes)")
	f.StringVar(&o.KubeProxyNode, "kube-proxy-node", "myk8s-worker2", "the node whose kube-proxy is measured")
	f.StringVar(&o.IronLBNode, "ironlb-node", "myk8s-worker3", "the node that runs ironlb's proxy instead of kube-proxy")
	f.StringVar(&cidr, "service-cidr", "10.201.0.0/16", "added as a ServiceCIDR when the lab's service CIDR is too small for the Services")
	plotFlag(cmd, &plotDir)
	return cmd
}

func benchNodeLossCmd(load func() (*lab.Lab, error)) *cobra.Command {
	o := nodeloss.Options{Log: logf}
	cmd := &cobra.Command{
		Use:   "bench-nodeloss",
		Short: "Cut the power of a worker holding one of a Service's endpoints and count the requests lost until the dataplane stops using it (the lab's proxy: kube-proxy or ironlb)",
		Args:  cobra.NoArgs,
		RunE: benchRunE(load, &o.Self, func(c *cobra.Command, l *lab.Lab) error {
			label := "kube-proxy " + l.Plan.Config.ProxyMode
			if l.Plan.Config.ProxyMode == lab.ProxyIronLB {
				label = "ironlb proxy"
			}
			logf("bench-nodeloss: %s, %d trials, cut %s, mypc probing every 10 ms for %s", label, o.Trials, o.Cut, o.For)
			trials, err := nodeloss.Run(c.Context(), l, o)
			nodeloss.Table(os.Stdout, label, trials)
			return afterTrials(len(trials), err)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.Trials, "trials", 5, "power cuts")
	f.StringVar(&o.Cut, "node", "myk8s-worker3", "the worker to cut")
	f.DurationVar(&o.For, "for", 60*time.Second, "probing after each cut (kube-proxy needs the node controller's 40-50 s)")
	f.StringVar(&o.RawDir, "raw-dir", "", "write each trial's probe log here")
	return cmd
}

// benchCmd groups the benchmarks that need no lab.
func benchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that run without the lab",
	}
	cmd.AddCommand(benchProxyScaleCmd(), benchPlotCmd(), benchConnectionsReportCmd())
	return cmd
}

func benchProxyScaleCmd() *cobra.Command {
	o := proxybench.ScaleOptions{Log: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	}}
	var plotDir string
	cmd := &cobra.Command{
		Use:   "proxy-scale",
		Short: "kube-proxy (nftables) vs ironlb proxy without the lab: full sync time and peak RSS at 1k-30k Services, one endpoint change",
		Long: `Starts etcd and kube-apiserver on loopback (internal/testbed/apiserver), writes Services (ClusterIP, no selector)
with two-endpoint EndpointSlices directly, and runs kube-proxy (nftables mode) and ironlb proxy each in a
network namespace of its own (ironlb-pb-PID-kp, -il; deleted at the end, on failure and on Ctrl-C). Each
proxy is started from an empty ruleset, in turn, and timed until the last Service's ClusterIP is in its
service-ips map (netlink, every 20 ms); its own full-sync metric and its peak RSS (with its children)
are reported. At the count closest to 10,000 both run together and one endpoint change at a time is
timed until the new endpoint's chain is in each namespace's ruleset. Run it with nice on a shared machine.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var err error
			if o.Self, err = os.Executable(); err != nil {
				return err
			}
			o.Log("bench proxy-scale: Services %v (%d starts of each proxy), %d endpoint changes", o.Services, o.SyncTrials, o.Changes)
			r, err := proxybench.RunScale(c.Context(), o)
			proxybench.Table(os.Stdout, r)
			if plotDir != "" && len(r.Sync)+len(r.Changes) > 0 {
				logWritten(proxybench.SavePlots(plotDir, proxybench.Saved{Name: "proxy-scale", Where: "without the lab (bench proxy-scale)", Result: r}))
			}
			if left := proxybench.ScaleNetNS(); len(left) > 0 {
				o.Log("network namespaces of this benchmark still exist: %v", left)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.Services, "services", []int{1000, 10000, 30000}, "Service counts (2 endpoints each)")
	f.IntVar(&o.SyncTrials, "sync-trials", 3, "starts of each proxy per Service count")
	f.IntVar(&o.Changes, "changes", 20, "endpoint changes at the Service count closest to 10,000 (0: none)")
	f.StringVar(&o.K8sBin, "k8s-bin", apiserver.BinDir(), "Kubernetes binaries (etcd, kube-apiserver, kube-proxy; hack/k8s-binaries.sh)")
	f.StringVar(&o.Dir, "dir", "", "keep the apiserver's data and the proxies' logs here (default: a temporary directory, removed)")
	plotFlag(cmd, &plotDir)
	return cmd
}

// afterTrials wraps the error a benchmark ended with, if any, with the trials it completed.
func afterTrials(n int, err error) error {
	if err != nil {
		return fmt.Errorf("after %d trials: %w", n, err)
	}
	return nil
}

func benchConnectionsCmd(load func() (*lab.Lab, error)) *cobra.Command {
	o := connbench.Options{Log: logf}
	var restore bool
	var plotDir string
	cmd := &cobra.Command{
		Use:   "bench-connections",
		Short: "Hold long-lived TCP and UDP flows through a Service address while the node they enter by loses power, hands over, or returns, and count the flows broken and stalled (side by side: modes, speakers, external modes)",
		Long: `Holds --tcp keep-alive HTTP connections and --udp fixed-port UDP flows (each a request every --every)
from mypc (--mode l2) or mypc2 behind the router (--mode bgp, lab up --bgp) to a LoadBalancer Service whose
two whoami pods run on myk8s-worker and myk8s-worker2, and makes --event happen on the entry node (--node:
in layer 2 the address is chosen so that it announces; in BGP it is one of the router's next hops):
  power-cut  the node loses power (it returns after the trial)
  sigterm    its speaker pod is deleted gracefully (SIGTERM): a planned handover
  return     the node, cut before the flows opened, powers back on
Per trial: the flows broken (an error, end of stream, or no answer for --timeout), the longest stall of the
flows that survived, and in BGP the flows the router's ECMP sends to another node after the event than
before it (seen in the router's own packets: a packet socket on its interface towards the nodes records
the destination MAC of each flow's packets). Every combination of --mode,
--speaker and --external-mode (the Service's ironlb.io/external-mode annotation) runs in turn in this lab;
the Service dataplane is the lab's (lab up --proxy: kube-proxy or ironlb), which a running lab cannot
switch: compare proxies with one lab each.`,
		Args: cobra.NoArgs,
		RunE: benchRunE(load, &o.Self, func(c *cobra.Command, l *lab.Lab) error {
			if err := o.Check(); err != nil {
				return err
			}
			runs, err := connbench.RunAll(c.Context(), l, o)
			if restore && slices.Contains(o.Speakers, "metallb") {
				if rerr := failover.Restore(context.WithoutCancel(c.Context()), failover.Options{Self: o.Self, Log: logf}); rerr != nil {
					logf("restoring ironlb's speaker: %v", rerr)
				}
			}
			fmt.Printf("\nlab bench-connections: %d TCP + %d UDP flows, a request every %s, broken = error, end of stream or no answer for %s\n",
				o.TCP, o.UDP, o.Every, o.Timeout)
			connbench.Table(os.Stdout, runs)
			if plotDir != "" && len(runs) > 0 {
				logWritten(connbench.SavePlots(plotDir, runs))
			}
			n := 0
			for _, r := range runs {
				n += len(r.Trials)
			}
			return afterTrials(n, err)
		}),
	}
	f := cmd.Flags()
	f.IntVar(&o.Trials, "trials", 20, "trials per configuration and event")
	f.StringSliceVar(&o.Modes, "mode", []string{"l2"}, "l2 (client mypc on the nodes' segment) and/or bgp (client mypc2 behind the router; lab up --bgp)")
	f.StringSliceVar(&o.Speakers, "speaker", []string{"ironlb"}, "ironlb and/or metallb (v0.16.1, built by make metallb; its default memberlist)")
	f.StringSliceVar(&o.ExternalModes, "external-mode", []string{"snat"}, "the Service's ironlb.io/external-mode: snat and/or dsr (only ironlb's proxy reads it)")
	f.StringSliceVar(&o.Events, "event", []string{connbench.EventPowerCut}, "what happens to the entry node: "+strings.Join(connbench.Events, ", "))
	f.StringVar(&o.Cut, "node", "myk8s-worker3", "the entry node (it has no pod of the workload)")
	f.IntVar(&o.TCP, "tcp", 200, "keep-alive TCP connections")
	f.IntVar(&o.UDP, "udp", 20, "UDP request/reply flows, each from a fixed source port")
	f.DurationVar(&o.Every, "every", 50*time.Millisecond, "request interval per flow")
	f.DurationVar(&o.Settle, "settle", 2*time.Second, "flows held before the event")
	f.DurationVar(&o.Window, "window", 7*time.Second, "flows held after a power cut or SIGTERM (longer than --timeout)")
	f.DurationVar(&o.ReturnWindow, "return-window", 15*time.Second, "flows held after the node's return")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Second, "a flow without an answer for this long is broken")
	f.StringVar(&o.RawDir, "raw-dir", "", "write each trial's client report (and, BGP, the router's next hop per flow) here")
	f.BoolVar(&restore, "restore", true, "put ironlb's speaker back after a MetalLB run")
	plotFlag(cmd, &plotDir)
	return cmd
}

func benchConnectionsReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "connections-report FILE...",
		Short: "Account again the trial files that lab bench-connections --raw-dir wrote, and print their table",
		Long: `Reads the per-trial files of lab bench-connections --raw-dir (configuration, event, the router's next
hops, the client's report), accounts each trial as the benchmark does today and prints the table,
grouped by configuration and event in the order given: a measure added after a run is read from its
files instead of a new run.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, files []string) error {
			var runs []connbench.Run
			for _, name := range files {
				f, err := os.Open(name)
				if err != nil {
					return err
				}
				label, ev, t, err := connbench.ParseRaw(f)
				f.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				fmt.Printf("%s: %s\n", name, connbench.TrialLine(t))
				runs = connbench.Group(runs, label, ev, t)
			}
			connbench.Table(os.Stdout, runs)
			return nil
		},
	}
}
