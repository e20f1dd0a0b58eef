package election

import (
	"net/netip"
	"time"
)

// ExcludeLabel is the node label that keeps a node out of external load balancers. Its presence, with
// any value, excludes the node (Kubernetes' and MetalLB's rule). The code that builds Nodes sets
// Node.Excluded from it, unless configured to ignore it (MetalLB's --ignore-exclude-lb).
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// ExcludedByLabel reports whether labels carry ExcludeLabel.
func ExcludedByLabel(labels map[string]string) bool {
	_, ok := labels[ExcludeLabel]
	return ok
}

// Node is what the election knows about one node. The zero value is a node that cannot announce: its
// speaker is not alive and not ready.
type Node struct {
	// Name is the Kubernetes node name. Nodes with an empty name are ignored; a name listed more than
	// once makes every copy ineligible (DuplicateNode), so the result does not depend on slice order.
	Name string
	// Labels are the node's labels, matched against the advertisements' node selectors.
	Labels map[string]string
	// Alive says the node's speaker is alive according to ironlb's own failure detector (heartbeats on
	// the announcing interface), not according to the Kubernetes API.
	Alive bool
	// Excluded is true when the node carries ExcludeLabel and the label is honoured.
	Excluded bool
	// NetworkUnavailable is true when the node's NetworkUnavailable condition is True.
	NetworkUnavailable bool
	// Interfaces are the names of the node's interfaces that can announce (up, broadcast, ARP on, not a
	// bond or bridge port). Only advertisements that name interfaces look at them.
	Interfaces []string
	// ReadySince is when the speaker became alive and fully ready to announce (caches synced,
	// responders open), in the caller's clock. The zero value means not ready: the node is not eligible
	// (NotReady). It drives Input.HoldDown.
	ReadySince time.Time
}

// Operator is the operator of a label selector requirement, as in Kubernetes' LabelSelector.
type Operator string

// The operators of Kubernetes label selectors.
const (
	In           Operator = "In"
	NotIn        Operator = "NotIn"
	Exists       Operator = "Exists"
	DoesNotExist Operator = "DoesNotExist"
)

// Requirement is one matchExpressions entry of a label selector.
type Requirement struct {
	Key      string
	Operator Operator
	Values   []string
}

// Selector is a Kubernetes label selector in model form: every MatchLabels pair and every
// MatchExpressions requirement must hold. The zero Selector matches every node, as an empty
// metav1.LabelSelector does. Configuration validation rejects malformed selectors; here an In
// requirement without values and an unknown operator match nothing, and NotIn without values matches
// everything.
type Selector struct {
	MatchLabels      map[string]string
	MatchExpressions []Requirement
}

// Advertisement is an L2Advertisement that selects the addresses being elected (through its pools and,
// if any, its service selectors), in model form.
type Advertisement struct {
	// Name is the advertisement's name, for the caller's logs; the election does not use it.
	Name string
	// NodeSelectors limit the nodes that may announce: a node is selected when any selector matches
	// its labels. Empty means every node.
	NodeSelectors []Selector
	// Interfaces limit the interfaces to announce on. Empty means every interface of the node. A node
	// selected only by advertisements naming interfaces it does not have is not eligible
	// (NoInterface), and the next node in rank announces.
	Interfaces []string
}

// Endpoint is one endpoint of a Service, from its EndpointSlices.
type Endpoint struct {
	// Node is the endpoint's nodeName ("" when unset).
	Node string
	// Ready is the endpoint's ready condition, true when the condition is unset (nil) as the
	// EndpointSlice API defines.
	Ready bool
	// Serving is the endpoint's serving condition: true for a terminating endpoint still able to serve.
	Serving bool
}

// canServe is MetalLB's epslices.EndpointCanServe.
func (e Endpoint) canServe() bool { return e.Ready || e.Serving }

// Service is a LoadBalancer Service holding some of the addresses being elected.
type Service struct {
	// Key names the Service ("namespace/name"), for the caller's logs and Group's order.
	Key string
	// Addrs are the Service's load-balancer addresses in status order, primary family first. The
	// election is keyed on the first one, as MetalLB's is, so both families of a dual-stack Service go
	// to the same node. IPv4-mapped IPv6 addresses are unmapped and zones dropped.
	Addrs []netip.Addr
	// Local is true for externalTrafficPolicy: Local: only nodes with a local endpoint of the Service
	// may announce.
	Local bool
	// Endpoints are the Service's endpoints. A Service none of whose endpoints can serve (ready or
	// serving) does not need its addresses announced.
	Endpoints []Endpoint
}

// Input is one election: the Services that hold a set of addresses announced together, the
// advertisements that select them, and the failback policy. Build one Input per group of Group.
//
// The zero values of Current, HoldDown, Sticky and Spread give MetalLB's behaviour: the first node in
// Rank order among eligible nodes announces, and a returning node takes its addresses back at once.
type Input struct {
	// Services hold the addresses. All of their addresses are announced by the same node: normally one
	// Service, or the Services sharing an address (see Group).
	Services []Service
	// Advertisements are the L2Advertisements that select these addresses. None means the addresses
	// are not announced (NoAdvertisement).
	Advertisements []Advertisement
	// Current is the node announcing the addresses now, as last known ("" = none or unknown). It is
	// kept when Sticky and still eligible, and it is never displaced by a node in hold-down. With
	// HoldDown or Sticky, every speaker must pass the same Current (a shared record such as the
	// address's status object, not each speaker's memory), or speakers may elect different nodes; with
	// the zero policy Current does not matter.
	Current string
	// HoldDown is how long a node must have been ready (now - Node.ReadySince) before it may take
	// addresses from an eligible announcer, or be preferred in a failover over nodes that have been
	// ready longer. Zero makes every ready node settled at once (MetalLB-like, preemptive failback).
	HoldDown time.Duration
	// Sticky keeps the addresses on Current for as long as it stays eligible: a returning node never
	// takes them back, even after HoldDown. Addresses then move only when their node fails.
	Sticky bool
	// Spread asks for per-client spreading: Decision.Spread lists the nodes among which each client's
	// ARP or neighbor solicitation is answered (see Ring).
	Spread bool
}

// Decision is the outcome of one election.
type Decision struct {
	// Key is the address the election is keyed on (see Service.Addrs and Group); zero when the input has
	// no valid address.
	Key netip.Addr
	// Addrs are all the addresses announced together, sorted and without duplicates.
	Addrs []netip.Addr
	// Node is the node that announces Addrs; "" means nobody does, and Reason says why.
	Node string
	// Reason is Announced when Node is set; otherwise why no node announces: NoAddress,
	// NoAdvertisement, NoEndpoints, NoLocalEndpoint or NoEligibleNode.
	Reason Reason
	// Interfaces are the interfaces Node announces on, sorted; nil means all of its interfaces.
	Interfaces []string
	// Spread, when Input.Spread is set and Node is not "", lists the nodes sharing the addresses by
	// client, sorted: the settled eligible nodes plus Node (all eligible nodes of the best tier if none
	// is settled). Build a Ring from Key and Spread to find each client's node. Nil otherwise.
	Spread []string
	// PerNode says, for every named node other than Node, why it does not announce.
	PerNode map[string]Reason
}
