package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/adscope"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/kube/kubenode"
)

// AnnotationSpread opts a Service into layer-2 spread mode (see the speaker's package doc and
// election.Ring): every eligible node answers the clients a consistent hash gives it.
const AnnotationSpread = "ironlb.io/l2-spread"

// ModelInput is what a speaker reads, typed: the configuration namespace's IPAddressPools and
// L2Advertisements, and the cluster's Services, EndpointSlices and Nodes. Objects are read, never
// modified; their order does not matter.
type ModelInput struct {
	// LBClass is the speaker's --lb-class: it serves only Services of this class, or without one
	// when empty (Serves).
	LBClass          string
	Pools            []v1beta1.IPAddressPool
	L2Advertisements []v1beta1.L2Advertisement
	Services         []*corev1.Service
	EndpointSlices   []*discoveryv1.EndpointSlice
	Nodes            []*corev1.Node
	// Dropped are objects left out before conversion (an object that does not decode into its type),
	// carried into Model.Dropped.
	Dropped []Dropped
}

// Model is what a speaker announces from, in both modes: layer 2 elects among Model.Nodes for each
// Service's addresses with Service.L2; BGP mode (bgpconfig.Input) reads the pools and Services. It is
// built once per change of the objects (BuildModel), and everything the objects say that the model
// leaves out is in Dropped, with why.
type Model struct {
	// Pools are the valid IPAddressPools (ParsePools: the controller's parser). The invalid ones are
	// in Pools.Invalid and in Dropped.
	Pools *Pools
	// L2Advertisements are the L2Advertisements, sorted by name.
	L2Advertisements []L2Advertisement
	// Services are the Services this speaker serves that have an address in a valid pool, sorted by
	// Key.
	Services []Service
	// Nodes are all nodes, sorted by name.
	Nodes []Node
	// Dropped lists what was left out, sorted by kind, namespace, name and reason. Only the reasons
	// whose Reported is true are worth a warning.
	Dropped []Dropped
}

// Service is a LoadBalancer Service served by ironlb, with an address in a valid pool.
type Service struct {
	// Key names the Service ("namespace/name").
	Key    string
	Labels map[string]string
	// Pool is the valid pool holding Addrs[0]: the one the controller recorded
	// (AnnotationAllocatedFromPool) if it holds the address, else the one that does.
	Pool string
	// Addrs are its load-balancer addresses in status order, unmapped, all in Pool (never empty).
	Addrs []netip.Addr
	// Local is true for externalTrafficPolicy: Local.
	Local bool
	// Spread is true when the Service opts into layer-2 spread mode (AnnotationSpread "true").
	Spread bool
	// Endpoints are its endpoints from its EndpointSlices, sorted by slice name.
	Endpoints []election.Endpoint
	// L2 are the L2Advertisements covering Pool and the Service (its labels, by their
	// serviceSelectors), in election form, by name; none means the addresses are not announced in
	// layer 2. Only the nodes these select are candidates, as in MetalLB's l2AdsForService.
	L2 []election.Advertisement
}

// L2Advertisement is an L2Advertisement in model form.
type L2Advertisement struct {
	// Advertisement is its name, node selectors and interfaces, as the election reads them.
	election.Advertisement
	// Scope is the pools and Services it covers (spec.ipAddressPools, ipAddressPoolSelectors,
	// serviceSelectors), decided as BGP mode and ironlb status decide.
	adscope.Scope
	// Invalid is set when one of its selectors (pool, node or Service) does not parse: the
	// advertisement then selects nothing (fails closed) and is in Model.Dropped as InvalidSelector.
	// Leaving out only the bad selector would widen it: with no pool selector left it would cover
	// every pool.
	Invalid *SelectorError
}

// Selects reports whether the advertisement covers pool p: by name, by pool selector, or every pool
// when it names and selects none (MetalLB's rule). An Invalid advertisement selects nothing.
func (a *L2Advertisement) Selects(p *Pool) bool {
	return a.Invalid == nil && a.SelectsPool(p.Name, p.Labels)
}

// Covers reports whether the advertisement applies to an address of pool p held by a Service with
// labels svcLabels: it Selects p and, when it has serviceSelectors, one of them matches the
// Service (MetalLB's l2AdsForService). An Invalid advertisement covers nothing.
func (a *L2Advertisement) Covers(p *Pool, svcLabels map[string]string) bool {
	return a.Invalid == nil && a.Scope.Covers(p.Name, p.Labels, svcLabels)
}

// Node is a Node in model form. Liveness is not here: the speaker's detectors add it.
type Node struct {
	Name   string
	Labels map[string]string
	// Excluded: the node carries election.ExcludeLabel.
	Excluded bool
	// NetworkUnavailable: its NetworkUnavailable condition is True.
	NetworkUnavailable bool
	// InternalIP is its first IPv4 InternalIP, or on an IPv6-only node its first IPv6 one
	// (kubenode.PrimaryInternalIP): where its speaker's heartbeats and echo answers come from. Zero
	// when it has none.
	InternalIP netip.Addr
}

// Node returns the node named name, nil if there is none.
func (m *Model) Node(name string) *Node {
	i, ok := slices.BinarySearchFunc(m.Nodes, name, func(n Node, name string) int { return strings.Compare(n.Name, name) })
	if !ok {
		return nil
	}
	return &m.Nodes[i]
}

// DropReason says why an object, or part of one, is not in the Model.
type DropReason string

// Why an object, or part of one, is left out of the Model.
const (
	// Undecodable: the object does not decode into its type; it is left out.
	Undecodable DropReason = "Undecodable"
	// InvalidPool: ParsePools refuses the IPAddressPool (bad address, overlap...); its addresses are
	// served by no pool.
	InvalidPool DropReason = "InvalidPool"
	// InvalidSelector: one of an L2Advertisement's selectors (ipAddressPoolSelectors, nodeSelectors,
	// serviceSelectors) does not parse; the advertisement selects nothing (fails closed).
	InvalidSelector DropReason = "InvalidSelector"
	// NotServed: the Service is not ours (not type LoadBalancer, or another loadBalancerClass). Not
	// reported.
	NotServed DropReason = "NotServed"
	// NoAddress: the Service has no load-balancer address yet. Not reported.
	NoAddress DropReason = "NoAddress"
	// InvalidAddress: an address in the Service's status does not parse, or has a zone; it is left
	// out.
	InvalidAddress DropReason = "InvalidAddress"
	// AddressInNoPool: the Service's first address lies in no valid pool (a forged status, or its
	// pool was deleted or is invalid); the Service is left out, whatever its status says.
	AddressInNoPool DropReason = "AddressInNoPool"
	// AddressOutsidePool: a further address (dual stack) lies outside the first one's pool; that
	// address is left out, the Service kept.
	AddressOutsidePool DropReason = "AddressOutsidePool"
	// NoServiceName: the EndpointSlice has no kubernetes.io/service-name label. Not reported.
	NoServiceName DropReason = "NoServiceName"
)

// Reported says whether a drop is worth a warning: an object is wrong. NotServed, NoAddress and
// NoServiceName are the normal case of objects that are not for us, or not yet.
func (r DropReason) Reported() bool {
	switch r {
	case NotServed, NoAddress, NoServiceName:
		return false
	}
	return true
}

// Dropped is an object, or part of one, left out of the Model.
type Dropped struct {
	Kind      string // "Service", "IPAddressPool", "L2Advertisement", "EndpointSlice", ...
	Namespace string
	Name      string
	Reason    DropReason
	// Detail says what exactly ("", or e.g. "172.18.0.9 lies in no valid IPAddressPool").
	Detail string
}

func (d Dropped) String() string {
	s := fmt.Sprintf("%s %s/%s: %s", d.Kind, d.Namespace, d.Name, d.Reason)
	if d.Detail != "" {
		s += ": " + d.Detail
	}
	return s
}

// BuildModel turns the objects into the Model. It never fails: whatever it cannot use is in
// Model.Dropped with its reason.
func BuildModel(in ModelInput) *Model {
	m := &Model{Dropped: slices.Clone(in.Dropped)}
	drop := func(kind, ns, name string, r DropReason, format string, args ...any) {
		m.Dropped = append(m.Dropped, Dropped{Kind: kind, Namespace: ns, Name: name, Reason: r, Detail: fmt.Sprintf(format, args...)})
	}

	m.Pools, _ = ParsePools(in.Pools, nil) // the errors are in Pools.Invalid
	for _, p := range in.Pools {
		if err, ok := m.Pools.Invalid[p.Name]; ok {
			drop("IPAddressPool", p.Namespace, p.Name, InvalidPool, "%v", err)
		}
	}

	ads := slices.Clone(in.L2Advertisements)
	slices.SortFunc(ads, func(a, b v1beta1.L2Advertisement) int { return strings.Compare(a.Name, b.Name) })
	for i := range ads {
		a := &ads[i]
		ad := L2Advertisement{Advertisement: election.Advertisement{Name: a.Name, Interfaces: a.Spec.Interfaces}, Scope: adscope.Scope{Pools: a.Spec.IPAddressPools}}
		if e := advertisementSelectorError("L2Advertisement", &a.ObjectMeta, a.Spec.IPAddressPoolSelectors, a.Spec.NodeSelectors, a.Spec.ServiceSelectors); e != nil {
			ad.Invalid = e
			drop("L2Advertisement", a.Namespace, a.Name, InvalidSelector, "%s: %v: the advertisement selects nothing", e.Field, e.Err)
			m.L2Advertisements = append(m.L2Advertisements, ad)
			continue
		}
		for j := range a.Spec.IPAddressPoolSelectors {
			sel, _ := metav1.LabelSelectorAsSelector(&a.Spec.IPAddressPoolSelectors[j]) // parses: checked above
			ad.PoolSelectors = append(ad.PoolSelectors, sel)
		}
		for j := range a.Spec.ServiceSelectors {
			sel, _ := metav1.LabelSelectorAsSelector(&a.Spec.ServiceSelectors[j]) // parses: checked above
			ad.ServiceSelectors = append(ad.ServiceSelectors, sel)
		}
		for _, ns := range a.Spec.NodeSelectors {
			sel := election.Selector{MatchLabels: ns.MatchLabels}
			for _, r := range ns.MatchExpressions {
				sel.MatchExpressions = append(sel.MatchExpressions, election.Requirement{Key: r.Key, Operator: election.Operator(r.Operator), Values: r.Values})
			}
			ad.NodeSelectors = append(ad.NodeSelectors, sel)
		}
		m.L2Advertisements = append(m.L2Advertisements, ad)
	}

	eps := endpoints(in.EndpointSlices, drop)
	for _, svc := range in.Services {
		s, ok := service(svc, in.LBClass, m.Pools, drop)
		if !ok {
			continue
		}
		s.Endpoints = eps[s.Key]
		p := m.Pools.ByName[s.Pool]
		for i := range m.L2Advertisements {
			if a := &m.L2Advertisements[i]; a.Covers(p, s.Labels) {
				s.L2 = append(s.L2, a.Advertisement)
			}
		}
		m.Services = append(m.Services, s)
	}
	slices.SortFunc(m.Services, func(a, b Service) int { return strings.Compare(a.Key, b.Key) })

	for _, n := range in.Nodes {
		mn := Node{Name: n.Name, Labels: n.Labels, Excluded: election.ExcludedByLabel(n.Labels), NetworkUnavailable: kubenode.NetworkUnavailable(n)}
		mn.InternalIP, _ = kubenode.PrimaryInternalIP(n)
		m.Nodes = append(m.Nodes, mn)
	}
	slices.SortFunc(m.Nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })

	slices.SortStableFunc(m.Dropped, func(a, b Dropped) int {
		for _, c := range [][2]string{{a.Kind, b.Kind}, {a.Namespace, b.Namespace}, {a.Name, b.Name}, {string(a.Reason), string(b.Reason)}} {
			if r := strings.Compare(c[0], c[1]); r != 0 {
				return r
			}
		}
		return 0
	})
	return m
}

type dropFunc func(kind, ns, name string, r DropReason, format string, args ...any)

// service converts a Service this speaker serves (Ours) with an address in a valid pool: an address
// in no pool is never announced, even if someone forged the status, and a second address outside
// the first one's pool is left out.
func service(svc *corev1.Service, lbClass string, pools *Pools, drop dropFunc) (Service, bool) {
	if !Ours(svc, lbClass) {
		drop("Service", svc.Namespace, svc.Name, NotServed, "")
		return Service{}, false
	}
	var addrs []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		a, err := netip.ParseAddr(ing.IP)
		if err != nil || a.Zone() != "" {
			// A zoned address ("fd00::5%eth0") parses, and Pool.Contains may even hold it, but no
			// Service address has a zone: the apiserver refuses one, so it can only be forged.
			drop("Service", svc.Namespace, svc.Name, InvalidAddress, "status.loadBalancer.ingress ip %q is not an IP address", ing.IP)
			continue
		}
		addrs = append(addrs, a.Unmap())
	}
	if len(addrs) == 0 {
		drop("Service", svc.Namespace, svc.Name, NoAddress, "")
		return Service{}, false
	}
	pool := poolOf(svc, addrs[0], pools)
	if pool == nil {
		drop("Service", svc.Namespace, svc.Name, AddressInNoPool, "%s lies in no valid IPAddressPool: not announced", addrs[0])
		return Service{}, false
	}
	first, kept := addrs[0], addrs[:0]
	for _, a := range addrs {
		if pool.Contains(a) {
			kept = append(kept, a)
			continue
		}
		drop("Service", svc.Namespace, svc.Name, AddressOutsidePool, "%s lies outside IPAddressPool %s of %s: not announced", a, pool.Name, first)
	}
	return Service{Key: svc.Namespace + "/" + svc.Name, Labels: svc.Labels, Pool: pool.Name, Addrs: kept,
		Local:  svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		Spread: svc.Annotations[AnnotationSpread] == "true"}, true
}

// poolOf finds the valid pool holding a Service's address: the one the controller recorded, if it
// contains the address, else the one that contains it (valid pools do not overlap).
func poolOf(svc *corev1.Service, a netip.Addr, pools *Pools) *Pool {
	if p, ok := pools.ByName[svc.Annotations[AnnotationAllocatedFromPool]]; ok && p.Contains(a) {
		return p
	}
	for _, n := range pools.Names {
		if p := pools.ByName[n]; p.Contains(a) {
			return p
		}
	}
	return nil
}

// endpoints maps "namespace/service" to its endpoints, from EndpointSlices in name order.
func endpoints(slicesIn []*discoveryv1.EndpointSlice, drop dropFunc) map[string][]election.Endpoint {
	sorted := slices.Clone(slicesIn)
	slices.SortFunc(sorted, func(a, b *discoveryv1.EndpointSlice) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	out := map[string][]election.Endpoint{}
	for _, es := range sorted {
		svc := es.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			drop("EndpointSlice", es.Namespace, es.Name, NoServiceName, "")
			continue
		}
		key := es.Namespace + "/" + svc
		for _, e := range es.Endpoints {
			ep := election.Endpoint{Ready: e.Conditions.Ready == nil || *e.Conditions.Ready,
				Serving: e.Conditions.Serving != nil && *e.Conditions.Serving}
			if e.NodeName != nil {
				ep.Node = *e.NodeName
			}
			out[key] = append(out[key], ep)
		}
	}
	return out
}
