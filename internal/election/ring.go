package election

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// Ring spreads the clients of one address over a set of nodes by rendezvous (highest random weight)
// hashing: each client goes to the node with the highest hash of (address, node, client). It is the
// spread mode's answer to "whose MAC does this client get", in the spirit of Linux bonding's
// balance-alb receive load balancing.
//
// Every speaker building a Ring from the same address and node set computes the same owner for every
// client: the hash is fixed (FNV-1a and a 64-bit finaliser), not seeded per process. When a node leaves
// the set, only the clients it owned move, each to the node that was its second choice; when a node
// joins, only the clients it now wins move to it, about 1/N of them.
//
// The zero Ring has no nodes. A Ring is immutable and safe for concurrent use.
type Ring struct {
	nodes []string // sorted, without duplicates
	seeds []uint64 // per node: hash of (address, node)
}

// NewRing returns the Ring of addr over nodes. Empty names and duplicates are dropped and the order of
// nodes does not matter.
func NewRing(addr netip.Addr, nodes []string) Ring {
	ns := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n != "" {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	ns = slices.Compact(ns)
	key := keyString(addr)
	seeds := make([]uint64, len(ns))
	for i, n := range ns {
		h := fnvString(fnvOffset, key)
		h = fnvByte(h, '#')
		h = fnvString(h, n)
		seeds[i] = fmix64(h)
	}
	return Ring{nodes: ns, seeds: seeds}
}

// Nodes returns the Ring's nodes, sorted. The caller must not modify the result.
func (r Ring) Nodes() []string { return r.nodes }

// Len returns the number of nodes.
func (r Ring) Len() int { return len(r.nodes) }

// Owner returns the node that answers client, or "" if the Ring has no nodes. IPv4-mapped IPv6 clients
// count as their IPv4 address; zones are ignored.
func (r Ring) Owner(client netip.Addr) string {
	if len(r.nodes) == 0 {
		return ""
	}
	c := clientHash(client)
	best, bestScore := 0, uint64(0)
	for i, s := range r.seeds {
		// Ties (probability 2^-64 per pair) go to the first name in order.
		if sc := fmix64(s ^ c); i == 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return r.nodes[best]
}

func clientHash(a netip.Addr) uint64 {
	b := normAddr(a).As16()
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	return fmix64(hi ^ fmix64(lo^0x9e3779b97f4a7c15))
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

// fmix64 is MurmurHash3's 64-bit finaliser: a bijection in which every input bit affects every output
// bit.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}
