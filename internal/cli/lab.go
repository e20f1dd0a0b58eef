package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironlb/ironlb/internal/testbed/lab"
	"github.com/ironlb/ironlb/internal/testbed/lab/agent"
)

func labCmd() *cobra.Command {
	cfg := lab.DefaultConfig()
	cfg.K8sBin = lab.DefaultK8sBin()
	var nodeCIDR, nodeCIDR6, podCIDR, podCIDR6, svcCIDR, svcCIDR6, clientAddr, routerCIDR string
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

	up := &cobra.Command{
		Use:   "up",
		Short: "Bring the lab up (idempotent); it keeps running after this command returns",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var err error
			for _, f := range []struct {
				s   string
				dst *netip.Prefix
			}{{nodeCIDR, &cfg.NodeCIDR}, {nodeCIDR6, &cfg.NodeCIDR6}, {podCIDR, &cfg.PodCIDR}, {podCIDR6, &cfg.PodCIDR6}, {svcCIDR, &cfg.ServiceCIDR}, {svcCIDR6, &cfg.ServiceCIDR6}} {
				if *f.dst, err = netip.ParsePrefix(f.s); err != nil {
					return fmt.Errorf("bad CIDR: %w", err)
				}
			}
			if cfg.RouterCIDR, err = netip.ParsePrefix(routerCIDR); err != nil {
				return fmt.Errorf("--router-cidr: %w", err)
			}
			if cfg.ClientAddr, err = netip.ParseAddr(clientAddr); err != nil {
				return fmt.Errorf("--client-addr: %w", err)
			}
			if cfg.Self, err = os.Executable(); err != nil {
				return err
			}
			p, err := lab.NewPlan(cfg)
			if err != nil {
				return err
			}
			keep, _ := c.Flags().GetBool("keep-on-failure")
			l := lab.New(p, logf)
			if err := l.Up(c.Context(), keep); err != nil {
				return err
			}
			fmt.Printf("\nUse it:\n  ironlb lab kubectl get nodes -o wide      (or: export KUBECONFIG=%s)\n", l.State.Kubeconfig())
			fmt.Printf("  ironlb lab exec %s -- curl -s <ip>     (any host: %s, ...)\n", p.Client.Name, p.ControlPlane().Name)
			if p.Router.Name != "" {
				fmt.Printf("  ironlb lab exec %s -- vtysh -c 'show ip bgp'     (%s reaches service addresses through it)\n", p.Router.Name, p.Client2.Name)
			}
			if p.Config.Prometheus {
				fmt.Printf("  ironlb lab promql 'sum by (node) (ironlb_speaker_announced_addresses)'     (Prometheus at %s)\n", l.PrometheusURL())
			}
			fmt.Printf("  ironlb lab status | stop-node NODE | start-node NODE\nTake it down:\n  ironlb lab down\n")
			return nil
		},
	}
	f := up.Flags()
	d := lab.DefaultConfig()
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of worker nodes")
	f.StringVar(&nodeCIDR, "node-cidr", d.NodeCIDR.String(), "the bridge's IPv4 subnet")
	f.StringVar(&nodeCIDR6, "node-cidr6", d.NodeCIDR6.String(), "the bridge's IPv6 subnet (--ip-family=dual)")
	f.StringVar(&podCIDR, "pod-cidr", d.PodCIDR.String(), "pod CIDR (a /24 per node)")
	f.StringVar(&podCIDR6, "pod-cidr6", d.PodCIDR6.String(), "IPv6 pod CIDR (a /64 per node)")
	f.StringVar(&svcCIDR, "service-cidr", d.ServiceCIDR.String(), "service CIDR")
	f.StringVar(&svcCIDR6, "service-cidr6", d.ServiceCIDR6.String(), "IPv6 service CIDR")
	f.StringVar(&cfg.ClientName, "client", d.ClientName, "name of the outside client's namespace")
	f.StringVar(&clientAddr, "client-addr", d.ClientAddr.String(), "the outside client's address on the bridge")
	f.StringVar(&cfg.IPFamily, "ip-family", d.IPFamily, "ipv4 or dual")
	f.StringVar(&cfg.ProxyMode, "proxy", d.ProxyMode, "the Service dataplane: kube-proxy in iptables or nftables mode, or ironlb (ironlb proxy from config/proxy)")
	f.BoolVar(&cfg.BGP, "bgp", false, "add seed 003's router (FRR, AS 64512, peered with every node from AS 64513) and the client mypc2 behind it")
	f.BoolVar(&cfg.Prometheus, "prometheus", false, "run Prometheus (Debian's package) in the control-plane node, scraping ironlb as config/prometheus's PodMonitors say")
	f.StringVar(&routerCIDR, "router-cidr", d.RouterCIDR.String(), "the subnet between the router and mypc2 (--bgp)")
	f.Bool("keep-on-failure", false, "leave a lab that failed to come up in place for inspection")

	down := &cobra.Command{
		Use:   "down",
		Short: "Remove every namespace, process, file and cgroup the lab made",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := load()
			if errors.Is(err, lab.ErrNoLab) {
				// Sweep by name anyway: a crashed `up` may have left namespaces before writing its record.
				sweep := withDefaults(cfg)
				sweep.BGP = true // also the router and mypc2 of a --bgp lab
				p, perr := lab.NewPlan(sweep)
				if perr != nil {
					return perr
				}
				l = lab.New(p, logf)
				if ns, procs, _ := l.Present(); len(ns) == 0 && procs == 0 {
					fmt.Println("no lab is up")
					return nil
				}
			} else if err != nil {
				return err
			}
			t := time.Now()
			if err := l.Down(context.WithoutCancel(c.Context())); err != nil {
				return err
			}
			fmt.Printf("lab %s removed (%.1fs)\n", l.Plan.Config.Name, time.Since(t).Seconds())
			return nil
		},
	}
	status := &cobra.Command{
		Use: "status", Short: "Show the lab's hosts, links, processes and apiserver", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			fmt.Print(l.Status(c.Context()))
			return nil
		},
	}
	execCmd := &cobra.Command{
		Use: "exec HOST -- CMD [ARGS...]", Short: "Run a command inside a lab host (a node, the client, or NAME-net)",
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			code, err := l.Exec(c.Context(), args[0], args[1:])
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	promql := &cobra.Command{
		Use: "promql EXPR", Short: "Evaluate a PromQL query on the lab's Prometheus (lab up --prometheus); prints the result as JSON",
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			data, err := l.PromQuery(c.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Println(string(data))
			return nil
		},
	}
	stopNode := &cobra.Command{
		Use: "stop-node NODE", Short: "Cut a node's power: its processes and Pods stop and its link goes down", Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			if err := l.StopNode(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Printf("node %s stopped\n", args[0])
			return nil
		},
	}
	link := &cobra.Command{
		Use: "link HOST up|down", Short: "Cut or restore a host's link to the bridge, leaving it running (a partition)", Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			if args[1] != "up" && args[1] != "down" {
				return fmt.Errorf("link %s %s: want up or down", args[0], args[1])
			}
			return l.SetLink(c.Context(), args[0], args[1] == "up")
		},
	}
	startNode := &cobra.Command{
		Use: "start-node NODE", Short: "Power a node back on; its agent recreates its Pods", Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			if err := l.StartNode(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Printf("node %s started\n", args[0])
			return nil
		},
	}
	kubectl := &cobra.Command{
		Use: "kubectl [ARGS...]", Short: "Run kubectl against the lab", DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			err = l.Kubectl(c.Context(), os.Stdin, os.Stdout, os.Stderr, args...)
			if code := exitCode(err); code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	// Internal commands, run by the lab itself.
	var node string
	agentCmd := &cobra.Command{
		Use: "agent", Short: "The node agent (the lab's kubelet); started by lab up inside each node", Hidden: true,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			return agent.Run(c.Context(), l, node)
		},
	}
	agentCmd.Flags().StringVar(&node, "node", "", "node name")
	apiproxy := &cobra.Command{
		Use: "apiproxy", Short: "Loopback bridge from the root namespace to the lab's apiserver", Hidden: true,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			return l.ServeAPIProxy(c.Context())
		},
	}
	var sdKubeconfig, sdListen string
	podsd := &cobra.Command{
		Use: "podsd", Short: "Prometheus HTTP service discovery of pods (the lab's Prometheus uses it)", Hidden: true,
		RunE: func(c *cobra.Command, _ []string) error {
			rc, err := clientcmd.BuildConfigFromFlags("", sdKubeconfig)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			srv := &http.Server{Addr: sdListen, Handler: lab.PodSDHandler(cs, log), ReadHeaderTimeout: 5 * time.Second}
			go func() { <-c.Context().Done(); _ = srv.Close() }()
			if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	podsd.Flags().StringVar(&sdKubeconfig, "kubeconfig", "", "kubeconfig of the apiserver to list pods from")
	podsd.Flags().StringVar(&sdListen, "listen", "127.0.0.1:9091", "address to serve discovery on")
	nsinit := &cobra.Command{
		Use: "nsinit", Hidden: true, DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error { return lab.NSInit() },
	}
	cmd.AddCommand(up, down, status, execCmd, promql, stopNode, startNode, kubectl, agentCmd, apiproxy, podsd, nsinit, link, benchFailoverCmd(load), benchSoakCmd(load), benchBGPCmd(load), benchNodeLossCmd(load), benchProxyCmd(load), chaosCmd(load))
	return cmd
}

func withDefaults(c lab.Config) lab.Config {
	d := lab.DefaultConfig()
	d.Name, d.StateDir, d.K8sBin = c.Name, c.StateDir, c.K8sBin
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
