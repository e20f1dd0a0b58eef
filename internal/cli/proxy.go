package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/proxy"
	"github.com/ironlb/ironlb/internal/proxy/fileconfig"
)

func proxyCmd() *cobra.Command { return newProxyCmd(proxy.Run) }

// newProxyCmd is `ironlb proxy`, running run with the configuration its flags and --config set.
func newProxyCmd(run func(context.Context, proxy.Config) error) *cobra.Command {
	var cfg proxy.Config
	var file string
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Carry Service traffic on this node with nftables (kube-proxy's job), avoiding endpoints on dead nodes",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg.Logger = slog.Default() // --log-level, --log-format (logFlags)
			if file != "" {
				if err := applyProxyConfigFile(c.Flags(), &cfg, file, cfg.Logger); err != nil {
					return err
				}
			}
			return run(c.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "config", "", "kube-proxy's configuration file (KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1): its fields set the flags of the same meaning (docs/proxy.md); flags given on the command line win")
	f.StringVar(&cfg.BindAddress, "bind-address", "", "the node's primary address of its family, used by --nodeport-addresses=primary (kube-proxy's --bind-address; default: the node's InternalIP)")
	nodeFlag(cmd, &cfg.Node)
	kubeconfigFlag(cmd, &cfg.Kubeconfig)
	f.StringVar(&cfg.APIServer, "master", "", "apiserver address, overriding the kubeconfig's (the in-cluster address is a ClusterIP this proxy programs)")
	f.StringSliceVar(&cfg.ClusterCIDRs, "cluster-cidr", nil, "pod networks: ClusterIP traffic from outside them is masqueraded (default: this node's spec.podCIDRs)")
	f.StringSliceVar(&cfg.NodePortAddresses, "nodeport-addresses", nil, `addresses that accept NodePort traffic (kube-proxy's nodePortAddresses): "primary" (the node's first InternalIP of each family, else ExternalIP), "all" (every local address but loopback) and/or CIDRs of local addresses (default: primary, as kube-proxy's nftables mode)`)
	f.StringVar(&cfg.IPFamilies, "ip-families", "auto", "tables to program: auto (the node's InternalIP families), ipv4, ipv6 or dual")
	f.BoolVar(&cfg.MasqueradeAll, "masquerade-all", false, "masquerade all traffic to ClusterIPs")
	f.IntVar(&cfg.MasqueradeBit, "masquerade-bit", 14, "packet mark bit (0-31) that requests masquerading")
	f.StringVar(&cfg.ExternalMode, "external-mode", "snat", `how load-balancer and external-IP traffic reaches the pods unless a Service's annotation ironlb.io/external-mode says otherwise: "snat" (as kube-proxy) or "dsr" (direct server return: the client's address is kept with externalTrafficPolicy Cluster, and connections outlive their entry node)`)
	f.DurationVar(&cfg.SyncPeriod, "sync-period", time.Hour, "full resync interval (changes are applied incrementally as they come)")
	f.DurationVar(&cfg.MinSyncPeriod, "min-sync-period", 100*time.Millisecond, "least time between two syncs: changes that come faster are applied together")
	f.DurationVar(&cfg.HealthzTimeout, "healthz-timeout", time.Minute, "/healthz fails when a change has waited this long to be applied")
	f.StringVar(&cfg.HealthzAddr, "healthz-bind-address", "0.0.0.0:10256", "address of the proxy's /healthz and /livez (kube-proxy's format; empty disables)")
	metricsFlags(cmd, &cfg.MetricsAddr, "127.0.0.1:10249", &cfg.MetricsSecure)
	f.BoolVar(&cfg.ConntrackCleanup, "conntrack-cleanup", true, "delete stale UDP conntrack entries when endpoints go (over netlink)")
	f.BoolVar(&cfg.NodeLiveness, "node-liveness", true, "probe every other node with ICMP echoes and stop using the endpoints of a node that stops answering")
	f.DurationVar(&cfg.EchoInterval, "echo-interval", 10*time.Millisecond, "ICMP echo probe interval to every other node")
	f.DurationVar(&cfg.EchoBurst, "echo-burst-interval", 2*time.Millisecond, "echo probe interval while an answer is overdue")
	f.DurationVar(&cfg.EchoTimeout, "echo-timeout", 5*time.Millisecond, "how long an echo probe may wait for its answer")
	f.IntVar(&cfg.EchoMisses, "echo-misses", 6, "consecutive unanswered echo probes before a node is declared dead")
	f.StringVar(&cfg.ProcSys, "proc-sys", "/proc/sys", "where the node's sysctls are: the direct-server-return path's and --config's conntrack settings are written under it (a container that is not privileged has /proc/sys read-only: mount the host's /proc/sys/net at /host/proc/sys/net and pass /host/proc/sys, as the chart does)")
	f.BoolVar(&cfg.Cleanup, "cleanup", false, "delete ironlb's nftables tables (the direct-server-return table too) and its DSR policy rules and routes, and exit")
	return cmd
}

// applyProxyConfigFile sets cfg from a KubeProxyConfiguration file, except the settings whose flags
// were given on the command line (flags win, as with kube-proxy's --config).
func applyProxyConfigFile(f *pflag.FlagSet, cfg *proxy.Config, path string, log *slog.Logger) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	s, err := fileconfig.Parse(data)
	if err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	unset := func(names ...string) bool {
		for _, n := range names {
			if f.Changed(n) {
				return false
			}
		}
		return true
	}
	setStr := func(v *string, dst *string, flags ...string) {
		if v != nil && unset(flags...) {
			*dst = *v
		}
	}
	setStr(s.Node, &cfg.Node, "node")
	setStr(s.Kubeconfig, &cfg.Kubeconfig, "kubeconfig")
	setStr(s.BindAddress, &cfg.BindAddress, "bind-address")
	setStr(s.HealthzAddr, &cfg.HealthzAddr, "healthz-bind-address")
	setStr(s.MetricsAddr, &cfg.MetricsAddr, "metrics-bind-address", "metrics-addr")
	if unset("cluster-cidr") {
		if s.NodeCIDR {
			cfg.ClusterCIDRs = nil // the node's spec.podCIDRs
		} else if len(s.ClusterCIDRs) > 0 {
			cfg.ClusterCIDRs = s.ClusterCIDRs
		}
	}
	if s.NodePortAddresses != nil && unset("nodeport-addresses") {
		cfg.NodePortAddresses = s.NodePortAddresses
	}
	if s.MasqueradeAll != nil && unset("masquerade-all") {
		cfg.MasqueradeAll = *s.MasqueradeAll
	}
	if s.MasqueradeBit != nil && unset("masquerade-bit") {
		cfg.MasqueradeBit = *s.MasqueradeBit
	}
	if s.SyncPeriod != nil && unset("sync-period") {
		cfg.SyncPeriod = *s.SyncPeriod
	}
	if s.MinSyncPeriod != nil && unset("min-sync-period") {
		cfg.MinSyncPeriod = *s.MinSyncPeriod
	}
	cfg.Conntrack = s.Conntrack
	if len(s.Ignored) > 0 && log != nil {
		log.Info("--config: fields ignored", "file", path, "fields", s.Ignored)
	}
	return nil
}
