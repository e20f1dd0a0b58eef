// Package cli wires ironlb's subcommands: flags become a Config, and each role's package runs it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironlb/ironlb/internal/logging"
	"github.com/ironlb/ironlb/internal/testbed/whoami"
	"github.com/ironlb/ironlb/internal/version"
)

// exitError carries a process exit code through cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Main runs ironlb with args and returns the process exit code. Invoked as kubectl-ironlb (the name
// in os.Args[0]), it is the kubectl plugin: `kubectl ironlb status`.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(os.Args[0])
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ironlb:", err)
		return 1
	}
	return 0
}

// newRoot returns the root command for a process invoked as argv0: ironlb with every role, or, as the
// kubectl plugin, the commands that make sense under kubectl.
func newRoot(argv0 string) *cobra.Command {
	root := &cobra.Command{
		Use:           "ironlb",
		Short:         "LoadBalancer Services for bare-metal Kubernetes (MetalLB's API, kube-proxy's job, one binary)",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(), // --version
	}
	// --version prints the same line as `ironlb version`, not cobra's "ironlb version <Version>".
	root.SetVersionTemplate("{{.Version}}\n")
	var lf logFlags
	lf.add(root)
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error { return lf.install(c) }
	if isPlugin(argv0) {
		root.Use = pluginName
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ironlb"}
		root.Short = "ironlb's view of the cluster's LoadBalancer Services (kubectl plugin)"
		root.AddCommand(statusCmd(), versionCmd())
		return root
	}
	root.AddCommand(labCmd(), whoamiCmd(), controllerCmd(), speakerCmd(), probeCmd(), connprobeCmd(), versionCmd())
	root.AddCommand(proxyCmd(), traceCmd(), statusCmd(), benchCmd())
	return root
}

// versionCmd prints the version, the commit and the Go toolchain (internal/version).
func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print ironlb's version, the commit it was built from and the Go version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.Get())
		},
	}
}

// whoamiCmd is the traefik/whoami-compatible echo server the lab runs for that image.
func whoamiCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "whoami [--port N] [--name NAME] [--verbose]",
		Short:              "An HTTP echo server answering like traefik/whoami (the lab runs it for that image)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := whoami.ParseArgs(args, os.Getenv)
			if err != nil {
				return err
			}
			return whoami.Run(cmd.Context(), cfg)
		},
	}
}

// The flags the roles (controller, speaker, proxy, status) share.

// logFlags are --log-level and --log-format, which every command takes (persistent flags of the root).
type logFlags struct{ level, format string }

func (l *logFlags) add(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&l.level, "log-level", "info", "least level logged: "+strings.Join(logging.Levels, ", ")+" (MetalLB's values; debug and all also let client-go's verbose logs through)")
	pf.StringVar(&l.format, "log-format", string(logging.FormatText), "log format: text (key=value) or json (one object a line); client-go's logs (klog) are written the same way")
}

// install builds the logger the flags ask for, writing to cmd's stderr, and makes it the process's
// (slog's default, klog's and the log package's): the roles log through slog.Default().
func (l *logFlags) install(cmd *cobra.Command) error {
	logger, level, err := logging.Parse(cmd.ErrOrStderr(), l.level, l.format)
	if err != nil {
		return err
	}
	logging.Install(logger, level)
	return nil
}

// kubeconfigFlag adds --kubeconfig to cmd: $KUBECONFIG by default, else the in-cluster config.
func kubeconfigFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: in-cluster config)")
}

// metricsFlags adds --metrics-bind-address (kube-proxy's name; one name on every role) with def, the
// old --metrics-addr as a deprecated alias of it (hidden from the help, a warning when used), and
// --metrics-secure.
func metricsFlags(cmd *cobra.Command, addr *string, def string, secure *bool) {
	f := cmd.Flags()
	f.StringVar(addr, "metrics-bind-address", def, "Prometheus metrics address (empty disables)")
	f.StringVar(addr, "metrics-addr", def, "Prometheus metrics address (empty disables)")
	_ = f.MarkDeprecated("metrics-addr", "use --metrics-bind-address")
	f.BoolVar(secure, "metrics-secure", true, "serve metrics over HTTPS to clients whose bearer token may get /metrics (TokenReview and SubjectAccessReview); false serves plain HTTP to anyone: then bind --metrics-bind-address to 127.0.0.1")
}

// healthFlag adds --health-probe-bind-address (controller-runtime's name) with def: /healthz and
// /readyz over plain HTTP for the kubelet's probes, apart from the metrics port (HTTPS, tokens).
func healthFlag(cmd *cobra.Command, p *string, def string) {
	cmd.Flags().StringVar(p, "health-probe-bind-address", def, "address of /healthz (liveness) and /readyz (readiness), plain HTTP without authentication, for the kubelet's probes (empty disables)")
}

// kubectlFlags are kubectl's connection flags, as cli-runtime's ConfigFlags registers them and from
// the same client-go parts: --kubeconfig, --context, --cluster, --user, --server (-s), --token,
// --as, --as-group, --as-uid, --username, --password, --certificate-authority, --client-certificate,
// --client-key, --tls-server-name, --insecure-skip-tls-verify, --proxy-url, --disable-compression,
// --request-timeout. The configuration is loaded as kubectl loads it: --kubeconfig, else
// $KUBECONFIG, else ~/.kube/config, else the in-cluster configuration. --namespace is left out:
// status has its own (the configuration namespace, metallb-system by default, not the context's),
// trace reads every namespace.
//
// Not cli-runtime's ConfigFlags itself: its package links kustomize and kubectl's printers, 37 MB
// more in a binary every role runs, for flags client-go already registers.
type kubectlFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
}

func addKubectlFlags(cmd *cobra.Command) *kubectlFlags {
	k := &kubectlFlags{}
	f := cmd.Flags()
	f.StringVar(&k.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ContextOverrideFlags.Namespace = clientcmd.FlagInfo{}
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl's
	clientcmd.BindOverrideFlags(&k.overrides, f, names)
	return k
}

// clientConfig is the configuration the flags select, loaded when asked.
func (k *kubectlFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
}

// nodeFlag adds --node, this node's name, to cmd: $NODE_NAME by default (the downward API's
// spec.nodeName).
func nodeFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "node", os.Getenv("NODE_NAME"), "this node's name")
}

// defaultNamespace is the default of --namespace, where MetalLB's configuration objects live:
// $METALLB_NAMESPACE, else metallb-system.
func defaultNamespace() string { return envOr("METALLB_NAMESPACE", "metallb-system") }
