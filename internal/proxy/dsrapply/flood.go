package dsrapply

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/proxy/nftapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// # The flood table: a dead entry node's frames, taken by their owner
//
// In layer 2 the client sends a DSR address's packets to its announcer's MAC. When the announcer
// loses power, the switch forgets the MAC of the port that went down (802.1D flushes a port's
// forwarding entries when its link goes down) and floods the frames still sent to it to every
// port, until the new announcer's gratuitous ARP moves the client: every node receives them, and
// every node's kernel drops them (their destination MAC is not its own: PACKET_OTHERHOST). A
// request sent into that window is lost, and a TCP client retransmits it no sooner than its
// minimum RTO (200 ms on Linux): the stall of a connection through a power cut was one request
// interval + 200 ms + the round trip (docs/dsr.md, "Where a failover's stall goes").
//
// Every node computes the same owner table (nftrules.PlanDSR), so exactly one node, the flow's
// owner, can take such a frame: its ingress hook (family netdev, before the IP stack) hashes the
// flow as the DSR table does (nftapply.FlowHash, the same expressions) and, when the bucket is its
// own, calls the frame its own (meta pkttype set host). The IP stack then serves it as an entry
// node that owns the flow does: DNAT to a local pod, no forward. The other nodes leave it alone, so
// nothing is duplicated, and no frame is forwarded. In nft's words, one rule per address and port:
//
//	table netdev ironlb-dsr-flood {
//		set mine-0 { typeof numgen random mod 2; elements = { buckets this node owns } }
//		chain eth0 {
//			type filter hook ingress device "eth0" priority -500
//			meta pkttype other meta protocol ip ip daddr 192.0.2.10 meta l4proto tcp th dport 80
//				jhash ip saddr . th sport . ip daddr . th dport . meta l4proto mod 251 seed S @mine-0
//				meta pkttype set host
//		}
//	}
//
// The chains hook the interfaces that carry this node's InternalIP (as LocalMACs finds them):
// frames to an address announced on another interface only are not taken. A frame that reaches
// every node is either flooded (the destination's port is gone or not learned yet) or sent to a
// MAC no node has; a host on the segment that sends such frames gets its own flows served by their
// owner, which it could have by sending them to the address, and nothing of anyone else's, and one
// node answers each frame, so nothing is amplified. While the nodes' tables differ (an
// EndpointSlice change seen at different times) a flooded frame can be taken by two nodes or by
// none, as a forwarded one can meet a stale table.

// FloodTableName is the netdev table of flooded frames to DSR addresses (see above).
const FloodTableName = "ironlb-dsr-flood"

// floodPriority is the ingress chains' priority: before anything else at ingress.
const floodPriority = -500

// PACKET_HOST and PACKET_OTHERHOST (linux/if_packet.h).
const (
	packetHost      = 0
	packetOtherHost = 3
)

// OwnBuckets returns, for each port of plan, the buckets whose owner is plan.Self, ascending (nil
// when it owns none): the buckets whose flooded frames this node takes.
func OwnBuckets(plan *nftrules.DSRPlan) [][]uint32 {
	out := make([][]uint32, len(plan.Ports))
	for i := range plan.Ports {
		p := &plan.Ports[i]
		self := slices.Index(p.Nodes, plan.Self)
		if self < 0 || len(p.Local) == 0 {
			continue
		}
		for b, o := range p.Buckets {
			if o == self {
				out[i] = append(out[i], uint32(b))
			}
		}
	}
	return out
}

// floodTable is the netdev table.
func floodTable() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyNetdev, Name: FloodTableName}
}

// writeFloodTable replaces the flood table (one batch: the old one deleted, the new one made)
// with plan's rules on the interfaces links; with no port this node owns buckets of, or no link,
// it only deletes it.
func writeFloodTable(c *nftables.Conn, plan *nftrules.DSRPlan, links []string) error {
	t := c.AddTable(floodTable()) // so that the delete finds one
	c.DelTable(t)
	own := OwnBuckets(plan)
	if len(links) == 0 || !slices.ContainsFunc(own, func(b []uint32) bool { return len(b) > 0 }) {
		return c.Flush()
	}
	t = c.AddTable(floodTable())
	prio := nftables.ChainPriority(floodPriority)
	policy := nftables.ChainPolicyAccept
	var chains []*nftables.Chain
	for _, l := range links {
		chains = append(chains, c.AddChain(&nftables.Chain{Table: t, Name: l, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookIngress, Priority: &prio, Device: l, Policy: &policy}))
	}
	for i := range plan.Ports {
		if len(own[i]) == 0 {
			continue
		}
		p := &plan.Ports[i]
		proto, ok := l4protos[p.Protocol]
		if !ok {
			continue
		}
		// Buckets are jhash results, in host order (KeyByteOrder: nft lists them as numbers).
		set := &nftables.Set{Table: t, Name: fmt.Sprintf("mine-%d", i), KeyType: nftables.TypeInteger, KeyByteOrder: binaryutil.NativeEndian}
		elems := make([]nftables.SetElement, 0, len(own[i]))
		for _, b := range own[i] {
			elems = append(elems, nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(b)})
		}
		if err := c.AddSet(set, elems); err != nil {
			return fmt.Errorf("set %s: %w", set.Name, err)
		}
		for _, a := range p.Addrs {
			if !a.Is4() {
				continue
			}
			for _, ch := range chains {
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: floodRule(a, proto, p.Port, uint32(len(p.Buckets)), p.Seed, set.Name)})
			}
		}
	}
	return c.Flush()
}

var l4protos = map[nftrules.Protocol]byte{nftrules.TCP: unix.IPPROTO_TCP, nftrules.UDP: unix.IPPROTO_UDP, nftrules.SCTP: unix.IPPROTO_SCTP}

// floodRule is the rule of one address and port (see the top of this file).
func floodRule(addr netip.Addr, proto byte, port uint16, mod, seed uint32, set string) []expr.Any {
	a4 := addr.As4()
	be := binary.BigEndian.AppendUint16(nil, port)
	out := []expr.Any{
		// meta pkttype other: a unicast frame to another host's MAC
		&expr.Meta{Key: expr.MetaKeyPKTTYPE, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{packetOtherHost}},
		// meta protocol ip
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, unix.ETH_P_IP)},
		// ip daddr ADDR
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a4[:]},
		// meta l4proto PROTO th dport PORT
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be},
	}
	// the DSR table's flow hash, in this node's buckets
	out = append(out, nftapply.FlowHash(mod, seed)...)
	return append(out,
		&expr.Lookup{SourceRegister: 1, SetName: set},
		// meta pkttype set host
		&expr.Immediate{Register: 1, Data: []byte{packetHost}},
		&expr.Meta{Key: expr.MetaKeyPKTTYPE, SourceRegister: true, Register: 1},
	)
}

// floodLinks returns the names of this namespace's interfaces that carry one of ips and have an
// Ethernet address, sorted: those whose ingress the flood table hooks.
func floodLinks(rt Routing, ips []netip.Addr) ([]string, error) {
	addrs, err := rt.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	var out []string
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP)
		if !ok || !slices.Contains(ips, ip.Unmap()) {
			continue
		}
		l, err := rt.LinkByIndex(ad.LinkIndex)
		if err != nil {
			return nil, fmt.Errorf("link %d of %s: %w", ad.LinkIndex, ip, err)
		}
		if len(l.Attrs().HardwareAddr) == 6 {
			out = append(out, l.Attrs().Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
