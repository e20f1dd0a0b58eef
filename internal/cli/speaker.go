package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/speaker"
)

func speakerCmd() *cobra.Command {
	var cfg speaker.Config
	cmd := &cobra.Command{
		Use:   "speaker",
		Short: "Announce the Services' external addresses from this node (layer 2: ARP/NDP)",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return speaker.Run(c.Context(), cfg) },
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Node, "node", os.Getenv("NODE_NAME"), "this node's name")
	f.StringVar(&cfg.Namespace, "namespace", envOr("METALLB_NAMESPACE", "metallb-system"), "namespace of the configuration objects")
	f.StringVar(&cfg.LBClass, "lb-class", "", "also serve Services with this spec.loadBalancerClass")
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: in-cluster config)")
	f.IntVar(&cfg.HeartbeatPort, "heartbeat-port", 7947, "UDP port for the heartbeats between speakers")
	f.DurationVar(&cfg.Interval, "heartbeat-interval", 20*time.Millisecond, "heartbeat interval")
	f.IntVar(&cfg.Multiplier, "detect-multiplier", 8, "missed heartbeats before a peer is declared dead")
	f.DurationVar(&cfg.HoldDown, "hold-down", 5*time.Second, "how long a returning node must be alive before it takes addresses back")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", ":7473", "Prometheus metrics address (empty disables)")
	return cmd
}
