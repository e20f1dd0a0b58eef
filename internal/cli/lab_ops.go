package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// The commands that inspect and operate a running lab, the one load reads from disk.

// labStatusCmd is `lab status`.
func labStatusCmd(load func() (*lab.Lab, error)) *cobra.Command {
	status := &cobra.Command{
		Use: "status", Short: "Show the lab's hosts, links, processes and apiserver", Args: cobra.NoArgs,
		RunE: withLab(load, func(c *cobra.Command, _ []string, l *lab.Lab) error {
			fmt.Print(l.Status(c.Context()))
			return nil
		}),
	}
	return status
}

// labExecCmd is `lab exec`.
func labExecCmd(load func() (*lab.Lab, error)) *cobra.Command {
	execCmd := &cobra.Command{
		Use: "exec HOST -- CMD [ARGS...]", Short: "Run a command inside a lab host (a node, the client, or NAME-net)",
		Args: cobra.MinimumNArgs(2),
		RunE: withLab(load, func(c *cobra.Command, args []string, l *lab.Lab) error {
			code, err := l.Exec(c.Context(), args[0], args[1:])
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		}),
	}
	return execCmd
}

// labPromQLCmd is `lab promql`.
func labPromQLCmd(load func() (*lab.Lab, error)) *cobra.Command {
	promql := &cobra.Command{
		Use: "promql EXPR", Short: "Evaluate a PromQL query on the lab's Prometheus (lab up --prometheus); prints the result as JSON",
		Args: cobra.ExactArgs(1),
		RunE: withLab(load, func(c *cobra.Command, args []string, l *lab.Lab) error {
			data, err := l.PromQuery(c.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Println(string(data))
			return nil
		}),
	}
	return promql
}

// labStopNodeCmd is `lab stop-node`.
func labStopNodeCmd(load func() (*lab.Lab, error)) *cobra.Command {
	stopNode := &cobra.Command{
		Use: "stop-node NODE", Short: "Cut a node's power: its processes and Pods stop and its link goes down", Args: cobra.ExactArgs(1),
		RunE: withLab(load, func(c *cobra.Command, args []string, l *lab.Lab) error {
			if err := l.StopNode(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Printf("node %s stopped\n", args[0])
			return nil
		}),
	}
	return stopNode
}

// labStartNodeCmd is `lab start-node`.
func labStartNodeCmd(load func() (*lab.Lab, error)) *cobra.Command {
	startNode := &cobra.Command{
		Use: "start-node NODE", Short: "Power a node back on; its agent recreates its Pods", Args: cobra.ExactArgs(1),
		RunE: withLab(load, func(c *cobra.Command, args []string, l *lab.Lab) error {
			if err := l.StartNode(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Printf("node %s started\n", args[0])
			return nil
		}),
	}
	return startNode
}

// labLinkCmd is `lab link`.
func labLinkCmd(load func() (*lab.Lab, error)) *cobra.Command {
	link := &cobra.Command{
		Use: "link HOST up|down", Short: "Cut or restore a host's link to the bridge, leaving it running (a partition)", Args: cobra.ExactArgs(2),
		RunE: withLab(load, func(c *cobra.Command, args []string, l *lab.Lab) error {
			if args[1] != "up" && args[1] != "down" {
				return fmt.Errorf("link %s %s: want up or down", args[0], args[1])
			}
			return l.SetLink(c.Context(), args[0], args[1] == "up")
		}),
	}
	return link
}

// labKubectlCmd is `lab kubectl`.
func labKubectlCmd(load func() (*lab.Lab, error)) *cobra.Command {
	kubectl := &cobra.Command{
		Use: "kubectl [ARGS...]", Short: "Run kubectl against the lab", DisableFlagParsing: true,
		RunE: withLab(load, func(c *cobra.Command, args []string, l *lab.Lab) error {
			err := l.Kubectl(c.Context(), os.Stdin, os.Stdout, os.Stderr, args...)
			if code := exitCode(err); code != 0 {
				return exitError{code}
			}
			return nil
		}),
	}
	return kubectl
}

// labHelmCmd is `lab helm`.
func labHelmCmd(load func() (*lab.Lab, error)) *cobra.Command {
	return &cobra.Command{
		Use:                "helm [ARGS...]",
		Short:              "Run helm against the lab (from the client's namespace, which reaches the lab's registry: helm list -A, helm get values ironlb -n metallb-system)",
		DisableFlagParsing: true,
		RunE: withLab(load, func(c *cobra.Command, args []string, l *lab.Lab) error {
			out, err := l.Helm(c.Context(), args...)
			fmt.Print(out)
			if err != nil && out == "" {
				return err // helm did not run
			}
			if err != nil {
				return exitError{1} // helm said why
			}
			return nil
		}),
	}
}

// labPushCmd is `lab push`.
func labPushCmd(load func() (*lab.Lab, error)) *cobra.Command {
	var from, chart string
	var as []string
	push := &cobra.Command{
		Use:   "push [--from bin/image] [--as IMAGE]... [REF...] | --chart bin/chart",
		Short: "Push the OCI image layout `make image` wrote to the lab's registry (default ironlb/ironlb:<its version>)",
		Long: `Push the image or index of an OCI image layout (make image writes bin/image, both platforms) to the
lab's registry, as REGISTRY/REF for each REF: a path with an optional tag (ironlb/ironlb, ironlb/ironlb:dev),
tagged with the layout's version when it names none. --as IMAGE pushes it under the name the lab's
registry mirrors the upstream IMAGE by (traefik/whoami:v1.10 -> REGISTRY/traefik/whoami:v1.10,
registry.k8s.io/pause:3.10 -> REGISTRY/registry.k8s.io/pause:3.10): an image built for the lab in
place of an upstream one. The push runs over the lab's network from the client's namespace; it
prints each reference with the digest.

--chart pushes ironlb's packaged chart (make chart writes bin/chart/ironlb-VERSION.tgz) instead, with
helm push as an OCI artifact: REGISTRY/charts/ironlb:VERSION, which lab up installs from.`,
		RunE: withLab(load, func(c *cobra.Command, args []string, l *lab.Lab) error {
			if chart != "" {
				file, err := lab.FindChart(chart)
				if err != nil {
					return err
				}
				ref, m, err := l.PushChart(c.Context(), file)
				if err != nil {
					return err
				}
				fmt.Printf("pushed %s:%s (helm install ironlb %s --version %s --plain-http)\n", strings.TrimPrefix(ref, "oci://"), m.Version, ref, m.Version)
				if !c.Flags().Changed("from") && len(args) == 0 && len(as) == 0 {
					return nil
				}
			}
			for _, up := range as {
				m, err := lab.MirrorName(l.Plan.RegistryAddr().String(), up)
				if err != nil {
					return fmt.Errorf("--as: %w", err)
				}
				args = append(args, m)
			}
			refs, d, err := l.PushLayout(c.Context(), from, args)
			if err != nil {
				return err
			}
			for _, r := range refs {
				fmt.Printf("pushed %s@%s\n", r, d)
			}
			return nil
		}),
	}
	push.Flags().StringVar(&from, "from", "bin/image", "the OCI image layout to push")
	push.Flags().StringVar(&chart, "chart", "", "push this packaged chart (or the one in this directory) with helm push instead of the image")
	push.Flags().StringArrayVar(&as, "as", nil, "also push under the lab registry's mirror name of this upstream image (repeatable)")
	return push
}
