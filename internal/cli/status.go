package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/status"
)

func statusCmd() *cobra.Command {
	var (
		cfg status.Config
		kf  *kubectlFlags // kubectl's flags: --kubeconfig, --context, ...
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each external address (Service, pool, mode, announcing nodes, BGP peers), pool use and pending Services",
		Long: `Show what ironlb does with the cluster's LoadBalancer Services:
  - every external address: its Service, pool, mode (layer2, bgp, both or none, from the advertisements
    covering it), the nodes announcing it (ServiceL2Status, ServiceBGPStatus) and, for BGP, each peer's
    session state (BGPSessionState, when served);
  - every IPAddressPool: size, used and free addresses per family;
  - every LoadBalancer Service without an address, with the reason (the controller's latest Warning
    event on it, or ironlb status's own analysis when there is none).`,
		Example: `  ironlb status
  ironlb status -o wide
  ironlb status --context prod --kubeconfig ~/.kube/prod.yaml
  kubectl ironlb status -o json    # as a kubectl plugin: install the binary as kubectl-ironlb`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg.ClientConfig = kf.clientConfig()
			return status.Run(c.Context(), cfg, c.OutOrStdout())
		},
	}
	kf = addKubectlFlags(cmd)
	f := cmd.Flags()
	f.StringVarP(&cfg.Namespace, "namespace", "n", defaultNamespace(), "namespace of the configuration objects (IPAddressPools, advertisements, status objects)")
	f.StringVar(&cfg.LBClass, "lb-class", "", "the controller's --lb-class: only Services of this class (empty: only those without a class) count as ironlb's")
	f.StringVarP(&cfg.Output, "output", "o", status.OutputTable, "output format: "+strings.Join(status.Formats, ", "))
	return cmd
}

// pluginName is the name kubectl finds ironlb under when the binary (or a link to it) is installed as
// kubectl-ironlb on the PATH: `kubectl ironlb status` runs `kubectl-ironlb status`.
const pluginName = "kubectl-ironlb"

// isPlugin reports whether argv0 invokes ironlb as the kubectl plugin.
func isPlugin(argv0 string) bool {
	base := argv0[strings.LastIndexAny(argv0, `/\`)+1:]
	return strings.TrimSuffix(base, ".exe") == pluginName
}
