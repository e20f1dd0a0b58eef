package speaker

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/election"
)

// The layer-2 plan: everything a reconcile decides, as a pure function (plan) of the model, the
// detectors' view of the peers, this node's memory and the time. The owner (speaker.reconcile) feeds
// it and applies its result; plan_test.go has one row per rule.
//
// Rules, in the order the plan applies them:
//
//  1. Nodes. This node is alive, ready since it became ready, on its announcing interfaces
//     (planConfig.Interfaces; a peer's come in its heartbeats), unless its data plane is down (planInput.Dataplane, dataplane.go): then it is not alive. A peer is
//     eligible when both detectors say it is alive and its last heartbeat says ready and not
//     leaving; its hold-down runs from when it became ready by its own clock (now - ReadyFor), or
//     from when this node first saw it eligible if it does not say (eligible-since memory). A peer
//     eligible now and not at the last plan has returned (Plan.Returned).
//  2. Elections. Services are grouped (election.Group) and each group elected with the node's
//     memory of the last winner as Current, so a node whose hold-down ends a moment before the
//     others see it does not grab an address from its announcer. The memory of the winners is
//     rebuilt from this plan's decisions. A group is elected among the nodes of the
//     L2Advertisements covering every one of its Services (groupAdvertisements): with
//     serviceSelectors, Services sharing an address may be covered by different advertisements, and
//     an address is announced through none that leaves out one of its Services.
//  3. Wanted addresses: those of the groups this node wins, and in spread mode (config.Service.Spread)
//     those of the groups whose spread set holds this node, with their ring (Plan.Rings, from which
//     the owner re-points the clients this node gains). Each is answered on the interfaces of this
//     node that the group's advertisements selecting it name, or on all of them when one names none
//     (Plan.On; MetalLB's ipAdvertisementFor): the owner moves an announced address when they change.
//  4. Announce (AnnounceElected, AnnounceSpread) each wanted address not announced yet, unless it
//     was given up to a duplicate announcer a moment ago and that node is still alive
//     (Plan.Yielded). A wanted address ends its handover.
//  5. An announced address not wanted any more lingers (LingerHandover) while the election says this
//     node may keep answering (election.Decision.Lingers: outranked but eligible, not in spread
//     mode), for the handover linger at most from when it started; the owner withdraws it earlier
//     when the winner claims it on the wire. Otherwise it is withdrawn: WithdrawGone (no Service
//     holds it), WithdrawDataplaneDown (this node cannot answer), WithdrawIneligible (this node may
//     not keep it), WithdrawLingerEnded (the winner did not claim it in time).
//  6. When a peer returned, every address this node keeps announcing, except spread and lingering
//     ones, is announced again (Plan.Regratuitous): after a partition, each side sees the other's
//     claim and the owner's conflict resolution settles it.
//  7. Wake is the earliest instant the plan may change by itself: a hold-down, linger or yield end.

// planConfig is what the plan knows of this node and its policy.
type planConfig struct {
	Self       string        // this node's name
	Interfaces []string      // this node's interfaces that can announce now (see interfaces.go)
	HoldDown   time.Duration // election.Input.HoldDown
}

// peerView is what the detectors say about one peer node at a reconcile.
type peerView struct {
	// Alive: the heartbeat detector, and the echo detector when it runs, say the peer is alive.
	Alive bool
	// Heard: a heartbeat of the peer was received; the fields below are its last one's.
	Heard      bool
	Ready      bool
	Leaving    bool
	ReadyFor   time.Duration
	Interfaces []string
}

// planInput is everything plan reads besides the memory and the time.
type planInput struct {
	Config planConfig
	Model  *config.Model
	// Peers are the detectors' views by node name (nodes other than this one; a node missing is
	// not alive).
	Peers map[string]peerView
	// ReadySince is when this node became ready.
	ReadySince time.Time
	// Dataplane says why this node's data plane cannot answer (dataplane.Why); empty when it can.
	Dataplane dataplaneReason
	// Announced are the addresses this node answers for now, with their Service's key.
	Announced map[netip.Addr]string
}

// memory is what a plan remembers for the next: plan reads one and returns the next in Plan.Memory,
// and never modifies the one it is given. Between plans, the owner's conflict resolution changes
// it too (a claim ends a handover, a yield starts, a disputed address's winner changes).
type memory struct {
	// Current maps an election key to the node that won its last election.
	Current map[netip.Addr]string
	// ElKeys maps each address to its election key, as of the last plan.
	ElKeys map[netip.Addr]netip.Addr
	// Handover holds the addresses lingering after a handover, with their ends.
	Handover *handovers
	// Yielded holds the addresses given up to a duplicate announcer.
	Yielded yields
	// Eligible maps each eligible peer to when this node first saw it eligible.
	Eligible map[string]time.Time
}

func newMemory(linger time.Duration) memory {
	return memory{Current: map[netip.Addr]string{}, ElKeys: map[netip.Addr]netip.Addr{}, Handover: newHandovers(linger),
		Yielded: yields{}, Eligible: map[string]time.Time{}}
}

// clone copies what plan changes in place (the handovers, yields and eligible peers); Current and
// ElKeys are rebuilt by plan.
func (m memory) clone() memory {
	h := newHandovers(m.Handover.linger)
	maps.Copy(h.until, m.Handover.until)
	return memory{Current: m.Current, ElKeys: m.ElKeys, Handover: h, Yielded: maps.Clone(m.Yielded), Eligible: maps.Clone(m.Eligible)}
}

// announceReason says why this node starts announcing an address.
type announceReason string

const (
	// AnnounceElected: this node won the address's election.
	AnnounceElected announceReason = "Elected"
	// AnnounceSpread: the address is in spread mode and this node is in its spread set.
	AnnounceSpread announceReason = "Spread"
)

// withdrawReason says why this node stops announcing an address.
type withdrawReason string

const (
	// WithdrawGone: no Service holds the address any more (or none is served).
	WithdrawGone withdrawReason = "Gone"
	// WithdrawIneligible: the address's election does not let this node keep answering (it is not
	// eligible, nobody is elected, or it is in spread mode without this node).
	WithdrawIneligible withdrawReason = "Ineligible"
	// WithdrawDataplaneDown: this node's data plane cannot answer (its responder's socket failed, or
	// its interface is gone or down): it is not alive in its own elections.
	WithdrawDataplaneDown withdrawReason = "DataplaneDown"
	// WithdrawLingerEnded: this node lingered after a handover and the winner did not claim the
	// address in time.
	WithdrawLingerEnded withdrawReason = "LingerEnded"
)

// lingerReason says why this node keeps answering for an address it lost.
type lingerReason string

// LingerHandover: lost to another node while still eligible: make-before-break.
const LingerHandover lingerReason = "Handover"

type announcement struct {
	Addr   netip.Addr
	Key    string // the Service's key
	Reason announceReason
}

type withdrawal struct {
	Addr   netip.Addr
	Key    string
	Reason withdrawReason
}

type linger struct {
	Addr   netip.Addr
	Key    string
	Reason lingerReason
	Until  time.Time // the end of the linger
	New    bool      // it starts with this plan
}

// Plan is what a reconcile does.
type Plan struct {
	// Nodes are the election's view of the nodes.
	Nodes []election.Node
	// Returned are the peers eligible now that were not at the last plan, sorted.
	Returned []string
	// Announce, Withdraw and Linger list the addresses whose state changes or stays lingering,
	// sorted by address. Addresses announced and still wanted are in none.
	Announce []announcement
	Withdraw []withdrawal
	Linger   []linger
	// Yielded are wanted addresses not announced because they were given up to a live duplicate
	// announcer a moment ago, sorted.
	Yielded []netip.Addr
	// Rings are the spread addresses this node answers for, with their rings: the owner installs
	// them and re-points the clients this node gains.
	Rings map[netip.Addr]election.Ring
	// Regratuitous are the addresses to announce again because a peer returned, sorted.
	Regratuitous []netip.Addr
	// On maps every address this node wants to answer for (announced already or in Announce) to the
	// interfaces it answers on, sorted: this node's interfaces (planConfig.Interfaces) that the
	// advertisements selecting it name, or all of them when one names none (MetalLB's
	// AllInterfaces). Lingering addresses keep the interfaces they have.
	On map[netip.Addr][]string
	// Wake is when the plan may change without any input changing (zero: never).
	Wake time.Time
	// Memory is the memory for the next plan.
	Memory memory
}

// plan decides what this node announces in layer 2 (see the rules above). It is pure: it reads its
// arguments, modifies none of them, and starts nothing.
func plan(in planInput, mem memory, now time.Time) Plan {
	cfg := in.Config
	mem = mem.clone()
	p := Plan{Rings: map[netip.Addr]election.Ring{}, On: map[netip.Addr][]string{}}

	// 1. Nodes.
	for _, n := range in.Model.Nodes {
		en := election.Node{Name: n.Name, Labels: n.Labels, Excluded: n.Excluded, NetworkUnavailable: n.NetworkUnavailable}
		if n.Name == cfg.Self {
			en.Alive, en.ReadySince, en.Interfaces = in.Dataplane == "", in.ReadySince, cfg.Interfaces
		} else if pv := in.Peers[n.Name]; pv.Heard && pv.Alive && pv.Ready && !pv.Leaving {
			first, seen := mem.Eligible[n.Name]
			if !seen {
				first = now
				mem.Eligible[n.Name] = now
				p.Returned = append(p.Returned, n.Name)
			}
			since := now.Add(-pv.ReadyFor)
			if pv.ReadyFor == 0 {
				since = first
			}
			en.Alive, en.ReadySince, en.Interfaces = true, since, pv.Interfaces
		} else {
			delete(mem.Eligible, n.Name)
		}
		p.Nodes = append(p.Nodes, en)
	}
	for _, n := range p.Nodes {
		if end := n.ReadySince.Add(cfg.HoldDown); n.Alive && end.After(now) && (p.Wake.IsZero() || end.Before(p.Wake)) {
			p.Wake = end
		}
	}

	// 2, 3. Elections and the wanted addresses.
	svcs := make([]election.Service, 0, len(in.Model.Services))
	byKey := make(map[string]*config.Service, len(in.Model.Services))
	for i := range in.Model.Services {
		s := &in.Model.Services[i]
		byKey[s.Key] = s
		svcs = append(svcs, election.Service{Key: s.Key, Addrs: s.Addrs, Local: s.Local, Endpoints: s.Endpoints})
	}
	want := map[netip.Addr]string{}
	lingers := map[netip.Addr]bool{} // addresses this node lost but may keep answering (Decision.Lingers)
	current := make(map[netip.Addr]string, len(mem.Current))
	elKeys := make(map[netip.Addr]netip.Addr, len(mem.ElKeys))
	on := map[netip.Addr][]string{}
	self := election.Node{Name: cfg.Self, Interfaces: cfg.Interfaces}
	if i := slices.IndexFunc(p.Nodes, func(n election.Node) bool { return n.Name == cfg.Self }); i >= 0 {
		self = p.Nodes[i]
	}
	for _, group := range election.Group(svcs) {
		first := byKey[group[0].Key]
		spread := first.Spread
		ads := groupAdvertisements(group, byKey)
		d := election.Elect(election.Input{Services: group, Advertisements: ads, HoldDown: cfg.HoldDown,
			Current: mem.Current[electionKey(group)], Spread: spread}, p.Nodes, now)
		ifs, _ := election.AnnounceInterfaces(ads, self)
		if ifs == nil {
			ifs = slices.Sorted(slices.Values(cfg.Interfaces))
		}
		for _, a := range d.Addrs {
			elKeys[a] = d.Key
			on[a] = ifs
			if !spread && d.Lingers(cfg.Self) {
				lingers[a] = true
			}
		}
		if d.Node != "" {
			current[d.Key] = d.Node
		}
		switch {
		case spread && d.Node != "" && slices.Contains(d.Spread, cfg.Self):
			ring := election.NewRing(d.Key, d.Spread)
			for _, a := range d.Addrs {
				want[a] = group[0].Key
				p.Rings[a] = ring
			}
		case !spread && d.Node == cfg.Self:
			for _, a := range d.Addrs {
				want[a] = group[0].Key
			}
		}
	}
	mem.Current, mem.ElKeys = current, elKeys
	for a, ifs := range on {
		if _, ok := want[a]; ok {
			p.On[a] = ifs
		}
	}

	// 4. Announce.
	alive := map[string]bool{}
	for _, n := range p.Nodes {
		alive[n.Name] = n.Alive && !n.ReadySince.IsZero()
	}
	for _, a := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		mem.Handover.forget(a)
		if _, ok := in.Announced[a]; ok {
			continue
		}
		if mem.Yielded.holds(a, now, func(n string) bool { return alive[n] }) {
			p.Yielded = append(p.Yielded, a)
			continue
		}
		r := AnnounceElected
		if _, ok := p.Rings[a]; ok {
			r = AnnounceSpread
		}
		p.Announce = append(p.Announce, announcement{Addr: a, Key: want[a], Reason: r})
	}

	// 5. Linger or withdraw what is no longer wanted.
	withdrawn := map[netip.Addr]bool{}
	for _, a := range slices.SortedFunc(maps.Keys(in.Announced), netip.Addr.Compare) {
		key := in.Announced[a]
		if _, ok := want[a]; ok {
			continue
		}
		was := mem.Handover.lingering(a)
		if mem.Handover.keep(a, lingers[a], now) {
			p.Linger = append(p.Linger, linger{Addr: a, Key: key, Reason: LingerHandover, Until: mem.Handover.until[a], New: !was})
			continue
		}
		r := WithdrawIneligible
		switch _, elected := elKeys[a]; {
		case !elected:
			r = WithdrawGone
		case in.Dataplane != "":
			r = WithdrawDataplaneDown
		case was && lingers[a]:
			r = WithdrawLingerEnded
		}
		mem.Handover.forget(a)
		withdrawn[a] = true
		p.Withdraw = append(p.Withdraw, withdrawal{Addr: a, Key: key, Reason: r})
	}

	// 7. Wake.
	for _, end := range []time.Time{mem.Handover.next(), mem.Yielded.next(now)} {
		if !end.IsZero() && (p.Wake.IsZero() || end.Before(p.Wake)) {
			p.Wake = end
		}
	}

	// 6. A peer returned: announce again what this node keeps.
	if len(p.Returned) > 0 {
		keep := map[netip.Addr]bool{}
		for a := range in.Announced {
			keep[a] = !withdrawn[a]
		}
		for _, an := range p.Announce {
			keep[an.Addr] = true
		}
		for a, k := range keep {
			_, spread := p.Rings[a]
			if k && !spread && !mem.Handover.lingering(a) {
				p.Regratuitous = append(p.Regratuitous, a)
			}
		}
		slices.SortFunc(p.Regratuitous, netip.Addr.Compare)
	}
	p.Memory = mem
	return p
}

// electionKey is the key Elect uses for a group (Decision.Key): the smallest primary address.
func electionKey(group []election.Service) netip.Addr {
	var k netip.Addr
	for _, svc := range group {
		for _, a := range svc.Addrs {
			if a.IsValid() {
				if !k.IsValid() || a.Less(k) {
					k = a
				}
				break
			}
		}
	}
	return k
}

// groupAdvertisements returns the L2Advertisements (config.Service.L2) covering every Service of a
// group, in the first Service's order. MetalLB elects each Service on its own, so Services sharing
// an address but covered by different advertisements (serviceSelectors) may be announced by two
// nodes (MetalLB #3025); ironlb elects the address once, among the nodes of the advertisements
// that cover all of them.
func groupAdvertisements(group []election.Service, byKey map[string]*config.Service) []election.Advertisement {
	ads := byKey[group[0].Key].L2
	if len(group) == 1 {
		return ads
	}
	out := make([]election.Advertisement, 0, len(ads))
	for _, a := range ads {
		all := true
		for _, s := range group[1:] {
			all = all && slices.ContainsFunc(byKey[s.Key].L2, func(b election.Advertisement) bool { return b.Name == a.Name })
		}
		if all {
			out = append(out, a)
		}
	}
	return out
}
