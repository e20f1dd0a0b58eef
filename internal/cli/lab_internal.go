package cli

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironlb/ironlb/internal/testbed/lab"
	"github.com/ironlb/ironlb/internal/testbed/lab/agent"
)

// Internal commands, run by the lab itself; hidden from help.

// labAgentCmd is `lab agent`, the node agent lab up starts inside each node.
func labAgentCmd(load func() (*lab.Lab, error)) *cobra.Command {
	var node string
	agentCmd := &cobra.Command{
		Use: "agent", Short: "The node agent (the lab's kubelet); started by lab up inside each node", Hidden: true,
		RunE: withLab(load, func(c *cobra.Command, _ []string, l *lab.Lab) error {
			return agent.Run(c.Context(), l, node)
		}),
	}
	agentCmd.Flags().StringVar(&node, "node", "", "node name")
	return agentCmd
}

// labAPIProxyCmd is `lab apiproxy`, the root namespace's bridge to the lab's apiserver.
func labAPIProxyCmd(load func() (*lab.Lab, error)) *cobra.Command {
	apiproxy := &cobra.Command{
		Use: "apiproxy", Short: "Loopback bridge from the root namespace to the lab's apiserver", Hidden: true,
		RunE: withLab(load, func(c *cobra.Command, _ []string, l *lab.Lab) error {
			return l.ServeAPIProxy(c.Context())
		}),
	}
	return apiproxy
}

// labPodSDCmd is `lab podsd`, the pod discovery the lab's Prometheus asks.
func labPodSDCmd() *cobra.Command {
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
			log := slog.Default() // --log-level, --log-format (logFlags)
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
	return podsd
}

// labNSInitCmd is `lab nsinit`, the first process of a lab namespace.
func labNSInitCmd() *cobra.Command {
	nsinit := &cobra.Command{
		Use: "nsinit", Hidden: true, DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error { return lab.NSInit() },
	}
	return nsinit
}
