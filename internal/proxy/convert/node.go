package convert

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/ironlb/ironlb/internal/kube/kubenode"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// NodePorts is the parsed --nodeport-addresses: which local addresses accept node-port traffic.
// The zero value means every local address except loopback ("all", kube-proxy's iptables default);
// ParseNodePorts of nothing gives Primary, kube-proxy's nftables default.
type NodePorts struct {
	// Primary selects the node's primary addresses: its first InternalIP of each family, else its
	// first ExternalIP of that family (kube-proxy's node IPs, "primary").
	Primary bool
	// CIDRs select the local addresses inside them.
	CIDRs []netip.Prefix
}

// All reports whether every local address accepts node ports.
func (n NodePorts) All() bool {
	if n.Primary {
		return false
	}
	for _, p := range n.CIDRs {
		if p.Bits() != 0 {
			return false
		}
	}
	return true // no CIDRs, or only 0.0.0.0/0 and ::/0
}

func (n NodePorts) String() string {
	if n.All() {
		return "all local addresses"
	}
	var parts []string
	if n.Primary {
		parts = append(parts, "primary")
	}
	for _, p := range n.CIDRs {
		parts = append(parts, p.String())
	}
	return strings.Join(parts, ",")
}

// ParseNodePorts parses --nodeport-addresses values (kube-proxy's nodePortAddresses): the keywords
// "primary" (the node's primary address of each family) and "all" (every local address, as
// 0.0.0.0/0 and ::/0 do), and CIDRs; comma-separated items are split. Nothing means "primary", as
// in kube-proxy's nftables mode. "localhost" (node ports on loopback, which kube-proxy's iptables
// mode and its nftables listeners accept) is refused: these rules never see loopback traffic.
func ParseNodePorts(vals []string) (NodePorts, error) {
	var n NodePorts
	given := false
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			switch {
			case s == "":
				continue
			case s == "primary":
				n.Primary = true
			case s == "all":
				n.CIDRs = append(n.CIDRs, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"))
			case s == "localhost":
				return NodePorts{}, fmt.Errorf("node-port address %q is not supported: ironlb's rules do not take node ports on loopback", s)
			default:
				p, err := netip.ParsePrefix(s)
				if err != nil {
					return NodePorts{}, fmt.Errorf("node-port address %q is neither \"primary\", \"all\" nor a CIDR", s)
				}
				n.CIDRs = append(n.CIDRs, p.Masked())
			}
			given = true
		}
	}
	if !given {
		n.Primary = true
	}
	return n, nil
}

// ParsePrefixes parses a list of CIDRs (comma-separated items are split).
func ParsePrefixes(vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("CIDR %q: %w", s, err)
			}
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

// NodeConfig is what the proxy's flags say about the node it runs on.
type NodeConfig struct {
	Name      string
	NodePorts NodePorts
	// ClusterCIDRs are the pod networks (--cluster-cidr). Empty: the node's own spec.podCIDRs
	// (kube-proxy's NodeCIDR local-traffic detection), which is enough for the rules, since only
	// this node's pods send packets to a Service through this node.
	ClusterCIDRs []netip.Prefix
	// BindAddress, unless invalid or unspecified, is the node's primary address of its family
	// (kube-proxy's bindAddress overrides the node IP so).
	BindAddress netip.Addr
	// ServiceCIDRs are the Service networks (the cluster's ServiceCIDR objects, see ServiceCIDRs);
	// traffic to unallocated addresses in them is dropped. Empty: no such rule.
	ServiceCIDRs []netip.Prefix
}

// Node returns the dataplane's view of the node: node is its Node object (nil if unknown), local
// the addresses configured on its interfaces (used to resolve NodePorts CIDRs), deadNodes the
// nodes declared dead by the liveness detector (this node is never dead to itself).
func Node(cfg NodeConfig, node *corev1.Node, local []netip.Addr, deadNodes map[string]bool) nftrules.Node {
	n := nftrules.Node{Name: cfg.Name, ServiceCIDRs: slices.Clone(cfg.ServiceCIDRs)}
	var internal, external []netip.Addr
	if node != nil {
		n.Zone = node.Labels[corev1.LabelTopologyZone]
		for _, a := range node.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				continue
			}
			ip = ip.Unmap()
			if !slices.Contains(n.IPs, ip) {
				n.IPs = append(n.IPs, ip)
			}
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, ip)
			} else {
				external = append(external, ip)
			}
		}
	}
	n.ClusterCIDRs = slices.Clone(cfg.ClusterCIDRs)
	if len(n.ClusterCIDRs) == 0 && node != nil {
		cidrs := node.Spec.PodCIDRs
		if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
			cidrs = []string{node.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil {
				n.ClusterCIDRs = append(n.ClusterCIDRs, p.Masked())
			}
		}
	}
	if !cfg.NodePorts.All() {
		add := func(a netip.Addr) {
			if !slices.Contains(n.NodePortAddresses, a) {
				n.NodePortAddresses = append(n.NodePortAddresses, a)
			}
		}
		if cfg.NodePorts.Primary {
			// kube-proxy's node IPs (GetNodeHostIPs): InternalIPs before ExternalIPs, the first of
			// each family.
			var have4, have6 bool
			cands := append(internal, external...)
			if b := cfg.BindAddress.Unmap(); b.IsValid() && !b.IsUnspecified() {
				cands = append([]netip.Addr{b}, cands...)
			}
			for _, a := range cands {
				if a.IsLoopback() {
					continue // kube-proxy pins nothing to a loopback node IP
				}
				if a.Is4() && !have4 || a.Is6() && !have6 {
					add(a)
					have4, have6 = have4 || a.Is4(), have6 || a.Is6()
				}
			}
		}
		for _, a := range local {
			a = a.Unmap()
			if a.IsLoopback() || a.IsLinkLocalUnicast() || a.Zone() != "" {
				continue
			}
			for _, p := range cfg.NodePorts.CIDRs {
				if p.Contains(a) {
					add(a)
					break
				}
			}
		}
		slices.SortFunc(n.NodePortAddresses, netip.Addr.Compare)
		if len(n.NodePortAddresses) == 0 {
			// Nothing matched, so no address takes node ports; but an empty list means all of them
			// to nftrules. The unspecified address is never the destination of a received packet.
			n.NodePortAddresses = []netip.Addr{netip.IPv4Unspecified()}
		}
	}
	for d, dead := range deadNodes {
		if dead && d != cfg.Name {
			if n.DeadNodes == nil {
				n.DeadNodes = map[string]bool{}
			}
			n.DeadNodes[d] = true
		}
	}
	return n
}

// NodeEligible reports whether the node should receive load-balancer traffic for Services with
// externalTrafficPolicy Cluster (kube-proxy's /healthz, KEP-3836): not while it is being deleted
// or has the cluster autoscaler's ToBeDeletedByClusterAutoscaler taint.
func NodeEligible(node *corev1.Node) bool {
	if node == nil {
		return true
	}
	if node.DeletionTimestamp != nil {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == "ToBeDeletedByClusterAutoscaler" {
			return false
		}
	}
	return true
}

// InternalIP returns the node's first InternalIP of the family (v4 true: IPv4): kubenode.InternalIP,
// shared with the speaker.
func InternalIP(node *corev1.Node, v4 bool) (netip.Addr, bool) { return kubenode.InternalIP(node, v4) }

// ServiceCIDRs returns the Service networks of the cluster: the union of the spec.cidrs of its
// networking.k8s.io/v1 ServiceCIDR objects (kube-proxy's ServiceCIDRConfig), sorted, each once.
// Traffic to an address inside them that no Service holds is dropped. A CIDR that does not parse
// is left out and returned in bad (the apiserver validates them, so only a broken object has one).
func ServiceCIDRs(objs []*networkingv1.ServiceCIDR) (cidrs []netip.Prefix, bad []string) {
	for _, o := range objs {
		for _, c := range o.Spec.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				bad = append(bad, o.Name+": "+c)
				continue
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked()
			if !slices.Contains(cidrs, p) {
				cidrs = append(cidrs, p)
			}
		}
	}
	slices.SortFunc(cidrs, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return cidrs, bad
}

// AnnotationDSRMACs is the annotation on a Node in which that node's proxy publishes the Ethernet
// addresses of its interfaces that carry its InternalIPs, comma-separated, lowercase, sorted
// ("02:42:ac:12:00:03,02:42:ac:12:00:04"): the direct-server-return loop guard's peers
// (nftrules.DSRConfig.NodeMACs). Only the node's own proxy may write it (the proxy's
// ValidatingAdmissionPolicy, config/proxy); a host on the segment cannot, as it can the
// neighbour table with a gratuitous ARP.
const AnnotationDSRMACs = "ironlb.io/dsr-macs"

// NodeMACs returns the Ethernet addresses node's proxy published (AnnotationDSRMACs); none if the
// annotation is absent or empty. A value that is not a list of Ethernet (EUI-48) addresses is an
// error naming the node, and gives none.
func NodeMACs(node *corev1.Node) ([]nftrules.EtherAddr, error) {
	v := strings.TrimSpace(node.Annotations[AnnotationDSRMACs])
	if v == "" {
		return nil, nil
	}
	macs, err := ParseMACs(v)
	if err != nil {
		return nil, fmt.Errorf("node %s: annotation %s: %w", node.Name, AnnotationDSRMACs, err)
	}
	return macs, nil
}

// ParseMACs parses a comma-separated list of Ethernet addresses (as FormatMACs writes it; case and
// spaces around the commas do not matter), sorted, each once.
func ParseMACs(s string) ([]nftrules.EtherAddr, error) {
	var out []nftrules.EtherAddr
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		e, ok := parseEther(f)
		if !ok {
			return nil, fmt.Errorf("%q is not an Ethernet address (want 6 hex pairs separated by colons)", f)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b nftrules.EtherAddr) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out), nil
}

// FormatMACs is the annotation value of macs: sorted, each once, comma-separated.
func FormatMACs(macs []nftrules.EtherAddr) string {
	s := make([]string, 0, len(macs))
	for _, m := range macs {
		s = append(s, m.String())
	}
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}

// parseEther parses "aa:bb:cc:dd:ee:ff" (hex digits in either case).
func parseEther(s string) (nftrules.EtherAddr, bool) {
	var e nftrules.EtherAddr
	if len(s) != 17 {
		return e, false
	}
	for i := range 6 {
		if i > 0 && s[3*i-1] != ':' {
			return e, false
		}
		hi, ok1 := unhex(s[3*i])
		lo, ok2 := unhex(s[3*i+1])
		if !ok1 || !ok2 {
			return e, false
		}
		e[i] = hi<<4 | lo
	}
	return e, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
