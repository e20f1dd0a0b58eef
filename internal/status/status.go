// Package status is `ironlb status` (and `kubectl ironlb status`): what ironlb does with a cluster's
// LoadBalancer Services, from the objects the controller and the speakers write. For each external
// address: its Service, pool, mode (the L2Advertisements and BGPAdvertisements that cover it), the
// announcing nodes (ServiceL2Status, ServiceBGPStatus) and, for BGP, the state of each peer's session
// (frr-k8s' BGPSessionState, when the resource is served). For each IPAddressPool: size, used and free
// addresses per family. For each Service still waiting for an address: why.
//
// Build is the pure core: API objects in (Input), a Report out, decided without I/O, so it is
// table-tested. Load (load.go) is the Kubernetes edge that lists the objects; Write renders a Report as
// a table, a wide table, JSON or YAML.
//
//	Load (client-go) ──Input──▶ Build (config.ParsePools, allocator replay) ──Report──▶ Write
package status

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/adscope"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/config"
)

// ControllerComponent is the event source of ironlb's controller; its Warning events on a Service say
// why the Service has no address.
const ControllerComponent = "ironlb-controller"

// Input is everything Build looks at, as read from the API. Slices may be in any order.
type Input struct {
	Namespace string // the configuration namespace (pools, advertisements, status objects)
	LBClass   string // the controller's --lb-class: only Services of this class are served ("" = only those without one)

	Services   []corev1.Service
	Namespaces []corev1.Namespace // for pools' namespaceSelectors; nil when they could not be listed
	Pools      []v1beta1.IPAddressPool

	L2Advertisements  []v1beta1.L2Advertisement
	BGPAdvertisements []v1beta1.BGPAdvertisement
	BGPPeers          []v1beta2.BGPPeer

	L2Statuses  []v1beta1.ServiceL2Status
	BGPStatuses []v1beta1.ServiceBGPStatus
	// Sessions are the BGPSessionState objects; SessionsServed is false when the cluster does not
	// serve the resource, so that peers are shown without a state rather than as missing.
	Sessions       []Session
	SessionsServed bool

	Events []corev1.Event // events on Services; only the controller's Warnings are used
}

// Session is one BGP session of one node (a BGPSessionState's status).
type Session struct {
	Node string
	Peer string // the peer's address (or interface, for an unnumbered peer)
	VRF  string
	BGP  string // Idle, Connect, Active, OpenSent, OpenConfirm or Established
	BFD  string // "N/A" without BFD, else down, init, up or adminDown
}

// Report is the outcome of Build, sorted: addresses by address then Service, pools and pending Services
// by name.
type Report struct {
	Addresses []Address `json:"addresses"`
	Pools     []Pool    `json:"pools"`
	Pending   []Pending `json:"pending"`
}

// Mode says how an address is announced, from the advertisements that cover its pool and Service.
type Mode string

const (
	ModeLayer2 Mode = "layer2"
	ModeBGP    Mode = "bgp"
	ModeBoth   Mode = "both"
	ModeNone   Mode = "none" // no advertisement covers it: the address is assigned but unreachable
)

// Address is one external address of one Service (a shared address appears once per Service).
type Address struct {
	IP       netip.Addr `json:"ip"`
	Service  string     `json:"service"`        // namespace/name
	Pool     string     `json:"pool,omitempty"` // "" when the address lies in no valid pool
	Mode     Mode       `json:"mode"`
	L2Nodes  []L2Node   `json:"layer2Nodes,omitempty"`
	BGPNodes []BGPNode  `json:"bgpNodes,omitempty"`
}

// L2Node is a node answering ARP/NDP for the address (a ServiceL2Status).
type L2Node struct {
	Node       string   `json:"node"`
	Interfaces []string `json:"interfaces,omitempty"`
}

// BGPNode is a node announcing the address over BGP (a ServiceBGPStatus), with its peers.
type BGPNode struct {
	Node  string `json:"node"`
	Peers []Peer `json:"peers,omitempty"`
}

// Peer is a BGPPeer a node announces to, and its session state when known.
type Peer struct {
	Name    string `json:"name"`
	Address string `json:"address,omitempty"` // spec.peerAddress (or spec.interface); "" for an unknown BGPPeer
	// BGP and BFD are the session's states from its BGPSessionState; empty when the resource is not
	// served, "Unknown" when it is but this node has no object for the peer.
	BGP string `json:"bgpState,omitempty"`
	BFD string `json:"bfdState,omitempty"`
}

// StateUnknown is a peer's state when BGPSessionStates are served but none matches the session.
const StateUnknown = "Unknown"

// Pool is an IPAddressPool's use.
type Pool struct {
	Name       string   `json:"name"`
	Addresses  []string `json:"addresses"` // spec.addresses as written
	AutoAssign bool     `json:"autoAssign"`
	// Invalid says why the controller ignores the pool (it gives out none of its addresses); "" when
	// the pool is valid.
	Invalid string `json:"invalid,omitempty"`
	IPv4    *Usage `json:"ipv4,omitempty"` // nil when the pool has no address of the family (or is invalid)
	IPv6    *Usage `json:"ipv6,omitempty"`
}

// Usage counts a pool's addresses of one family. Size excludes .0 and .255 when the pool avoids buggy
// IPs; Used counts addresses held by Services (a shared address once); Free is Size - Used.
type Usage struct {
	Size Count `json:"size"`
	Used Count `json:"used"`
	Free Count `json:"free"`
}

// Pending is a LoadBalancer Service without an external address, and why.
type Pending struct {
	Service string `json:"service"` // namespace/name
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Source is SourceEvent when Reason and Message come from the controller's latest Warning event
	// on the Service, SourceComputed when no such event exists and Build worked the reason out itself.
	Source string     `json:"source"`
	Since  *time.Time `json:"since,omitempty"` // when the event was last seen (events only)
}

// Pending.Source values.
const (
	SourceEvent    = "event"
	SourceComputed = "computed"
)

// Reasons Build gives a pending Service when the controller left no Warning event on it. The
// allocator's reasons (allocator.ErrPoolExhausted, ...) are used as they are.
const (
	// ReasonOtherClass: the Service's spec.loadBalancerClass (or its lack of one) is another
	// implementation's (config.Serves).
	ReasonOtherClass = "OtherLoadBalancerClass"
	// ReasonInvalidService: the Service's own fields contradict each other (config.ErrBadService).
	ReasonInvalidService = "InvalidService"
	// ReasonNoPool: there is no valid IPAddressPool at all.
	ReasonNoPool = "NoPool"
	// ReasonNotAssigned: an address is free for the Service but the controller has not given it: it is
	// not running, not leading, or has not caught up.
	ReasonNotAssigned = "NotAssignedYet"
)

// Build turns the objects into a Report. It never fails: objects it cannot use (an invalid pool, a
// status object naming an unknown Service) are reported or skipped.
func Build(in Input) Report {
	nsLabels := map[string]map[string]string{}
	for _, ns := range in.Namespaces {
		nsLabels[ns.Name] = ns.Labels
	}
	pools, _ := config.ParsePools(in.Pools, nsLabels) // invalid pools are in pools.Invalid
	poolLabels := map[string]map[string]string{}
	for _, p := range in.Pools {
		poolLabels[p.Name] = p.Labels
	}

	var ours, pending []*corev1.Service
	held := map[netip.Addr]bool{} // every address a Service of ours holds
	for i := range in.Services {
		s := &in.Services[i]
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		ips := config.IngressAddrs(s)
		if len(ips) == 0 {
			pending = append(pending, s)
		}
		if !config.Ours(s, in.LBClass) {
			continue
		}
		ours = append(ours, s)
		for _, ip := range ips {
			held[ip] = true
		}
	}
	slices.SortFunc(ours, byCreation)
	slices.SortFunc(pending, byCreation)

	ads := newAdvertisements(in)
	var r Report
	for _, s := range ours {
		for _, ip := range config.IngressAddrs(s) {
			a := Address{IP: ip, Service: key(s), Mode: ModeNone}
			if p := poolOf(pools, ip); p != "" {
				a.Pool = p
				a.Mode = ads.mode(p, poolLabels[p], s.Labels)
			}
			a.L2Nodes = ads.l2Nodes[key(s)]
			a.BGPNodes = ads.bgpNodes[key(s)]
			r.Addresses = append(r.Addresses, a)
		}
	}
	slices.SortFunc(r.Addresses, func(x, y Address) int {
		return cmp.Or(x.IP.Compare(y.IP), strings.Compare(x.Service, y.Service))
	})
	r.Pools = poolUsage(in.Pools, pools, held)
	r.Pending = pendingReasons(in, pools, ours, pending)
	return r
}

func key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

func byCreation(x, y *corev1.Service) int {
	if !x.CreationTimestamp.Equal(&y.CreationTimestamp) {
		if x.CreationTimestamp.Before(&y.CreationTimestamp) {
			return -1
		}
		return 1
	}
	return strings.Compare(key(x), key(y))
}

// poolOf returns the valid pool whose ranges hold ip ("" for none). Valid pools never overlap.
func poolOf(pools *config.Pools, ip netip.Addr) string {
	for _, n := range pools.Names {
		for _, rg := range pools.ByName[n].Ranges {
			if rg.Contains(ip) {
				return n
			}
		}
	}
	return ""
}

// advertisements indexes the advertisements and the status objects.
type advertisements struct {
	l2, bgp  []advert
	l2Nodes  map[string][]L2Node  // Service key -> nodes, sorted
	bgpNodes map[string][]BGPNode // Service key -> nodes, sorted
}

// advert is the part of an L2Advertisement or BGPAdvertisement that says what it covers: the
// speakers' own rule (adscope.Scope), so that MODE is what the speakers do.
type advert struct {
	scope     adscope.Scope
	malformed bool // a selector does not parse: the advertisement selects nothing, as in the speakers
}

func newAdvert(pools []string, poolSels, svcSels []metav1.LabelSelector) advert {
	a := advert{scope: adscope.Scope{Pools: pools}}
	conv := func(ls []metav1.LabelSelector) []labels.Selector {
		var out []labels.Selector
		for i := range ls {
			sel, err := metav1.LabelSelectorAsSelector(&ls[i])
			if err != nil {
				a.malformed = true
				continue
			}
			out = append(out, sel)
		}
		return out
	}
	a.scope.PoolSelectors, a.scope.ServiceSelectors = conv(poolSels), conv(svcSels)
	return a
}

// covers reports whether the advertisement applies to an address of pool (with poolLabels) held by a
// Service with svcLabels (adscope.Scope.Covers); a malformed advertisement covers nothing.
func (a advert) covers(pool string, poolLabels, svcLabels map[string]string) bool {
	return !a.malformed && a.scope.Covers(pool, poolLabels, svcLabels)
}

func newAdvertisements(in Input) *advertisements {
	ads := &advertisements{l2Nodes: map[string][]L2Node{}, bgpNodes: map[string][]BGPNode{}}
	for _, a := range in.L2Advertisements {
		ads.l2 = append(ads.l2, newAdvert(a.Spec.IPAddressPools, a.Spec.IPAddressPoolSelectors, a.Spec.ServiceSelectors))
	}
	for _, a := range in.BGPAdvertisements {
		ads.bgp = append(ads.bgp, newAdvert(a.Spec.IPAddressPools, a.Spec.IPAddressPoolSelectors, a.Spec.ServiceSelectors))
	}
	for _, st := range in.L2Statuses {
		k := st.Status.ServiceNamespace + "/" + st.Status.ServiceName
		n := L2Node{Node: st.Status.Node}
		for _, i := range st.Status.Interfaces {
			n.Interfaces = append(n.Interfaces, i.Name)
		}
		ads.l2Nodes[k] = append(ads.l2Nodes[k], n)
	}
	for k := range ads.l2Nodes {
		slices.SortFunc(ads.l2Nodes[k], func(x, y L2Node) int { return strings.Compare(x.Node, y.Node) })
	}

	peers := map[string]v1beta2.BGPPeer{}
	for _, p := range in.BGPPeers {
		peers[p.Name] = p
	}
	type sessKey struct{ node, peer, vrf string }
	sessions := map[sessKey]Session{}
	for _, s := range in.Sessions {
		sessions[sessKey{s.Node, normAddr(s.Peer), s.VRF}] = s
	}
	for _, st := range in.BGPStatuses {
		k := st.Status.ServiceNamespace + "/" + st.Status.ServiceName
		n := BGPNode{Node: st.Status.Node}
		for _, name := range st.Status.Peers {
			p := Peer{Name: name}
			if bp, ok := peers[name]; ok {
				p.Address = cmp.Or(bp.Spec.Address, bp.Spec.Interface)
				if in.SessionsServed {
					p.BGP, p.BFD = StateUnknown, StateUnknown
					if s, ok := sessions[sessKey{n.Node, normAddr(p.Address), bp.Spec.VRFName}]; ok {
						p.BGP, p.BFD = cmp.Or(s.BGP, StateUnknown), cmp.Or(s.BFD, StateUnknown)
					}
				}
			} else if in.SessionsServed {
				p.BGP, p.BFD = StateUnknown, StateUnknown
			}
			n.Peers = append(n.Peers, p)
		}
		slices.SortFunc(n.Peers, func(x, y Peer) int { return strings.Compare(x.Name, y.Name) })
		ads.bgpNodes[k] = append(ads.bgpNodes[k], n)
	}
	for k := range ads.bgpNodes {
		slices.SortFunc(ads.bgpNodes[k], func(x, y BGPNode) int { return strings.Compare(x.Node, y.Node) })
	}
	return ads
}

// normAddr puts an address in canonical form so that "2001:DB8::1" and "2001:db8::1" match; other
// strings (interface names) are kept.
func normAddr(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().String()
	}
	return s
}

func (ads *advertisements) mode(pool string, poolLabels, svcLabels map[string]string) Mode {
	l2 := slices.ContainsFunc(ads.l2, func(a advert) bool { return a.covers(pool, poolLabels, svcLabels) })
	bgp := slices.ContainsFunc(ads.bgp, func(a advert) bool { return a.covers(pool, poolLabels, svcLabels) })
	switch {
	case l2 && bgp:
		return ModeBoth
	case l2:
		return ModeLayer2
	case bgp:
		return ModeBGP
	}
	return ModeNone
}

// poolUsage counts every pool's addresses, invalid pools included (with why they are ignored).
func poolUsage(crs []v1beta1.IPAddressPool, pools *config.Pools, held map[netip.Addr]bool) []Pool {
	var out []Pool
	for _, cr := range crs {
		p := Pool{Name: cr.Name, Addresses: cr.Spec.Addresses, AutoAssign: cr.Spec.AutoAssign == nil || *cr.Spec.AutoAssign}
		if p.Addresses == nil {
			p.Addresses = []string{}
		}
		cp, ok := pools.ByName[cr.Name]
		if !ok {
			p.Invalid = "invalid"
			if err := pools.Invalid[cr.Name]; err != nil {
				p.Invalid = err.Error()
			}
			out = append(out, p)
			continue
		}
		for _, fam := range []allocator.Family{allocator.IPv4, allocator.IPv6} {
			var size, used Count
			has := false
			for _, rg := range cp.Ranges {
				if rg.Family() != fam {
					continue
				}
				has = true
				size = size.Add(rangeSize(rg, cp.AvoidBuggyIPs))
			}
			if !has {
				continue
			}
			for ip := range held {
				if allocator.FamilyOf(ip) == fam && slices.ContainsFunc(cp.Ranges, func(rg allocator.Range) bool { return rg.Contains(ip) }) {
					used = used.Add(CountOf(1))
				}
			}
			u := &Usage{Size: size, Used: used, Free: size.Sub(used)}
			if fam == allocator.IPv4 {
				p.IPv4 = u
			} else {
				p.IPv6 = u
			}
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y Pool) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// pendingReasons explains every LoadBalancer Service without an address: by the controller's latest
// Warning event on it when there is one, else by replaying allocation as the controller does (the
// Services holding addresses keep them, then the pending ones are allocated in creation order).
func pendingReasons(in Input, pools *config.Pools, ours, pending []*corev1.Service) []Pending {
	if len(pending) == 0 {
		return []Pending{}
	}
	latest := latestWarnings(in.Events)
	alloc := allocator.New()
	alloc.SetPools(pools.Allocator())
	for _, s := range ours {
		if ips := config.IngressAddrs(s); len(ips) > 0 {
			if req, _, err := config.Request(s, pools); err == nil {
				_, _ = alloc.Assign(req, ips) // a Service that cannot keep its address is the controller's to report
			}
		}
	}
	out := []Pending{}
	for _, s := range pending {
		p := Pending{Service: key(s), Source: SourceComputed}
		switch {
		case !config.Ours(s, in.LBClass):
			p.Reason = ReasonOtherClass
			p.Message = config.NotServedMessage(s, in.LBClass)
			out = append(out, p)
			continue
		}
		req, _, err := config.Request(s, pools)
		if err == nil {
			var asg allocator.Assignment
			asg, err = alloc.Allocate(req)
			if err == nil {
				p.Reason = ReasonNotAssigned
				p.Message = fmt.Sprintf("%s is free in pool %s but the controller has not assigned it: is %s running?",
					joinAddrs(asg.IPs), asg.Pool, ControllerComponent)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, config.ErrBadService):
			p.Reason, p.Message = ReasonInvalidService, err.Error()
		case len(pools.Names) == 0:
			p.Reason, p.Message = ReasonNoPool, fmt.Sprintf("no valid IPAddressPool in namespace %s", in.Namespace)
		default:
			p.Reason, p.Message = cmp.Or(string(allocator.ReasonOf(err)), "AllocationFailed"), err.Error()
		}
		if ev, ok := latest[s.Namespace+"/"+s.Name]; ok && (ev.InvolvedObject.UID == "" || ev.InvolvedObject.UID == s.UID) {
			t := eventTime(ev)
			p.Reason, p.Message, p.Source, p.Since = ev.Reason, ev.Message, SourceEvent, &t
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y Pending) int { return strings.Compare(x.Service, y.Service) })
	return out
}

func joinAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, a := range ips {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// latestWarnings returns, per Service (namespace/name), the controller's most recent Warning event.
func latestWarnings(events []corev1.Event) map[string]corev1.Event {
	out := map[string]corev1.Event{}
	for _, ev := range events {
		if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Service" ||
			cmp.Or(ev.Source.Component, ev.ReportingController) != ControllerComponent {
			continue
		}
		k := ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name
		if cur, ok := out[k]; !ok || eventTime(ev).After(eventTime(cur)) {
			out[k] = ev
		}
	}
	return out
}

// eventTime is when an event was last seen, whichever of its time fields its writer filled.
func eventTime(ev corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}
