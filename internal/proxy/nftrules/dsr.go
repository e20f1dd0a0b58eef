package nftrules

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// This file is direct server return (DSR) for external traffic: the pure decisions (which node
// owns which bucket of a Service port's flows, which local endpoint a flow on its node gets, the
// mark each node is routed by) and the rules of the table DSRTableName that carry them out. See
// docs/dsr.md for the packet flow.
//
// For each Service port in DSR mode, every node builds the same Maglev table over the nodes that
// have ready endpoints for it, weighted by their endpoint count (a node with k endpoints walks k
// permutations, named "node#0" .. "node#k-1"), and hashes each flow's 5-tuple into it with the
// same seed. A packet to a DSR address that arrives from outside (not from a pod network) is
// marked with the owner's slot: the owner is this node (nat: DNAT to a local endpoint, no
// masquerade) or another node (policy routing on the mark sends the unmodified packet to it as
// next hop). The owner, as its IPv4 address in 32 bits, is kept in the flow's conntrack mark so
// that a later change of the node set moves only new flows.
//
// Two node sets, then, for each port: who gets new flows (DSRPort.Nodes: nodes with endpoints in
// use, alive to the echo detector) and whose remembered flows stay with them (DSRPort.Keep).
//
// Nodes declared dead lose only their own buckets: a bucket keeps the owner it has in the table
// over every node with endpoints, dead or alive, unless that owner is dead (stickyBuckets). A
// plain Maglev table over the live nodes would also move 2-3% of the live nodes' buckets (4
// nodes, 251 buckets), and a flow picked up mid-connection by a new entry node after a failover
// (the old entry's power cut) would then go to another live node than the one holding it, and be
// reset, though its own node never stopped. For
// TCP and SCTP, Keep is every node with an endpoint of the port listed in its EndpointSlices,
// whatever its conditions and whatever the echo detector says: the connection's state lives in
// the pod on the owner node, so moving an established connection to another node can never save
// it (that node's pod answers its next segment with a reset), while keeping it saves it whenever
// the owner is still there: a false death under load (the detector declared a live node dead for
// a few tens of ms), a pod terminating gracefully (serving and terminating, as kube-proxy keeps
// its established connections), or a pod failing its readiness probe. A flow remembered to a node
// that is really gone is lost either way; it is sent to that node's address and dropped there,
// which touches no other flow. Once the node's endpoints leave the EndpointSlices its flows go
// by the hash to a live node, whose pod resets them: the client learns at once. For UDP, Keep is
// Nodes: a datagram flow has no state in the pod, and moving it to a live node is what keeps it
// answered when its owner dies (conntrack.Stale deletes the owner's UDP entries in the same case
// for the snat path). When a UDP flow moves, its remembered owner is replaced, so it stays with
// its new owner after the old one comes back. A move to this node itself cannot be done by the
// rules (the entry of a flow this node forwarded has no DNAT, and a confirmed entry is never NATed
// again): the proxy deletes such entries after the plan (conntrack.DSRMoved). It deletes a TCP
// flow's entry too when its remembered owner leaves Keep: sent by the hash to this node, the flow
// would meet the same stuck entry (a black hole instead of a live pod's reset, and a client
// reusing the port unanswered for as long as the entry lives).
//
// Rejoin (Beamer's daisy chaining, NSDI 2018). While a node R is dead to the others, its buckets
// have substitute owners, and connections opened then live on the substitutes. When R returns its
// buckets are its own again; an entry node with a memory of such a flow sends it on to the
// substitute, but one without (the router moved the flow to a new entry, often to R itself) hashes
// it to R, whose pod would reset it. So R, owner of a bucket, sends a TCP segment with ACK and
// without SYN of whose flow it has no conntrack state (ct state new: R never saw its pod answer it,
// so no pod of R's serves it) to the bucket's alternate owner, its owner in the table without R
// (DSRPort.AltBuckets: stickyBuckets over the other nodes with the same every, what the others
// computed while R was away), and remembers it in the ct mark. Whether the segment came from
// outside (R is the entry) or from a peer (an entry forwarded it), the alternate gets it from a
// peer and serves it: at most one extra hop. A connection R serves is never taken (its conntrack
// entry saw the pod's SYN-ACK: established), nor is a SYN. Only one previous table is covered, the
// one of R's own absence; UDP (no mid-stream segment to tell) is left alone.

// ExternalMode is how a Service's external traffic (load-balancer ingress IPs and external IPs)
// reaches its pods. The zero value is the proxy's default (Config of the DSR plan).
type ExternalMode uint8

const (
	// ExternalDefault: the proxy's --external-mode.
	ExternalDefault ExternalMode = iota
	// ExternalSNAT: as kube-proxy: the entry node DNATs and masquerades.
	ExternalSNAT
	// ExternalDSR: direct server return (this file).
	ExternalDSR
)

func (m ExternalMode) String() string {
	switch m {
	case ExternalDefault:
		return "default"
	case ExternalSNAT:
		return "snat"
	case ExternalDSR:
		return "dsr"
	}
	return "ExternalMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseExternalMode parses "snat" or "dsr" (an annotation's or a flag's value).
func ParseExternalMode(s string) (ExternalMode, error) {
	switch s {
	case "snat":
		return ExternalSNAT, nil
	case "dsr":
		return ExternalDSR, nil
	}
	return ExternalDefault, fmt.Errorf("unknown external mode %q (want snat or dsr)", s)
}

// DSRTableName is the nftables table (family ip) of the DSR rules.
const DSRTableName = "ironlb-dsr"

// DSRMarkMask holds a DSR packet's node slot (DSRMark); the rest of the packet mark is left
// alone. ironlb's main table leaves packets with any of these bits set to the DSR table.
const DSRMarkMask = 0x0fff0000

// DSRMaxSlot is the largest node slot.
const DSRMaxSlot = DSRMarkMask >> 16

// DSRMark is the packet mark of node slot s (1..DSRMaxSlot).
func DSRMark(slot int) uint32 { return uint32(slot) << 16 }

// DSRTable returns the routing table number policy routing uses for node slot s.
func DSRTable(slot int) int { return 0x1b00 + slot }

// DSRVXLANDevice is the vxlan device that carries DSR flows to owners on other segments
// (dsrapply); the DSR table trusts packets from it (loop guard) and clamps the MSS of SYNs sent
// through it.
const DSRVXLANDevice = "ironlb-dsr0"

// DSRRulePriority is the priority of the policy-routing rules (before main at 32766).
const DSRRulePriority = 2000

// DSRConfig is what a DSR plan needs besides the Model.
type DSRConfig struct {
	// Default is the mode of Services whose ExternalMode is ExternalDefault (ExternalSNAT if
	// zero).
	Default ExternalMode
	// NodeIPs are the nodes' IPv4 addresses (InternalIP) by name, the next hops. A node
	// without one cannot own buckets: its endpoints are left out of the DSR table.
	NodeIPs map[string]netip.Addr
	// Slots are the node slots of the previous plan (Plan.Slots); nodes keep theirs.
	Slots map[string]int
	// TableSize is the Maglev table size (0: DefaultMaglevTableSize).
	TableSize int
	// NodeMACs are the link-layer addresses each node's proxy published for itself on its own
	// Node object (the loop guard's peers). They must come from where only that node may write
	// (docs/dsr.md, "Loop guard"), never from the neighbour table, which any host on the segment
	// writes with a gratuitous ARP. A node without any is left out of the guard.
	NodeMACs map[string][]EtherAddr
}

// DSRRefusal says why a Service asked for DSR but is served in snat mode (or why one of its
// addresses is).
type DSRRefusal string

// The refusals.
const (
	RefuseLocalPolicy DSRRefusal = "DSRWithLocalPolicy"  // ETP Local already keeps the client address
	RefuseAffinity    DSRRefusal = "DSRWithAffinity"     // the 5-tuple hash cannot keep a client on a pod
	RefuseIPv6        DSRRefusal = "DSRIPv6NotSupported" // only IPv4 addresses are DSR
	RefuseNoNodeIP    DSRRefusal = "DSRNodeWithoutIPv4"  // a node with endpoints has no InternalIP
	RefuseSlots       DSRRefusal = "DSRTooManyNodes"     // more than DSRMaxSlot nodes
)

// DSRPort is one Service port in DSR mode.
type DSRPort struct {
	Service  ServiceKey
	Protocol Protocol
	Port     uint16
	Addrs    []netip.Addr // IPv4 load-balancer and external IPs, sorted
	// Nodes are the nodes with usable endpoints, sorted, and Weights their endpoint counts: the
	// owners of new flows.
	Nodes   []string
	Weights []int
	// Keep are the nodes, sorted, a flow remembered to which stays with it (see the top of this
	// file): for TCP and SCTP every node with a listed endpoint of the port (ready or not,
	// terminating or not, dead to the echo detector or not) that has a slot; for UDP, Nodes. It
	// always holds Nodes.
	Keep []string
	// Buckets is the Maglev table: bucket i belongs to Nodes[Buckets[i]].
	Buckets []int
	// Local are this node's endpoints, sorted, and LocalBuckets their Maglev table: those that get
	// new flows or, for TCP and SCTP when none of this node's does, those still serving (they
	// serve what entries forward here by memory; see PlanDSR).
	Local        []netip.AddrPort
	LocalBuckets []int
	// AltBuckets, for a TCP port whose Nodes hold this node, is the rejoin table (see the top of
	// this file): for each bucket this node owns, the index in Nodes of its alternate owner, the
	// owner the bucket has in the table every other node computes while this node is dead to it
	// (the same length as Buckets); -1 for the other buckets. Nil when this node owns no bucket,
	// is the only node, or the table without it has another size (weights summing to more than
	// DefaultMaglevTableSize/4 can change it: then a bucket here names no bucket there).
	AltBuckets []int
	// Seed is the jhash seed of both lookups, the same on every node.
	Seed uint32
	name string // base for chain and map names
}

// LocalSeed is the jhash seed of the owner's choice among its local endpoints.
func (p *DSRPort) LocalSeed() uint32 { return p.Seed ^ 0x5a5a5a5a }

// Owner returns the node that owns the flow hashing to bucket b.
func (p *DSRPort) Owner(b uint32) string { return p.Nodes[p.Buckets[b]] }

// DSRPlan is the DSR part of a sync: the Service ports in DSR mode, the slots of the nodes, and
// the Services refused.
type DSRPlan struct {
	Self  string
	Ports []DSRPort
	// Slots number every node that owns buckets (and this node): 1..DSRMaxSlot.
	Slots map[string]int
	// Routes are the other nodes that own buckets: policy routing sends the mark of each slot
	// to its address.
	Routes []DSRRoute
	// PodCIDRs are the IPv4 pod networks: their traffic to DSR addresses takes the snat path
	// (hairpin).
	PodCIDRs []netip.Prefix
	Refused  map[ServiceKey][]DSRRefusalNote
	// NodeIPs are the IPv4 addresses of the nodes in Slots.
	NodeIPs map[string]netip.Addr
	// Peers are the IPv4 addresses of every other node (any of them may be an entry node that
	// forwards to this one), and PeerMACs the link-layer addresses ("02:42:ac:12:00:03") every
	// other node published (DSRConfig.NodeMACs), sorted, each once: the loop guard.
	Peers    []netip.Addr
	PeerMACs []string
	// TrackSYN is set by the applier when this node holds the table DSRSYNTableName (the short
	// SYN_SENT timeout of forwarded SYNs): then every SYN to a DSR address is tracked here, and a
	// SYN that reuses the 5-tuple of an old connection gets a fresh conntrack entry (TIME_WAIT and
	// CLOSE entries are reopened) or rewrites the old entry's owner (WriteDSR). Without it the SYN
	// of a flow another node owns is not tracked (raw-prerouting: notrack), as before issue 19's
	// reuse fix, and a reused source port can meet the old connection's entry.
	TrackSYN bool
}

// The SYN table: a table of its own (never deleted by a sync, so never missing while the DSR
// table is replaced), written by the applier over netlink because knftables has no ct timeout
// objects. In nft's words:
//
//	table ip ironlb-dsr-syn {
//		ct timeout forwarded-syn { protocol tcp; l3proto ip; policy = { syn_sent: 0 } }
//		chain prerouting {
//			type filter hook prerouting priority -90   # after the DSR table's mangle and every dstnat
//			meta mark & 0x0fff0000 != 0 meta l4proto tcp tcp flags & (syn | ack) == syn
//				ct status & (confirmed | dnat) == 0 ct timeout set "forwarded-syn"
//		}
//	}
//
// A new SYN the DSR table marked for an owner and that was not DNATed here is forwarded: this node
// sees one direction of its flow, and a SYN_SENT entry would call every later segment of the
// client INVALID (an ACK in SYN_SENT is) for two minutes, losing the owner's memory (the mark of
// the entry) for them. With syn_sent 0 the entry expires as it is confirmed: the client's next
// segment finds none and is picked up as an established flow (nf_conntrack_tcp_loose) and
// marked with its owner, as an untracked SYN's next segment was. But the SYN went through
// conntrack, so an old entry of the same 5-tuple saw it: TIME_WAIT and CLOSE entries are killed
// and replaced (the kernel's reopen), which an untracked SYN never did (the soak's case b: an old
// connection the entry node served itself kept its DNAT in TIME_WAIT and took the new
// connection's segments to the old pod).
const (
	DSRSYNTableName = "ironlb-dsr-syn"
	DSRSYNTimeout   = "forwarded-syn"
	// DSRFlowTimeout is the timeout policy of a forwarded flow's entry picked up mid-stream: the
	// closing states short (dsrapply's flowPolicy says why).
	DSRFlowTimeout = "forwarded-flow"
	// DSRSYNPriority is the SYN table's prerouting priority: after the DSR table's mangle (-150)
	// and nat (-110) chains and the main table's dstnat (-100), so that the mark and the DNAT
	// status are known.
	DSRSYNPriority = -90
)

// EtherAddr is an Ethernet (EUI-48) address.
type EtherAddr [6]byte

// String is the address as nft and ip write it: "02:42:ac:12:00:03".
func (e EtherAddr) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", e[0], e[1], e[2], e[3], e[4], e[5])
}

// DSRRoute is one next hop of policy routing.
type DSRRoute struct {
	Node string
	Slot int
	IP   netip.Addr
}

// DSRRefusalNote is one refusal and its explanation.
type DSRRefusalNote struct {
	Reason  DSRRefusal
	Message string
}

// PlanDSR decides the DSR dataplane of m for the node m.Node.Name. It is a function of its
// inputs: every node computes the same Buckets for the same endpoints whatever their order.
// Services in DSR mode that cannot be served so are in Refused and keep the snat path (the main
// table), except that an IPv6 address of a DSR Service is left to snat while its IPv4 ones are DSR.
func PlanDSR(m *Model, cfg DSRConfig) DSRPlan {
	def := cfg.Default
	if def == ExternalDefault {
		def = ExternalSNAT
	}
	size := cfg.TableSize
	if size == 0 {
		size = DefaultMaglevTableSize
	}
	plan := DSRPlan{Self: m.Node.Name, Slots: map[string]int{}}
	refuse := func(k ServiceKey, r DSRRefusal, format string, args ...any) {
		if plan.Refused == nil {
			plan.Refused = map[ServiceKey][]DSRRefusalNote{}
		}
		plan.Refused[k] = append(plan.Refused[k], DSRRefusalNote{r, fmt.Sprintf(format, args...)})
	}
	for _, p := range m.Node.ClusterCIDRs {
		if p.IsValid() && p.Addr().Is4() {
			plan.PodCIDRs = append(plan.PodCIDRs, p.Masked())
		}
	}
	plan.PodCIDRs = outermost(plan.PodCIDRs)
	used := map[string]bool{}
	for _, k := range sortedKeys(m.Services) {
		svc := m.Services[k]
		if svc == nil || validate(svc) != nil {
			continue
		}
		mode := svc.ExternalMode
		if mode == ExternalDefault {
			mode = def
		}
		if mode != ExternalDSR {
			continue
		}
		var addrs []netip.Addr
		for _, a := range slices.Concat(svc.LoadBalancerIPs, svc.ExternalIPs) {
			a = a.Unmap()
			if !a.Is4() {
				if a.Is6() {
					refuse(k, RefuseIPv6, "%s: direct server return is IPv4 only; this address stays snat", a)
				}
				continue
			}
			if !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			continue
		}
		if svc.ExternalTrafficPolicyLocal {
			refuse(k, RefuseLocalPolicy, "externalTrafficPolicy Local already keeps the client address and has no spread to keep; served as Local (snat mode)")
			continue
		}
		if svc.SessionAffinityClientIP {
			refuse(k, RefuseAffinity, "sessionAffinity ClientIP cannot be kept by a per-connection hash; served in snat mode")
			continue
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		for i := range svc.Ports {
			sp := &svc.Ports[i]
			sel := SelectEndpoints(svc, sp, &m.Node, false)
			count := map[string]int{}
			var local []netip.AddrPort
			noIP := map[string]bool{}
			keep := map[string]bool{}
			if sp.Protocol != UDP {
				for _, ep := range sp.Endpoints {
					if dsrEndpoint(ep, cfg.NodeIPs) {
						keep[ep.Node] = true
					}
				}
			}
			for _, ep := range sel.Cluster {
				// Cluster holds IPv4 endpoints with ports only: a node without an IPv4
				// InternalIP is why one does not count.
				if !dsrEndpoint(ep, cfg.NodeIPs) {
					if !noIP[ep.Node] {
						refuse(k, RefuseNoNodeIP, "node %q of endpoint %s has no IPv4 InternalIP; its endpoints get no DSR flows", ep.Node, ep.Addr)
						noIP[ep.Node] = true
					}
					continue
				}
				count[ep.Node]++
				if ep.Node == m.Node.Name {
					local = append(local, netip.AddrPortFrom(ep.Addr, ep.Port))
				}
			}
			if len(count) == 0 {
				continue // no endpoints: the main table rejects
			}
			if len(local) == 0 && sp.Protocol != UDP {
				// None of this node's endpoints gets new flows, but one still serving (a pod
				// terminating gracefully) serves a flow an entry node forwards here by its memory
				// (this node is in the keep set): a new connection on an old entry's 5-tuple (a
				// reused source port) that the entry cannot serve itself, or a flow of a stale
				// table. Hashed on, it would go back to the entry, which sends it here again or
				// cannot serve it (TestKernelDSRReusedPortNowLocal). Entry nodes never hash a new
				// flow here.
				for _, ep := range sp.Endpoints {
					if ep.Node == m.Node.Name && ep.Serving && dsrEndpoint(ep, cfg.NodeIPs) {
						local = append(local, netip.AddrPortFrom(ep.Addr, ep.Port))
					}
				}
			}
			dp := DSRPort{Service: k, Protocol: sp.Protocol, Port: sp.Port, Addrs: addrs, name: portBase(svc, sp)}
			dp.Seed = seed(dp.name)
			for n := range count {
				dp.Nodes = append(dp.Nodes, n)
			}
			slices.Sort(dp.Nodes)
			for _, n := range dp.Nodes {
				dp.Weights = append(dp.Weights, count[n])
				used[n] = true
				keep[n] = true
			}
			for n := range keep {
				dp.Keep = append(dp.Keep, n)
				used[n] = true
			}
			slices.Sort(dp.Keep)
			dp.Buckets = WeightedNodeTable(dp.Nodes, dp.Weights, size)
			self := slices.Index(dp.Nodes, m.Node.Name)
			rejoin := self >= 0 && len(dp.Nodes) > 1 && sp.Protocol == TCP
			if len(m.Node.DeadNodes) > 0 || rejoin {
				// every: the nodes with endpoints, dead or alive, and their weights.
				all := m.Node
				all.DeadNodes = nil
				every := map[string]int{}
				for _, ep := range SelectEndpoints(svc, sp, &all, false).Cluster {
					if dsrEndpoint(ep, cfg.NodeIPs) {
						every[ep.Node]++
					}
				}
				if len(m.Node.DeadNodes) > 0 {
					// The buckets of live owners stay theirs (see the top of this file).
					dp.Buckets = stickyBuckets(dp.Nodes, dp.Weights, dp.Buckets, every, size)
				}
				if rejoin {
					dp.AltBuckets = altBuckets(dp.Nodes, dp.Weights, dp.Buckets, self, every, size)
				}
			}
			if len(local) > 0 {
				slices.SortFunc(local, netip.AddrPort.Compare)
				keys := make([]string, len(local))
				for i, ap := range local {
					keys[i] = ap.String()
				}
				dp.Local = local
				dp.LocalBuckets = MaglevTable(keys, maglevSize(size, len(keys)))
			}
			plan.Ports = append(plan.Ports, dp)
		}
	}
	if len(plan.Ports) == 0 {
		return plan
	}
	used[m.Node.Name] = true
	plan.Slots = AssignSlots(cfg.Slots, used)
	var dropped []string
	for n := range used {
		if _, ok := plan.Slots[n]; !ok {
			dropped = append(dropped, n)
		}
	}
	if len(dropped) > 0 {
		// More nodes than slots: leave the Services on unslotted nodes to snat.
		kept := plan.Ports[:0]
		for _, p := range plan.Ports {
			if slices.ContainsFunc(p.Nodes, func(n string) bool { return slices.Contains(dropped, n) }) {
				refuse(p.Service, RefuseSlots, "more than %d nodes own DSR flows; served in snat mode", DSRMaxSlot)
				continue
			}
			// A node that only holds remembered flows and got no slot cannot be routed to: its
			// flows go by the hash.
			p.Keep = slices.DeleteFunc(p.Keep, func(n string) bool { return slices.Contains(dropped, n) })
			kept = append(kept, p)
		}
		plan.Ports = kept
	}
	for n, ip := range cfg.NodeIPs {
		if n != m.Node.Name && ip.Is4() {
			plan.Peers = append(plan.Peers, ip)
		}
	}
	slices.SortFunc(plan.Peers, netip.Addr.Compare)
	plan.Peers = slices.Compact(plan.Peers)
	plan.PeerMACs = peerMACs(m.Node.Name, cfg.NodeMACs)
	plan.NodeIPs = map[string]netip.Addr{}
	for n, s := range plan.Slots {
		plan.NodeIPs[n] = cfg.NodeIPs[n]
		if n != m.Node.Name {
			plan.Routes = append(plan.Routes, DSRRoute{Node: n, Slot: s, IP: cfg.NodeIPs[n]})
		}
	}
	slices.SortFunc(plan.Routes, func(a, b DSRRoute) int { return a.Slot - b.Slot })
	return plan
}

// dsrEndpoint reports whether ep counts for DSR: an IPv4 endpoint (an IPv4-mapped address counts,
// as SelectEndpoints unmaps it) with a port, on a named node with an IPv4 InternalIP in nodeIPs
// (the next hop of its flows). Every endpoint of SelectEndpoints' IPv4 Cluster passes the first
// two; Keep, which reads every listed endpoint, needs them.
func dsrEndpoint(ep Endpoint, nodeIPs map[string]netip.Addr) bool {
	return ep.Addr.Unmap().Is4() && ep.Port != 0 && ep.Node != "" && nodeIPs[ep.Node].Is4()
}

// peerMACs returns the Ethernet addresses published by every node but self, sorted, each once. A
// MAC that self published too is left out: a packet from this node's own interface is not one a
// peer forwarded (two nodes claiming one MAC is a misconfiguration or a lie, and the safe reading
// of it is "not a peer").
func peerMACs(self string, published map[string][]EtherAddr) []string {
	own := map[string]bool{}
	for _, hw := range published[self] {
		own[hw.String()] = true
	}
	var out []string
	for n, macs := range published {
		if n == self {
			continue
		}
		for _, hw := range macs {
			if hw == (EtherAddr{}) || own[hw.String()] {
				continue
			}
			out = append(out, hw.String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// WeightedNodeTable is a Maglev table of size buckets over nodes, node i walking weights[i]
// permutations (named "node#j"), so its share is proportional to its weight. Entry b is the index
// in nodes of bucket b's owner. Like MaglevTable it depends only on the set of (node, weight)
// pairs, not their order.
func WeightedNodeTable(nodes []string, weights []int, size int) []int {
	var names []string
	var owner []int
	for i, n := range nodes {
		for j := range max(weights[i], 1) {
			names = append(names, n+"#"+strconv.Itoa(j))
			owner = append(owner, i)
		}
	}
	size = maglevSize(size, len(names))
	t := MaglevTable(names, size)
	for b, v := range t {
		t[b] = owner[v]
	}
	return t
}

// stickyBuckets is the owner table of nodes (weights, their own table reduced) when the nodes
// declared dead are left out of a table that would otherwise be over every (the nodes with
// endpoints, dead or alive, and their weights): a bucket whose owner in every's table is among
// nodes with the same weight keeps it, the others (a dead node's) take reduced's owner. So a
// death moves only the dead node's flows, and every entry node hashes a live node's flows to it
// whatever its view of the dead ones. If the two tables differ in size (weights far apart) it
// returns reduced.
func stickyBuckets(nodes []string, weights, reduced []int, every map[string]int, size int) []int {
	names := make([]string, 0, len(every))
	for n := range every {
		names = append(names, n)
	}
	slices.Sort(names)
	ws := make([]int, len(names))
	for i, n := range names {
		ws[i] = every[n]
	}
	full := WeightedNodeTable(names, ws, size)
	if len(full) != len(reduced) {
		return reduced
	}
	out := make([]int, len(reduced))
	for b, o := range full {
		out[b] = reduced[b]
		if i := slices.Index(nodes, names[o]); i >= 0 && weights[i] == ws[o] {
			out[b] = i
		}
	}
	return out
}

// altBuckets is the rejoin table of node nodes[self] (DSRPort.AltBuckets): for each bucket of
// buckets that self owns, the owner the bucket has in stickyBuckets over the nodes without self,
// with the same every (the nodes with endpoints, dead or alive): what every other node computes
// while self is in its DeadNodes and self's endpoints are still listed. For the buckets self owns
// in the table over every node, that is the plain table over the others; for a dead node's
// buckets that self took over, the table over the others and without the dead node too. Nil if
// that table has another size than buckets.
func altBuckets(nodes []string, weights, buckets []int, self int, every map[string]int, size int) []int {
	others := slices.Delete(slices.Clone(nodes), self, self+1)
	ws := slices.Delete(slices.Clone(weights), self, self+1)
	reduced := WeightedNodeTable(others, ws, size)
	alt := stickyBuckets(others, ws, reduced, every, size)
	if len(alt) != len(buckets) {
		return nil
	}
	out := make([]int, len(buckets))
	owns := false
	for b, o := range buckets {
		out[b] = -1
		if o == self {
			out[b] = slices.Index(nodes, others[alt[b]])
			owns = true
		}
	}
	if !owns {
		return nil
	}
	return out
}

// AssignSlots gives every node in want a slot in 1..DSRMaxSlot: a node keeps its slot in prev,
// new nodes take the lowest free ones in name order. Nodes beyond DSRMaxSlot get none.
func AssignSlots(prev map[string]int, want map[string]bool) map[string]int {
	out := map[string]int{}
	taken := map[int]bool{}
	for n, s := range prev {
		if want[n] && s >= 1 && s <= DSRMaxSlot && !taken[s] {
			out[n], taken[s] = s, true
		}
	}
	names := make([]string, 0, len(want))
	for n := range want {
		if _, ok := out[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	next := 1
	for _, n := range names {
		for next <= DSRMaxSlot && taken[next] {
			next++
		}
		if next > DSRMaxSlot {
			break
		}
		out[n], taken[next] = next, true
	}
	return out
}

// NodeID is the conntrack mark that remembers a flow's owner: its IPv4 address as a number.
func NodeID(ip netip.Addr) uint32 {
	b := ip.As4()
	return binary.BigEndian.Uint32(b[:])
}

// DSR chain, set and map names.
const (
	dsrChainRaw     = "raw-prerouting"
	dsrChainMangle  = "mangle-prerouting"
	dsrChainNAT     = "nat-prerouting"
	dsrChainNotrack = "untrack-syn"
	dsrChainForward = "forward"
	dsrMapRaw       = "raw-services"
	dsrMapMangle    = "dsr-services"
	dsrMapLocal     = "local-services"
	dsrSetPods      = "pod-cidrs"
	dsrSetPeers     = "peer-macs"
)

func (p *DSRPort) chain(prefix string) string { return hashed(prefix, p.name, "") }

// dsrHash is the flow hash into a table of n buckets.
func (p *DSRPort) dsrHash(n int) []Expr {
	return []Expr{{Field: FieldJhash, Flow: true, Mod: uint32(n), Seed: p.Seed}}
}

// The DSR table's keys, and its TCP flags. Key slices are shared: never modify them.
var (
	keyTuple      = []Expr{{Field: FieldDaddr}, {Field: FieldL4Proto}, {Field: FieldDport}}
	keySaddr      = []Expr{{Field: FieldSaddr}}
	keyEtherSaddr = []Expr{{Field: FieldEtherSaddr}}
	keyIifname    = []Expr{{Field: FieldIifname}}
	keyCtMark     = []Expr{{Field: FieldCtMark}}
	keyMetaMark   = []Expr{{Field: FieldMark, Meta: true}}
)

const (
	tcpSyn = 0x02
	tcpAck = 0x10
)

// setMark is `ct mark set V` (ct) or `meta mark set V`.
func setMark(ct bool, v uint32) Stmt { return Stmt{Kind: StmtSetMark, Ct: ct, Value: NumValue(v)} }

// setMarkFrom is `ct|meta mark set KEY [map @m]`.
func setMarkFrom(ct bool, key []Expr, m string) Stmt {
	return Stmt{Kind: StmtSetMark, Ct: ct, Key: key, Name: m}
}

// addRule hands r to tx as statements if it takes them (RuleWriter), else as text.
func addRule(tx Writer, r *Rule) {
	if rw, ok := tx.(RuleWriter); ok {
		rw.AddRule(r)
	} else {
		tx.Add(r.Object())
	}
}

// WriteDSR writes the whole DSR table of plan into tx, a transaction of an Interface for family
// ip and table DSRTableName: the table, its chains and maps (flushed and refilled). A plan without
// ports writes a table with its base chains and empty maps, which passes every packet.
//
// Chains, in hook order:
//
//	raw-prerouting (raw, -300)         only without the SYN table (DSRPlan.TrackSYN false): a TCP
//	                                   SYN whose owner is another node is not tracked here (the
//	                                   entry sees one direction: the next ACK is picked up loosely
//	                                   and marked instead of being INVALID after SYN_SENT). With
//	                                   it the SYN is tracked and its entry expires at once (see
//	                                   DSRSYNTableName), so that it meets an old connection's entry
//	mangle-prerouting (mangle, -150)   mark the packet with the owner's slot: the remembered owner
//	                                   (ct mark) while it is in DSRPort.Keep, else the hash's; a
//	                                   SYN on an old forwarded entry re-hashes its owner
//	nat-prerouting (dstnat-10, -110)   this node owns it: DNAT to a local endpoint, no masquerade
//	forward (mangle, -150)             clamp the MSS of SYNs encapsulated to another segment
func WriteDSR(tx Writer, plan *DSRPlan) {
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("direct server return for ironlb proxy")})
	type baseChain struct {
		name string
		typ  knftables.BaseChainType
		prio knftables.BaseChainPriority
	}
	base := []baseChain{
		{dsrChainMangle, knftables.FilterType, knftables.ManglePriority},
		{dsrChainNAT, knftables.NATType, "-110"},
		{dsrChainForward, knftables.FilterType, knftables.ManglePriority},
	}
	if !plan.TrackSYN {
		base = append([]baseChain{{dsrChainRaw, knftables.FilterType, knftables.RawPriority}}, base...)
	}
	for _, c := range base {
		hook := knftables.PreroutingHook
		if c.name == dsrChainForward {
			hook = knftables.ForwardHook
		}
		tx.Add(&knftables.Chain{Name: c.name, Type: knftables.PtrTo(c.typ), Hook: knftables.PtrTo(hook), Priority: knftables.PtrTo(c.prio)})
		tx.Flush(&knftables.Chain{Name: c.name})
	}
	if !plan.TrackSYN {
		tx.Add(&knftables.Chain{Name: dsrChainNotrack})
		tx.Flush(&knftables.Chain{Name: dsrChainNotrack})
		addRule(tx, &Rule{Chain: dsrChainNotrack, Stmts: []Stmt{{Kind: StmtNotrack}}})
	}
	tx.Add(&knftables.Set{Name: dsrSetPods, Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag},
		Comment: knftables.PtrTo("pod networks: their traffic to DSR addresses takes the snat path")})
	tx.Flush(&knftables.Set{Name: dsrSetPods})
	for _, p := range plan.PodCIDRs {
		tx.Add(&knftables.Element{Set: dsrSetPods, Key: []string{p.String()}})
	}
	tx.Add(&knftables.Set{Name: dsrSetPeers, Type: "ether_addr",
		Comment: knftables.PtrTo("other nodes' link-layer addresses: a packet from one was forwarded by an entry node (loop guard)")})
	tx.Flush(&knftables.Set{Name: dsrSetPeers})
	for _, mac := range plan.PeerMACs {
		tx.Add(&knftables.Element{Set: dsrSetPeers, Key: []string{mac}})
	}
	tuple := "ipv4_addr . inet_proto . inet_service : verdict"
	maps := []string{dsrMapMangle, dsrMapLocal}
	if !plan.TrackSYN {
		maps = append([]string{dsrMapRaw}, maps...)
	}
	for _, mp := range maps {
		tx.Add(&knftables.Map{Name: mp, Type: tuple})
		tx.Flush(&knftables.Map{Name: mp})
	}
	if !plan.TrackSYN {
		addRule(tx, &Rule{Chain: dsrChainRaw, Stmts: []Stmt{
			{Kind: StmtMatch, Key: []Expr{{Field: FieldTCPFlags, Mask: tcpSyn | tcpAck}}, Op: OpEq, Value: NumValue(tcpSyn)},
			vmap(keyTuple, dsrMapRaw)}})
	}
	addRule(tx, &Rule{Chain: dsrChainMangle, Stmts: []Stmt{vmap(keyTuple, dsrMapMangle)}})
	addRule(tx, &Rule{Chain: dsrChainForward, Stmts: []Stmt{
		match([]Expr{{Field: FieldOifname}}, StringValue(DSRVXLANDevice)),
		match([]Expr{{Field: FieldTCPFlags}}, NumValue(tcpSyn)),
		{Kind: StmtClampMSS}},
		Comment: "encapsulation costs 50 bytes: clamp the MSS of SYNs sent through it"})
	self := plan.Slots[plan.Self]
	if self != 0 {
		addRule(tx, &Rule{Chain: dsrChainNAT, Stmts: []Stmt{
			{Kind: StmtMatch, Key: []Expr{{Field: FieldMark, Meta: true, Mask: DSRMarkMask}}, Op: OpEq, Value: NumValue(DSRMark(self))},
			vmap(keyTuple, dsrMapLocal)}})
	}
	for i := range plan.Ports {
		writeDSRPort(tx, plan, &plan.Ports[i])
	}
}

// DSR per-port chain and map prefixes (hashed like the main table's names).
const (
	prefixDSRRaw     = "dsr-raw-"    // chain and vmap: remote buckets -> notrack
	prefixDSRMangle  = "dsr-"        // chain
	prefixDSRBuckets = "dsr-owner-"  // map bucket -> owner's NodeID
	prefixDSRNodes   = "dsr-nodes-"  // map NodeID -> slot mark
	prefixDSRLocal   = "dsr-local-"  // chain
	prefixDSREps     = "dsr-ep-"     // map bucket -> local endpoint
	prefixDSRRejoin  = "dsr-rejoin-" // chain and vmap: this node's buckets with an alternate owner
	prefixDSRAlt     = "dsr-alt-"    // map bucket -> alternate owner's NodeID
)

func writeDSRPort(tx Writer, plan *DSRPlan, p *DSRPort) {
	self := plan.Slots[plan.Self]
	proto := string(p.Protocol)
	port := strconv.Itoa(int(p.Port))
	comment := knftables.PtrTo(p.Service.String() + ":" + port + "/" + proto)
	raw, mangle, local := p.chain(prefixDSRRaw), p.chain(prefixDSRMangle), p.chain(prefixDSRLocal)
	owners, nodes, eps := p.chain(prefixDSRBuckets), p.chain(prefixDSRNodes), p.chain(prefixDSREps)
	n := len(p.Buckets)
	hash := p.dsrHash(n)

	// bucket -> owner (NodeID) and owner -> slot mark.
	tx.Add(&knftables.Map{Name: owners, TypeOf: "numgen random mod 2 : meta mark", Comment: comment})
	tx.Flush(&knftables.Map{Name: owners})
	for b, o := range p.Buckets {
		tx.Add(&knftables.Element{Map: owners, Key: []string{strconv.Itoa(b)}, Value: []string{hex(NodeID(plan.ip(p.Nodes[o])))}})
	}
	tx.Add(&knftables.Map{Name: nodes, TypeOf: "meta mark : meta mark", Comment: comment})
	tx.Flush(&knftables.Map{Name: nodes})
	for _, nd := range p.Keep {
		tx.Add(&knftables.Element{Map: nodes, Key: []string{hex(NodeID(plan.ip(nd)))}, Value: []string{hex(DSRMark(plan.Slots[nd]))}})
	}

	// raw: a SYN owned by another node is not tracked (see WriteDSR), unless the SYN table
	// makes tracking it harmless (DSRPlan.TrackSYN).
	if p.Protocol == TCP && !plan.TrackSYN {
		writeDSRRaw(tx, plan, p, raw, hash, comment)
	}

	// mangle: mark the owner's slot.
	tx.Add(&knftables.Chain{Name: mangle, Comment: comment})
	tx.Flush(&knftables.Chain{Name: mangle})
	if len(plan.PodCIDRs) > 0 {
		addRule(tx, &Rule{Chain: mangle, Stmts: []Stmt{lookup(keySaddr, dsrSetPods), verdict(Return)}, Comment: "pods take the snat path (hairpin)"})
	}
	if p.AltBuckets != nil && len(p.Local) > 0 && self != 0 {
		writeDSRRejoin(tx, plan, p, mangle, nodes, hash, comment)
	}
	if len(p.Local) > 0 && self != 0 {
		// Not on an old forwarded entry of this node's (confirmed, not DNATed here: this node was
		// the entry of the flow once and sent it to its owner). No DNAT can be added to a
		// confirmed entry, so serving would deliver the packet to no pod, and the entry would
		// remember this node as the flow's owner, an owner that cannot serve it, until it
		// expires: the chaos soak of 2026-11-27 22:53 lost a reused port's SYNs to such an entry.
		// Such a packet goes on by this node's memory and hash, like its own clients' packets:
		// to the owner it remembers, which holds the connection.
		notOld := Stmt{Kind: StmtMatch, Key: []Expr{{Field: FieldCtStatus, Mask: ctStatusConfirmed | ctStatusDNAT}}, Op: OpNeq, Value: NumValue(ctStatusConfirmed)}
		serve := []Stmt{notOld, setMark(true, NodeID(plan.ip(plan.Self))), setMark(false, DSRMark(self)), verdict(Return)}
		addRule(tx, &Rule{Chain: mangle, Stmts: append([]Stmt{lookup(keyEtherSaddr, dsrSetPeers)}, serve...),
			Comment: "loop guard: forwarded by another node, and this node has endpoints: serve it here"})
		addRule(tx, &Rule{Chain: mangle, Stmts: append([]Stmt{match(keyIifname, StringValue(DSRVXLANDevice))}, serve...),
			Comment: "loop guard: encapsulated by another node's entry"})
	}
	// A SYN on an entry that is already confirmed and not DNATed here is a new connection on a
	// 5-tuple whose old connection this node forwarded (a reused source port; conntrack ignores a
	// SYN in ESTABLISHED, FIN_WAIT, CLOSE_WAIT and LAST_ACK and leaves the old entry, with the old
	// owner in its mark). The new connection goes by the hash, and its next segments follow the
	// mark: rewrite it. Unless the hash says this node: an entry without DNAT cannot be served
	// here, so the SYN keeps the remembered owner (when it may still hold flows), as its segments do.
	// This node has a slot even without an IPv4 address (PlanDSR), but then the hash never says
	// this node.
	if p.Protocol == TCP {
		rehash := []Stmt{
			{Kind: StmtMatch, Key: []Expr{{Field: FieldTCPFlags, Mask: tcpSyn | tcpAck}}, Op: OpEq, Value: NumValue(tcpSyn)},
			{Kind: StmtMatch, Key: []Expr{{Field: FieldCtStatus, Mask: ctStatusConfirmed | ctStatusDNAT}}, Op: OpEq, Value: NumValue(ctStatusConfirmed)},
		}
		if self != 0 && plan.ip(plan.Self).Is4() {
			rehash = append(rehash, setMarkFrom(false, hash, owners), notMatch(keyMetaMark, NumValue(NodeID(plan.ip(plan.Self)))),
				setMarkFrom(true, keyMetaMark, ""))
		} else {
			rehash = append(rehash, setMarkFrom(true, hash, owners))
		}
		addRule(tx, &Rule{Chain: mangle, Stmts: rehash,
			Comment: "a new connection on an old forwarded entry of its 5-tuple (reused source port): owned by the hash, unless that is this node"})
		// The hash says this node, which cannot serve the connection on that entry. The
		// remembered owner may be dead (the chaos soak: a reused port's SYN sent to a
		// partitioned node for 3 s); the bucket's alternate owner (the owner it has in the
		// table without this node, AltBuckets) gets new flows by every table, so it is live
		// and serves a new connection. Without an alternate (this node is the only one with
		// endpoints), the remembered owner as before.
		if p.AltBuckets != nil && len(p.Local) > 0 && self != 0 && plan.ip(plan.Self).Is4() {
			addRule(tx, &Rule{Chain: mangle, Stmts: []Stmt{
				{Kind: StmtMatch, Key: []Expr{{Field: FieldTCPFlags, Mask: tcpSyn | tcpAck}}, Op: OpEq, Value: NumValue(tcpSyn)},
				{Kind: StmtMatch, Key: []Expr{{Field: FieldCtStatus, Mask: ctStatusConfirmed | ctStatusDNAT}}, Op: OpEq, Value: NumValue(ctStatusConfirmed)},
				match(keyMetaMark, NumValue(NodeID(plan.ip(plan.Self)))),
				setMarkFrom(true, hash, p.chain(prefixDSRAlt))},
				Comment: "that is this node, which cannot serve it on that entry: the bucket's alternate owner, live, not the remembered one"})
		}
	}
	// Not "ct state new" alone: at an entry node that forwards the flow, conntrack never sees a
	// reply, so every packet of the flow is "new" (IP_CT_NEW until a reply) and the owner would be
	// re-hashed on each one: no memory at all. A flow without a remembered owner has ct mark 0.
	addRule(tx, &Rule{Chain: mangle, Stmts: []Stmt{match(keyCtState, SymValue("new")), match(keyCtMark, NumValue(0)),
		setMarkFrom(true, hash, owners)}, Comment: "remember a new flow's owner"})
	addRule(tx, &Rule{Chain: mangle, Stmts: []Stmt{setMarkFrom(false, keyCtMark, nodes), verdict(Return)},
		Comment: "the remembered owner, while it may still hold the flow (keep)"})
	addRule(tx, &Rule{Chain: mangle, Stmts: []Stmt{setMarkFrom(false, hash, owners)},
		Comment: "untracked, invalid (one direction seen) or owner gone: by hash"})
	addRule(tx, &Rule{Chain: mangle, Stmts: []Stmt{setMarkFrom(true, keyMetaMark, "")}})
	addRule(tx, &Rule{Chain: mangle, Stmts: []Stmt{setMarkFrom(false, keyMetaMark, nodes)}})

	for _, a := range p.Addrs {
		k := []string{a.String(), proto, port}
		if p.Protocol == TCP && !plan.TrackSYN {
			tx.Add(&knftables.Element{Map: dsrMapRaw, Key: k, Value: []string{"goto " + raw}})
		}
		tx.Add(&knftables.Element{Map: dsrMapMangle, Key: k, Value: []string{"goto " + mangle}})
	}

	// nat: this node owns the flow: DNAT to a local endpoint, no masquerade.
	if self == 0 || len(p.Local) == 0 {
		return
	}
	tx.Add(&knftables.Map{Name: eps, TypeOf: "numgen random mod 2 : ip daddr . " + proto + " dport", Comment: comment})
	tx.Flush(&knftables.Map{Name: eps})
	for b, e := range p.LocalBuckets {
		ap := p.Local[e]
		tx.Add(&knftables.Element{Map: eps, Key: []string{strconv.Itoa(b)}, Value: []string{ap.Addr().String() + " . " + strconv.Itoa(int(ap.Port()))}})
	}
	tx.Add(&knftables.Chain{Name: local, Comment: comment})
	tx.Flush(&knftables.Chain{Name: local})
	addRule(tx, &Rule{Chain: local, Stmts: []Stmt{l4proto(p.Protocol),
		{Kind: StmtDNATMap, Key: []Expr{{Field: FieldJhash, Flow: true, Mod: uint32(len(p.LocalBuckets)), Seed: p.LocalSeed()}}, Name: eps}}})
	for _, a := range p.Addrs {
		tx.Add(&knftables.Element{Map: dsrMapLocal, Key: []string{a.String(), proto, port}, Value: []string{"goto " + local}})
	}
}

func (plan *DSRPlan) ip(node string) netip.Addr { return plan.NodeIPs[node] }

func hex(v uint32) string { return "0x" + strconv.FormatUint(uint64(v), 16) }

// String lists the plan's ports, one a line.
func (plan *DSRPlan) String() string {
	var b strings.Builder
	for _, p := range plan.Ports {
		fmt.Fprintf(&b, "%s %s/%d %v nodes=%v weights=%v keep=%v local=%v\n", p.Service, p.Protocol, p.Port, p.Addrs, p.Nodes, p.Weights, p.Keep, p.Local)
	}
	return b.String()
}

// writeDSRRaw writes the raw chain of TCP port p: a SYN whose owner is another node is not
// tracked, so that the ACK after it is picked up as a new flow here (see WriteDSR).
func writeDSRRaw(tx Writer, plan *DSRPlan, p *DSRPort, raw string, hash []Expr, comment *string) {
	tx.Add(&knftables.Map{Name: raw, TypeOf: "numgen random mod 2 : verdict", Comment: comment})
	tx.Flush(&knftables.Map{Name: raw})
	for b, o := range p.Buckets {
		if p.Nodes[o] != plan.Self {
			tx.Add(&knftables.Element{Map: raw, Key: []string{strconv.Itoa(b)}, Value: []string{"goto " + dsrChainNotrack}})
		}
	}
	tx.Add(&knftables.Chain{Name: raw, Comment: comment})
	tx.Flush(&knftables.Chain{Name: raw})
	if len(plan.PodCIDRs) > 0 {
		addRule(tx, &Rule{Chain: raw, Stmts: []Stmt{lookup(keySaddr, dsrSetPods), verdict(Return)}})
	}
	addRule(tx, &Rule{Chain: raw, Stmts: []Stmt{lookup(keyEtherSaddr, dsrSetPeers), verdict(Return)}, Comment: "forwarded by another node: tracked here"})
	addRule(tx, &Rule{Chain: raw, Stmts: []Stmt{match(keyIifname, StringValue(DSRVXLANDevice)), verdict(Return)}, Comment: "encapsulated by another node: tracked here"})
	addRule(tx, &Rule{Chain: raw, Stmts: []Stmt{vmap(hash, raw)}})
}

// writeDSRRejoin writes the rejoin rule of TCP port p (see the top of this file) into its mangle
// chain, before the loop guard: a segment with ACK and without SYN (mid-stream: every segment of
// an established connection has ACK), of a flow this node has no conntrack state of (ct state new:
// it never saw a reply of it, so no pod of its serves it), in a bucket this node owns, goes to the
// bucket's alternate owner (DSRPort.AltBuckets), remembered in the ct mark. It comes from outside
// (this node is the entry) or from a peer (an entry forwarded it): either way the alternate node
// gets it from a peer and serves it (its own buckets are not its rejoin buckets, so there is at
// most one extra hop). A connection this node serves is never taken: its conntrack entry saw the
// pod's SYN-ACK, so it is established, not new. UDP has no mid-stream segment to tell and is left
// alone. The rules have the shapes of the mangle chain's own (the remembered owner while in keep,
// else the table's), with the alternates' map for the owners' one.
func writeDSRRejoin(tx Writer, plan *DSRPlan, p *DSRPort, mangle, nodes string, hash []Expr, comment *string) {
	rejoin, alt := p.chain(prefixDSRRejoin), p.chain(prefixDSRAlt)
	tx.Add(&knftables.Chain{Name: rejoin, Comment: knftables.PtrTo(*comment + " rejoin")})
	tx.Flush(&knftables.Chain{Name: rejoin})
	tx.Add(&knftables.Map{Name: alt, TypeOf: "numgen random mod 2 : meta mark", Comment: comment})
	tx.Flush(&knftables.Map{Name: alt})
	tx.Add(&knftables.Map{Name: rejoin, TypeOf: "numgen random mod 2 : verdict", Comment: comment})
	tx.Flush(&knftables.Map{Name: rejoin})
	for b, o := range p.AltBuckets {
		if o < 0 {
			continue
		}
		k := []string{strconv.Itoa(b)}
		tx.Add(&knftables.Element{Map: alt, Key: k, Value: []string{hex(NodeID(plan.ip(p.Nodes[o])))}})
		tx.Add(&knftables.Element{Map: rejoin, Key: k, Value: []string{"goto " + rejoin}})
	}
	addRule(tx, &Rule{Chain: rejoin, Stmts: []Stmt{match(keyCtMark, NumValue(0)), setMarkFrom(true, hash, alt)},
		Comment: "remember the alternate owner: the owner while this node was away"})
	addRule(tx, &Rule{Chain: rejoin, Stmts: []Stmt{setMarkFrom(false, keyCtMark, nodes), verdict(Return)},
		Comment: "the remembered owner, while it may still hold the flow (keep)"})
	addRule(tx, &Rule{Chain: rejoin, Stmts: []Stmt{setMarkFrom(false, hash, alt)},
		Comment: "the remembered owner left keep: the alternate owner now"})
	addRule(tx, &Rule{Chain: rejoin, Stmts: []Stmt{setMarkFrom(true, keyMetaMark, "")}})
	addRule(tx, &Rule{Chain: rejoin, Stmts: []Stmt{setMarkFrom(false, keyMetaMark, nodes)}})
	addRule(tx, &Rule{Chain: mangle, Stmts: []Stmt{
		{Kind: StmtMatch, Key: []Expr{{Field: FieldTCPFlags, Mask: tcpSyn | tcpAck}}, Op: OpEq, Value: NumValue(tcpAck)},
		match(keyCtState, SymValue("new")), vmap(hash, rejoin)},
		Comment: "rejoin: mid-stream, no state here, in this node's bucket: opened while this node was away"})
}
