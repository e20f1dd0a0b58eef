// Package explain is the core of `ironlb trace`: from the cluster's objects it builds the rules
// one node's proxy would program (the proxy's own converter and rule builder, into a knftables
// Fake) and walks a packet through them with the tracer, then prints which Service port the
// destination is, which endpoints its rules choose from and why the others are left out, and the
// packet's path: map entries, chains, the endpoint choice, DNAT, masquerade, or the reason for a
// drop or reject.
//
// It does no I/O: the command lists the objects and prints the Report.
package explain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/trace"
)

// Objects are the cluster objects the rules are built from.
type Objects struct {
	Nodes    []*corev1.Node
	Services []*corev1.Service
	Slices   []*discoveryv1.EndpointSlice
	// ServiceCIDRs are the cluster's ServiceCIDR objects: the Service networks, unless
	// Options.ServiceCIDRs says otherwise.
	ServiceCIDRs []*networkingv1.ServiceCIDR
}

// Options are the proxy settings the rules depend on (the proxy's flags of the same names).
type Options struct {
	// Node is the node whose rules are traced. Empty: the node that has the source address (or
	// whose pod CIDR holds it), or the only node.
	Node          string
	NodePorts     convert.NodePorts
	ClusterCIDRs  []netip.Prefix
	ServiceCIDRs  []netip.Prefix
	MasqueradeAll bool
	// DeadNodes are treated as declared dead by the liveness detector.
	DeadNodes []string
	// LocalAddrs are extra addresses configured on the node (besides its Node addresses), e.g. for
	// --nodeport-addresses CIDRs.
	LocalAddrs []netip.Addr
	// ExternalMode is the proxy's --external-mode (zero: snat).
	ExternalMode nftrules.ExternalMode
}

// Query is the packet to trace: the first packet of a connection.
type Query struct {
	From     netip.Addr
	To       netip.AddrPort
	Protocol string // tcp (default), udp or sctp
	FromHost bool   // sent by a process on the node rather than received from the network
	// SrcPort is the source port; 0 if unknown. Direct server return hashes it: with it the
	// report follows the flow to its backend node and endpoint.
	SrcPort uint16
}

// Report is a trace with its context.
type Report struct {
	Node     string
	Family   knftables.Family
	Services int           // Services in the model
	Model    nftrules.Node // the node as the rules see it
	// Match is the Service port the destination belongs to; nil if none.
	Match *Match
	// Result is the traced path(s).
	Result *trace.Result
	// DSR is the direct-server-return path, if the destination is a DSR address of the Service
	// port and the packet comes from outside (not from a pod or the node).
	DSR *DSRPath
}

// DSRPath is a flow's way through direct server return: entry node, bucket, backend node,
// endpoint.
type DSRPath struct {
	Port    nftrules.DSRPort
	Entry   string
	SrcPort uint16 // 0: unknown, and the fields below are not set
	Bucket  uint32
	Owner   string
	OwnerIP netip.Addr
	Slot    int
	// LocalBucket and Endpoint are the owner's choice among its endpoints.
	LocalBucket uint32
	Endpoint    netip.AddrPort
	// Alternate is the owner of Bucket in the table without Owner (nftrules.DSRPort.AltBuckets,
	// TCP only): where Owner's rejoin rule sends a mid-stream segment it has no conntrack state of.
	Alternate string
}

// Match is a Service port a destination address and port belong to.
type Match struct {
	Service   *nftrules.Service
	Port      *nftrules.Port
	Via       string // "ClusterIP", "external IP", "load-balancer IP", "node port"
	Selection nftrules.Selection
	// Invalid is why the rule builder left the Service out; nil if it did not.
	Invalid error
}

// ErrNode is wrapped when the node to trace cannot be chosen.
var ErrNode = errors.New("choosing the node")

// Explain builds node's rules from objs and traces q through them.
func Explain(objs Objects, opts Options, q Query) (*Report, error) {
	if !q.From.IsValid() || !q.To.IsValid() {
		return nil, errors.New("tracing needs a source address and a destination address and port")
	}
	from, to := q.From.Unmap(), netip.AddrPortFrom(q.To.Addr().Unmap(), q.To.Port())
	if from.Is4() != to.Addr().Is4() {
		return nil, fmt.Errorf("source %s and destination %s are of different families", from, to.Addr())
	}
	proto := cmp.Or(strings.ToLower(q.Protocol), "tcp")
	node, err := chooseNode(objs.Nodes, opts.Node, from)
	if err != nil {
		return nil, err
	}
	dead := map[string]bool{}
	for _, d := range opts.DeadNodes {
		dead[d] = true
	}
	svcCIDRs := opts.ServiceCIDRs
	if len(svcCIDRs) == 0 {
		svcCIDRs, _ = convert.ServiceCIDRs(objs.ServiceCIDRs)
	}
	n := convert.Node(convert.NodeConfig{Name: node.Name, NodePorts: opts.NodePorts, ClusterCIDRs: opts.ClusterCIDRs,
		ServiceCIDRs: svcCIDRs}, node, append(nodeAddrs(node), opts.LocalAddrs...), dead)
	svcs, _ := convert.NewConverter(node.Name).Services(objs.Services, convert.GroupSlices(objs.Slices))
	m := &nftrules.Model{Node: n, Services: svcs}

	fam := knftables.IPv4Family
	if to.Addr().Is6() {
		fam = knftables.IPv6Family
	}
	b, err := nftrules.New(nftrules.Config{Family: fam, MasqueradeAll: opts.MasqueradeAll})
	if err != nil {
		return nil, err
	}
	fake := knftables.NewFake(fam, nftrules.TableName)
	tx := fake.NewTransaction()
	plan := b.Full(tx, m, nftrules.Existing{}, nil)
	if err := fake.Run(context.Background(), tx); err != nil {
		return nil, fmt.Errorf("building the ruleset: %w", err)
	}
	rs, err := trace.FromFake(fam, fake)
	if err != nil {
		return nil, err
	}
	host := trace.Host{LocalAddrs: localAddrs(node, &n, opts.LocalAddrs)}
	pkt := trace.Packet{Src: from, Dst: to.Addr(), Protocol: proto, DPort: to.Port()}
	if q.FromHost {
		pkt.Origin = trace.FromHost
		if !slices.Contains(host.LocalAddrs, from) {
			host.LocalAddrs = append(host.LocalAddrs, from)
		}
	}
	res, err := rs.Trace(pkt, host)
	if err != nil {
		return nil, err
	}
	r := &Report{Node: node.Name, Family: fam, Services: len(svcs), Model: n, Result: res}
	if !q.FromHost && to.Addr().Is4() {
		r.DSR = dsrPath(objs.Nodes, m, opts.ExternalMode, from, to, proto, q.SrcPort)
	}
	r.Match = match(m, to, proto, slices.Contains(host.LocalAddrs, to.Addr()), fam == knftables.IPv6Family, plan.Skipped)
	return r, nil
}

// chooseNode picks the node to trace.
func chooseNode(nodes []*corev1.Node, name string, from netip.Addr) (*corev1.Node, error) {
	if name != "" {
		for _, n := range nodes {
			if n.Name == name {
				return n, nil
			}
		}
		return nil, fmt.Errorf("%w: no node %q", ErrNode, name)
	}
	for _, n := range nodes {
		if slices.Contains(nodeAddrs(n), from) {
			return n, nil
		}
	}
	for _, n := range nodes {
		for _, c := range podCIDRs(n) {
			if c.Contains(from) {
				return n, nil
			}
		}
	}
	if len(nodes) == 1 {
		return nodes[0], nil
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("%w: no node has %s or a pod CIDR holding it; give --node (one of %s)", ErrNode, from, strings.Join(names, ", "))
}

func nodeAddrs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

func podCIDRs(n *corev1.Node) []netip.Prefix {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// localAddrs are the addresses the tracer treats as the node's own.
func localAddrs(node *corev1.Node, n *nftrules.Node, extra []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range slices.Concat(nodeAddrs(node), n.NodePortAddresses, extra) {
		if a.IsValid() && !a.IsUnspecified() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// match finds the Service port that to belongs to.
func match(m *nftrules.Model, to netip.AddrPort, proto string, local, v6 bool, skipped map[nftrules.ServiceKey]error) *Match {
	keys := make([]nftrules.ServiceKey, 0, len(m.Services))
	for k := range m.Services {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b nftrules.ServiceKey) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range keys {
		s := m.Services[k]
		for i := range s.Ports {
			p := &s.Ports[i]
			if string(p.Protocol) != proto {
				continue
			}
			via := ""
			switch {
			case p.Port == to.Port() && slices.Contains(s.ClusterIPs, to.Addr()):
				via = "ClusterIP"
			case p.Port == to.Port() && slices.Contains(s.ExternalIPs, to.Addr()):
				via = "external IP"
			case p.Port == to.Port() && slices.Contains(s.LoadBalancerIPs, to.Addr()):
				via = "load-balancer IP"
			case p.NodePort != 0 && p.NodePort == to.Port() && local:
				via = "node port"
			}
			if via != "" {
				return &Match{Service: s, Port: p, Via: via, Selection: nftrules.SelectEndpoints(s, p, &m.Node, v6), Invalid: skipped[k]}
			}
		}
	}
	return nil
}

// String prints the report: the node, the Service port and its endpoints, then the trace.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s (%s table %s): %d Services; node ports on %s", r.Node, r.Family, nftrules.TableName, r.Services, nodePorts(&r.Model))
	if len(r.Model.ClusterCIDRs) > 0 {
		fmt.Fprintf(&b, "; pod networks %s", joinStrings(r.Model.ClusterCIDRs))
	}
	if len(r.Model.DeadNodes) > 0 {
		dead := make([]string, 0, len(r.Model.DeadNodes))
		for d := range r.Model.DeadNodes {
			dead = append(dead, d)
		}
		slices.Sort(dead)
		fmt.Fprintf(&b, "; dead nodes %s", strings.Join(dead, ", "))
	}
	b.WriteString("\n")
	if m := r.Match; m == nil {
		b.WriteString("destination is no Service address\n")
	} else {
		r.writeMatch(&b)
	}
	if d := r.DSR; d != nil {
		d.write(&b)
	}
	b.WriteString(r.Result.String())
	return b.String()
}

var protoNumbers = map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}

// dsrPath follows a flow from outside to a DSR address: nil if to is not one, or if from is in
// the pod networks (pods take the snat path).
func dsrPath(nodes []*corev1.Node, m *nftrules.Model, def nftrules.ExternalMode, from netip.Addr, to netip.AddrPort, proto string, sport uint16) *DSRPath {
	for _, p := range m.Node.ClusterCIDRs {
		if p.Contains(from) {
			return nil
		}
	}
	ips := map[string]netip.Addr{}
	for _, n := range nodes {
		ips[n.Name], _ = convert.InternalIP(n, true)
	}
	cfg := nftrules.DSRConfig{Default: def, NodeIPs: ips}
	find := func(plan *nftrules.DSRPlan) *nftrules.DSRPort {
		for i := range plan.Ports {
			p := &plan.Ports[i]
			if string(p.Protocol) == proto && p.Port == to.Port() && slices.Contains(p.Addrs, to.Addr()) {
				return p
			}
		}
		return nil
	}
	plan := nftrules.PlanDSR(m, cfg)
	p := find(&plan)
	if p == nil {
		return nil
	}
	d := &DSRPath{Port: *p, Entry: m.Node.Name, SrcPort: sport}
	if sport == 0 {
		return d
	}
	d.Bucket = trace.DSRBucket(from, to.Addr(), sport, to.Port(), protoNumbers[proto], uint32(len(p.Buckets)), p.Seed)
	d.Owner = p.Owner(d.Bucket)
	d.OwnerIP, d.Slot = plan.NodeIPs[d.Owner], plan.Slots[d.Owner]
	// The owner's own plan: its local endpoints and their table.
	mm := *m
	mm.Node.Name = d.Owner
	op := nftrules.PlanDSR(&mm, cfg)
	if q := find(&op); q != nil && len(q.LocalBuckets) > 0 {
		d.LocalBucket = trace.DSRBucket(from, to.Addr(), sport, to.Port(), protoNumbers[proto], uint32(len(q.LocalBuckets)), q.LocalSeed())
		d.Endpoint = q.Local[q.LocalBuckets[d.LocalBucket]]
		if int(d.Bucket) < len(q.AltBuckets) && q.AltBuckets[d.Bucket] >= 0 {
			d.Alternate = q.Nodes[q.AltBuckets[d.Bucket]]
		}
	}
	return d
}

func (d *DSRPath) write(b *strings.Builder) {
	p := &d.Port
	counts := map[string]int{}
	for _, o := range p.Buckets {
		counts[p.Nodes[o]]++
	}
	var owners []string
	for i, n := range p.Nodes {
		owners = append(owners, fmt.Sprintf("%s (%d endpoints, %d buckets)", n, p.Weights[i], counts[n]))
	}
	fmt.Fprintf(b, "direct server return: the flow's backend node is bucket jhash(5-tuple) mod %d of a Maglev table over %s\n", len(p.Buckets), strings.Join(owners, ", "))
	if d.SrcPort == 0 {
		b.WriteString("  the source port picks the bucket: give --sport to follow one flow\n")
	} else {
		fmt.Fprintf(b, "  entry %s: flow from port %d is bucket %d -> backend node %s", d.Entry, d.SrcPort, d.Bucket, d.Owner)
		if d.Owner == d.Entry {
			b.WriteString(" (this node)\n")
		} else {
			fmt.Fprintf(b, ": forwarded unmodified to next hop %s (mark %#x, routing table %d), no DNAT here\n", d.OwnerIP, nftrules.DSRMark(d.Slot), nftrules.DSRTable(d.Slot))
		}
		if d.Endpoint.IsValid() {
			fmt.Fprintf(b, "  backend %s: local bucket %d -> DNAT to %s, no masquerade: the pod sees the client's address and replies from the service address straight to the client\n", d.Owner, d.LocalBucket, d.Endpoint)
		}
		if d.Alternate != "" {
			fmt.Fprintf(b, "  rejoin: a segment of this flow that is not a SYN and that %s has no conntrack entry of (a connection opened while %s was away) goes on to %s, the bucket's owner without %s\n", d.Owner, d.Owner, d.Alternate, d.Owner)
		}
	}
	b.WriteString("  (the main table's path below is the snat path that pods and the node itself take)\n")
}

func (r *Report) writeMatch(b *strings.Builder) {
	m := r.Match
	s, p := m.Service, m.Port
	name := p.Name
	if name == "" {
		name = fmt.Sprint(p.Port)
	}
	fmt.Fprintf(b, "service %s port %s (%s/%d", s.Key(), name, p.Protocol, p.Port)
	if p.NodePort != 0 {
		fmt.Fprintf(b, ", node port %d", p.NodePort)
	}
	fmt.Fprintf(b, ") via %s; algorithm %s", m.Via, s.Algorithm)
	var notes []string
	if s.ExternalTrafficPolicyLocal {
		notes = append(notes, "externalTrafficPolicy Local")
	}
	if s.InternalTrafficPolicyLocal {
		notes = append(notes, "internalTrafficPolicy Local")
	}
	if s.SessionAffinityClientIP {
		notes = append(notes, fmt.Sprintf("sessionAffinity ClientIP %s", cmp.Or(s.SessionAffinityTimeout, nftrules.DefaultAffinityTimeout)))
	}
	if len(s.LoadBalancerSourceRanges) > 0 {
		notes = append(notes, "loadBalancerSourceRanges "+joinStrings(s.LoadBalancerSourceRanges))
	}
	for _, n := range notes {
		b.WriteString("; " + n)
	}
	b.WriteString("\n")
	if m.Invalid != nil {
		fmt.Fprintf(b, "  left out of the rules: %v\n", m.Invalid)
	}
	sel := &m.Selection
	if !sel.HasEndpoints {
		b.WriteString("  no usable endpoints: traffic is rejected\n")
	}
	if sel.ClusterTerminating || sel.LocalTerminating {
		b.WriteString("  no ready endpoints in a scope: using serving, terminating ones\n")
	}
	if sel.DeadNodeFallback {
		b.WriteString("  every usable endpoint is on a dead node: using them anyway\n")
	}
	type row struct {
		ep  nftrules.Endpoint
		use string
	}
	var rows []row
	uses := map[netip.AddrPort][]string{}
	for _, e := range sel.Cluster {
		k := netip.AddrPortFrom(e.Addr, e.Port)
		uses[k] = append(uses[k], "cluster")
	}
	for _, e := range sel.Local {
		k := netip.AddrPortFrom(e.Addr, e.Port)
		uses[k] = append(uses[k], "local")
	}
	for _, e := range sel.Reachable() {
		rows = append(rows, row{e, "used (" + strings.Join(uses[netip.AddrPortFrom(e.Addr, e.Port)], ", ") + ")"})
	}
	for _, sk := range sel.Skipped {
		rows = append(rows, row{sk.Endpoint, "skipped: " + sk.Reason.String()})
	}
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ENDPOINT\tNODE\tSTATE\tUSE")
	for _, r := range rows {
		node := cmp.Or(r.ep.Node, "-")
		if r.ep.Local {
			node += " (this node)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", netip.AddrPortFrom(r.ep.Addr, r.ep.Port), node, state(r.ep), r.use)
	}
	tw.Flush()
}

func state(e nftrules.Endpoint) string {
	var s []string
	switch {
	case e.Ready:
		s = append(s, "ready")
	case e.Serving:
		s = append(s, "serving")
	default:
		s = append(s, "not ready")
	}
	if e.Terminating {
		s = append(s, "terminating")
	}
	return strings.Join(s, ", ")
}

func nodePorts(n *nftrules.Node) string {
	if len(n.NodePortAddresses) == 0 {
		return "all local addresses"
	}
	if len(n.NodePortAddresses) == 1 && n.NodePortAddresses[0].IsUnspecified() {
		return "no address"
	}
	return joinStrings(n.NodePortAddresses)
}

func joinStrings[T fmt.Stringer](items []T) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = it.String()
	}
	return strings.Join(s, ", ")
}
