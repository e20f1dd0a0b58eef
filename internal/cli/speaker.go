package cli

import (
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/speaker"
)

func speakerCmd() *cobra.Command {
	var cfg speaker.Config
	cmd := &cobra.Command{
		Use:   "speaker",
		Short: "Announce the Services' external addresses from this node (layer 2: ARP/NDP; BGP to the BGPPeers selecting it)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			// The Pod owning the speaker's ConfigurationState (the downward API sets both).
			cfg.PodName, cfg.PodUID = os.Getenv("POD_NAME"), os.Getenv("POD_UID")
			cfg.Logger = slog.Default() // --log-level, --log-format (logFlags)
			return speaker.Run(c.Context(), cfg)
		},
	}
	f := cmd.Flags()
	nodeFlag(cmd, &cfg.Node)
	f.StringVar(&cfg.Namespace, "namespace", defaultNamespace(), "namespace of the configuration objects")
	f.StringVar(&cfg.LBClass, "lb-class", "", "announce only Services with this spec.loadBalancerClass (empty: only Services without a class), as MetalLB's --lb-class; give the controller the same value")
	kubeconfigFlag(cmd, &cfg.Kubeconfig)
	f.IntVar(&cfg.HeartbeatPort, "heartbeat-port", 7947, "UDP port for the heartbeats between speakers")
	f.StringVar(&cfg.HeartbeatKeySecret, "heartbeat-key-secret", speaker.DefaultHeartbeatKeySecret, "Secret (in --namespace) holding the heartbeat keys, data keys primary and secondary; the controller creates it")
	f.DurationVar(&cfg.HeartbeatWindow, "heartbeat-window", liveness.DefaultWindow, "how far a heartbeat's timestamp may be from this node's clock (the nodes' clocks must agree within it: NTP)")
	f.DurationVar(&cfg.Interval, "heartbeat-interval", 50*time.Millisecond, "heartbeat interval (speaker liveness and readiness)")
	f.IntVar(&cfg.Multiplier, "detect-multiplier", 6, "missed heartbeats before a peer's speaker is declared dead")
	f.DurationVar(&cfg.EchoInterval, "echo-interval", 8*time.Millisecond, "ICMP echo probe interval to every peer node on the announcing interface (0 disables)")
	f.DurationVar(&cfg.EchoBurst, "echo-burst-interval", 1500*time.Microsecond, "echo probe interval while an answer is overdue")
	f.DurationVar(&cfg.EchoTimeout, "echo-timeout", 4*time.Millisecond, "how long an echo probe may wait for its answer")
	f.IntVar(&cfg.EchoMisses, "echo-misses", 6, "consecutive unanswered echo probes before a peer node is declared dead")
	f.DurationVar(&cfg.HandoverGrace, "handover-grace", 300*time.Millisecond, "on SIGTERM, keep answering this long after telling peers this speaker leaves")
	f.DurationVar(&cfg.HoldDown, "hold-down", 5*time.Second, "how long a returning node must be alive before it takes addresses back")
	f.DurationVar(&cfg.Refresh, "refresh", 0, "re-announce every address this often against switch FDB and ARP/neighbor cache ageing (0 = never)")
	f.StringSliceVar(&cfg.ExcludeInterfaces, "exclude-interfaces", speaker.DefaultExcludeInterfaces,
		"regular expressions of interfaces never announced on in layer 2 (MetalLB's announcedInterfacesToExclude; empty: none); the InternalIP's interface is always announced on")
	f.IntVar(&cfg.Nice, "nice", -10, "scheduling priority (nice) to run at, ahead of ordinary work; needs CAP_SYS_NICE (0 leaves it)")
	metricsFlags(cmd, &cfg.MetricsAddr, ":7473", &cfg.MetricsSecure)
	healthFlag(cmd, &cfg.HealthAddr, ":7475")
	return cmd
}
