package election

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
)

// keyString is the text hashed for addr: the form MetalLB hashes (net.IP.String), so an IPv4-mapped
// IPv6 address is written as IPv4 and no zone is written.
func keyString(addr netip.Addr) string { return normAddr(addr).String() }

// normAddr unmaps IPv4-mapped IPv6 addresses and drops zones.
func normAddr(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// hash is a sha256 digest as four big-endian words, so that comparing hashes as numbers, word by
// word, is comparing the digests as bytes (MetalLB's bytes.Compare).
type hash [4]uint64

// score is MetalLB's election hash: sha256(node + "#" + address).
func score(node, key string) hash {
	var buf [128]byte
	b := append(buf[:0], node...)
	b = append(b, '#')
	b = append(b, key...)
	sum := sha256.Sum256(b)
	return hash{
		binary.BigEndian.Uint64(sum[0:]), binary.BigEndian.Uint64(sum[8:]),
		binary.BigEndian.Uint64(sum[16:]), binary.BigEndian.Uint64(sum[24:]),
	}
}

func (h hash) compare(o hash) int {
	for i := range h {
		if c := cmp.Compare(h[i], o[i]); c != 0 {
			return c
		}
	}
	return 0
}

type ranked struct {
	name  string
	score hash
}

func compareRanked(a, b ranked) int {
	if c := a.score.compare(b.score); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// Rank returns nodes in election order for addr: sorted by sha256(node + "#" + addr) compared as bytes,
// MetalLB's order, so each address prefers a different node and addresses spread evenly. Removing a
// node does not change the order of the others, so only the addresses it led move. Equal names stay
// next to each other. The input is not modified; the result is a new slice (nil for no nodes).
func Rank(addr netip.Addr, nodes []string) []string {
	if len(nodes) == 0 {
		return nil
	}
	key := keyString(addr)
	rs := make([]ranked, len(nodes))
	for i, n := range nodes {
		rs[i] = ranked{n, score(n, key)}
	}
	slices.SortFunc(rs, compareRanked)
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out
}
