package cli

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/explain"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// traceFlags are `ironlb trace`'s flags, as typed.
type traceFlags struct {
	from, to, proto, node, extMode          string
	sport                                   uint16
	fromHost, masqAll                       bool
	nodePorts, clusterCIDRs, svcCIDRs, dead []string
}

// parse turns the flags into the packet to trace and the proxy's options. Errors name the flag.
func (f *traceFlags) parse() (explain.Query, explain.Options, error) {
	var q explain.Query
	var err error
	if q.From, err = netip.ParseAddr(f.from); err != nil {
		return q, explain.Options{}, fmt.Errorf("--from: %w", err)
	}
	if q.To, err = netip.ParseAddrPort(f.to); err != nil {
		return q, explain.Options{}, fmt.Errorf("--to: %w (want IP:PORT, [IPv6]:PORT)", err)
	}
	switch q.Protocol = strings.ToLower(strings.TrimSpace(f.proto)); q.Protocol {
	case "":
		q.Protocol = "tcp"
	case "tcp", "udp", "sctp":
	default:
		return q, explain.Options{}, fmt.Errorf("--proto: %q is not tcp, udp or sctp", f.proto)
	}
	q.FromHost = f.fromHost
	q.SrcPort = f.sport
	opts := explain.Options{Node: f.node, MasqueradeAll: f.masqAll, DeadNodes: f.dead}
	if f.extMode != "" {
		if opts.ExternalMode, err = nftrules.ParseExternalMode(f.extMode); err != nil {
			return q, opts, fmt.Errorf("--external-mode: %w", err)
		}
	}
	if opts.NodePorts, err = convert.ParseNodePorts(f.nodePorts); err != nil {
		return q, opts, fmt.Errorf("--nodeport-addresses: %w", err)
	}
	if opts.ClusterCIDRs, err = convert.ParsePrefixes(f.clusterCIDRs); err != nil {
		return q, opts, fmt.Errorf("--cluster-cidr: %w", err)
	}
	if opts.ServiceCIDRs, err = convert.ParsePrefixes(f.svcCIDRs); err != nil {
		return q, opts, fmt.Errorf("--service-cidr: %w", err)
	}
	return q, opts, nil
}

func traceCmd() *cobra.Command {
	var (
		fl traceFlags
		kf *kubectlFlags // kubectl's flags: --kubeconfig, --context, ...
	)
	cmd := &cobra.Command{
		Use:   "trace --from IP --to IP:PORT [--proto tcp] [--node NODE] [--from-host]",
		Short: "Show the path a packet takes through a node's Service rules, as `ironlb proxy` builds them",
		Long: "trace reads the cluster's Services, EndpointSlices and Nodes, builds the nftables rules the proxy\n" +
			"would program on the node (in memory, nothing is changed), and walks the first packet of a\n" +
			"connection through them: the map entry matched, the Service and endpoint chains, the endpoint\n" +
			"choice (random, round-robin or Maglev bucket), the DNAT target and masquerading, or why the\n" +
			"packet is dropped or rejected. Random choices print one path per endpoint. For a direct-server-return\n" +
			"address it also shows the flow's bucket, backend node, next hop and endpoint (give --sport).",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			q, opts, err := fl.parse()
			if err != nil {
				return err
			}
			rc, err := kf.clientConfig().ClientConfig()
			if err != nil {
				return fmt.Errorf("kubernetes client config: %w", err)
			}
			rc.UserAgent, rc.QPS, rc.Burst = "ironlb-trace", 20, 40
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			objs, err := listObjects(c.Context(), cs)
			if err != nil {
				return err
			}
			r, err := explain.Explain(objs, opts, q)
			if err != nil {
				return err
			}
			fmt.Fprint(c.OutOrStdout(), r.String())
			return nil
		},
	}
	kf = addKubectlFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&fl.from, "from", "", "source address of the packet (a pod, a client, or with --from-host a node address)")
	f.StringVar(&fl.to, "to", "", "destination address and port (ClusterIP, load-balancer or external IP, or node address with a node port)")
	f.StringVar(&fl.proto, "proto", "tcp", "protocol: tcp, udp or sctp")
	f.Uint16Var(&fl.sport, "sport", 0, "source port: a direct-server-return address hashes it; with it the trace follows the flow to its backend node and endpoint")
	f.StringVar(&fl.extMode, "external-mode", "snat", "as the proxy's flag: snat or dsr (Services' ironlb.io/external-mode annotations override it)")
	f.BoolVar(&fl.fromHost, "from-host", false, "the packet is sent by a process on the node (output hook) rather than received")
	f.StringVar(&fl.node, "node", "", "node whose rules to trace (default: the node owning --from, by address or pod CIDR)")
	f.StringSliceVar(&fl.nodePorts, "nodeport-addresses", nil, "as the proxy's flag: \"primary\", \"all\" and/or CIDRs (default: primary)")
	f.StringSliceVar(&fl.clusterCIDRs, "cluster-cidr", nil, "as the proxy's flag (default: the node's spec.podCIDRs)")
	f.StringSliceVar(&fl.svcCIDRs, "service-cidr", nil, "Service networks whose unallocated addresses are dropped (default: the cluster's ServiceCIDR objects, as the proxy reads them)")
	f.BoolVar(&fl.masqAll, "masquerade-all", false, "as the proxy's flag")
	f.StringSliceVar(&fl.dead, "dead-node", nil, "treat these nodes as declared dead by the liveness detector")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// listObjects reads what the proxy's informers watch.
func listObjects(ctx context.Context, cs kubernetes.Interface) (explain.Objects, error) {
	var objs explain.Objects
	sel := metav1.ListOptions{LabelSelector: convert.InformerSelector}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return objs, fmt.Errorf("listing nodes: %w", err)
	}
	svcs, err := cs.CoreV1().Services("").List(ctx, sel)
	if err != nil {
		return objs, fmt.Errorf("listing services: %w", err)
	}
	slices, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, sel)
	if err != nil {
		return objs, fmt.Errorf("listing endpointslices: %w", err)
	}
	for i := range nodes.Items {
		objs.Nodes = append(objs.Nodes, &nodes.Items[i])
	}
	for i := range svcs.Items {
		objs.Services = append(objs.Services, &svcs.Items[i])
	}
	for i := range slices.Items {
		objs.Slices = append(objs.Slices, &slices.Items[i])
	}
	// The Service networks, as the proxy reads them; an apiserver without the API (or a user who
	// may not list them) traces without the drop of unallocated ClusterIPs.
	if cidrs, err := cs.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range cidrs.Items {
			objs.ServiceCIDRs = append(objs.ServiceCIDRs, &cidrs.Items[i])
		}
	}
	return objs, nil
}
