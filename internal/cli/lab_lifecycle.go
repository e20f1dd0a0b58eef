package cli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// labUpCmd is `lab up`. Its flags fill cfg, which the lab command's persistent flags fill too.
func labUpCmd(cfg *lab.Config) *cobra.Command {
	var nodeCIDR, nodeCIDR6, podCIDR, podCIDR6, svcCIDR, svcCIDR6, clientAddr, routerCIDR, secondCIDR string
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
			if cfg.SecondCIDR, err = netip.ParsePrefix(secondCIDR); err != nil {
				return fmt.Errorf("--second-cidr: %w", err)
			}
			if cfg.ClientAddr, err = netip.ParseAddr(clientAddr); err != nil {
				return fmt.Errorf("--client-addr: %w", err)
			}
			if cfg.IPFamily == lab.IPFamilyIPv6 && !c.Flags().Changed("registry") {
				cfg.Registry = false // its image names would carry a bracketed IPv6 address
				if !c.Flags().Changed("runtime") {
					// and without a registry nothing can be pulled: the IPv6-only lab is the one
					// that runs the host programs by default (docs/lab-runc.md)
					cfg.Runtime = lab.RuntimeHost
				}
			}
			if cfg.Chart, err = filepath.Abs(cfg.Chart); err != nil {
				return fmt.Errorf("--chart: %w", err)
			}
			if cfg.Self, err = os.Executable(); err != nil {
				return err
			}
			p, err := lab.NewPlan(*cfg)
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
			if ap := p.RegistryAddr(); ap.IsValid() {
				fmt.Printf("  make image && ironlb lab push     (registry at http://%s; nodes pull %s/ironlb/ironlb:VERSION)\n", ap, ap)
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
	f.StringVar(&nodeCIDR6, "node-cidr6", d.NodeCIDR6.String(), "the bridge's IPv6 subnet (--ip-family=dual or ipv6)")
	f.StringVar(&podCIDR, "pod-cidr", d.PodCIDR.String(), "pod CIDR (a /24 per node)")
	f.StringVar(&podCIDR6, "pod-cidr6", d.PodCIDR6.String(), "IPv6 pod CIDR (a /64 per node)")
	f.StringVar(&svcCIDR, "service-cidr", d.ServiceCIDR.String(), "service CIDR")
	f.StringVar(&svcCIDR6, "service-cidr6", d.ServiceCIDR6.String(), "IPv6 service CIDR")
	f.StringVar(&cfg.ClientName, "client", d.ClientName, "name of the outside client's namespace")
	f.StringVar(&clientAddr, "client-addr", d.ClientAddr.String(), "the outside client's address on the bridge")
	f.StringVar(&cfg.IPFamily, "ip-family", d.IPFamily, "ipv4, dual or ipv6 (IPv6 only: the bridge, nodes, pods, Services and the client; no --bgp; no registry unless --registry is given, so --runtime=host unless --runtime is given)")
	f.StringVar(&cfg.ProxyMode, "proxy", d.ProxyMode, "the Service dataplane: kube-proxy in iptables or nftables mode, or ironlb (ironlb proxy, the chart's proxy.enabled)")
	f.BoolVar(&cfg.BGP, "bgp", false, "add seed 003's router (FRR, AS 64512, peered with every node from AS 64513) and the client mypc2 behind it")
	f.BoolVar(&cfg.Prometheus, "prometheus", false, "run Prometheus (Debian's package) in the control-plane node, scraping ironlb as config/prometheus's PodMonitors say (the chart installs them, with the PrometheusRule)")
	f.BoolVar(&cfg.Registry, "registry", d.Registry, "run the OCI distribution registry on the bridge (NAME-registry, plain HTTP on port 5000), where ironlb lab push pushes")
	f.StringVar(&cfg.RegistryBin, "registry-bin", envOr("IRONLB_REGISTRY_BIN", lab.DefaultRegistryBin()), "directory with the registry binary (hack/registry-binary.sh builds it)")
	f.StringVar(&cfg.CoreDNSBin, "coredns-bin", envOr("IRONLB_COREDNS_BIN", lab.DefaultCoreDNSBin()), "directory with the coredns binary, the cluster DNS (hack/coredns-binary.sh builds it)")
	f.StringVar(&cfg.Chart, "chart", envOr("IRONLB_CHART", lab.DefaultChart), "ironlb's packaged chart (make chart writes it), or the directory holding it: pushed to the lab's registry and installed from there with helm")
	f.StringVar(&cfg.Helm, "helm", envOr("IRONLB_HELM", lab.DefaultHelm()), "the helm binary (hack/helm.sh builds it; make helm)")
	f.StringVar(&cfg.ChartSet, "chart-set", "", "more values for ironlb's chart, in helm's --set syntax (a=1,b=2)")
	f.StringVar(&routerCIDR, "router-cidr", d.RouterCIDR.String(), "the subnet between the router and mypc2 (--bgp)")
	f.BoolVar(&cfg.SecondNetwork, "second-network", false, "add a second network: bridge br1, eth1 on every node in --second-cidr and the client mypc3 on it (L2 announcement on a secondary NIC)")
	f.StringVar(&secondCIDR, "second-cidr", d.SecondCIDR.String(), "the second network's IPv4 subnet (--second-network)")
	f.StringVar(&cfg.Runtime, "runtime", lab.RuntimeRunc, "how node agents run containers: runc (the default: every image pulled from the lab's registry and run by runc; lab up builds and pushes them, ironlb's from this binary, which must be static: CGO_ENABLED=0, as make build builds it) or host (each image as the host program standing in for it, no image pulled)")
	f.Bool("keep-on-failure", false, "leave a lab that failed to come up in place for inspection")
	return up
}

// labDownCmd is `lab down`: it removes the lab recorded on disk, or sweeps by cfg's names when there is
// no record.
func labDownCmd(cfg *lab.Config, load func() (*lab.Lab, error)) *cobra.Command {
	down := &cobra.Command{
		Use:   "down",
		Short: "Remove every namespace, process, file and cgroup the lab made",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := load()
			if errors.Is(err, lab.ErrNoLab) {
				// Sweep by name anyway: a crashed `up` may have left namespaces before writing its record.
				sweep := withDefaults(*cfg)
				sweep.BGP = true           // also the router and mypc2 of a --bgp lab
				sweep.SecondNetwork = true // and mypc3 of a --second-network lab
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
	return down
}
