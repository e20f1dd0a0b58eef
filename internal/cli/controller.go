package cli

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/controller"
	"github.com/ironlb/ironlb/internal/liveness"
)

func controllerCmd() *cobra.Command {
	var cfg controller.Config
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "IP address management for Services of type LoadBalancer, serving MetalLB's metallb.io API",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if cfg.Identity == "" {
				cfg.Identity = os.Getenv("POD_NAME")
			}
			cfg.Logger = slog.Default() // --log-level, --log-format (logFlags)
			return controller.Run(c.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Namespace, "namespace", defaultNamespace(), "namespace of the configuration objects (IPAddressPools, ...)")
	f.StringVar(&cfg.LBClass, "lb-class", "", "serve only Services with this spec.loadBalancerClass (empty: only Services without a class), as MetalLB's --lb-class; give the speakers the same value")
	kubeconfigFlag(cmd, &cfg.Kubeconfig)
	metricsFlags(cmd, &cfg.MetricsAddr, ":7472", &cfg.MetricsSecure)
	healthFlag(cmd, &cfg.HealthAddr, ":7474")
	f.StringVar(&cfg.WebhookAddr, "webhook-addr", ":9443", "admission webhook HTTPS address (empty disables)")
	f.StringVar(&cfg.WebhookService, "webhook-service", "ironlb-webhook-service", "Service fronting the webhook (certificate names)")
	f.StringVar(&cfg.WebhookSecretNamespace, "webhook-secret-namespace", "", "namespace of the webhook certificate's Secret, out of the speakers' reach (default: --namespace)")
	f.DurationVar(&cfg.WebhookCertValidity, "webhook-cert-validity", controller.DefaultWebhookCertValidity, "lifetime of the webhook's serving certificate (renewed when a third is left; the CA lives 10 times as long)")
	f.StringVar(&cfg.HeartbeatKeySecret, "heartbeat-key-secret", liveness.KeySecret, "Secret (in --namespace) holding the speakers' heartbeat key; created with a random key when absent")
	f.StringVar(&cfg.WebhookConfig, "webhook-config", "ironlb-validating-webhook", "ValidatingWebhookConfiguration whose caBundle the controller keeps")
	f.BoolVar(&cfg.LeaderElect, "leader-elect", true, "run the allocator only on the replica holding the Lease")
	f.StringVar(&cfg.Identity, "identity", "", "leader-election identity (default: $POD_NAME or the hostname)")
	return cmd
}
