package agent

import (
	"errors"
	"fmt"
	"net/netip"
)

// IPAM hands out Pod addresses from a node's pod CIDR, lowest free first. The first address after the
// network address is the node-side gateway of every Pod veth; the last is never used (broadcast in IPv4).
// Not safe for concurrent use.
type IPAM struct {
	prefix netip.Prefix
	used   map[netip.Addr]bool
}

// ErrExhausted is returned when the CIDR has no free address.
var ErrExhausted = errors.New("pod CIDR exhausted")

// NewIPAM returns an allocator over prefix.
func NewIPAM(prefix netip.Prefix) *IPAM {
	return &IPAM{prefix: prefix.Masked(), used: map[netip.Addr]bool{}}
}

// Gateway is the node side of every Pod's veth.
func (m *IPAM) Gateway() netip.Addr { return m.prefix.Addr().Next() }

// Prefix is the CIDR served.
func (m *IPAM) Prefix() netip.Prefix { return m.prefix }

// Allocate returns the lowest free address.
func (m *IPAM) Allocate() (netip.Addr, error) { return m.AllocateFor(netip.Addr{}, nil) }

// AllocateFor returns prev when it is a free pod address of the CIDR (a Pod restarted on its node, by
// a power cut or an agent restart, keeps its address, as a CNI's on-disk reservations keep it), else
// the lowest free address that held does not claim. held is the addresses other Pods on the node
// still list in their status: the agent forgets its allocations when it stops, and handing such an
// address to another Pod would let every proxy DNAT that Pod's Service traffic to the wrong Pod
// (refused) until the old Pod's status is written again.
func (m *IPAM) AllocateFor(prev netip.Addr, held func(netip.Addr) bool) (netip.Addr, error) {
	if prev.IsValid() && m.usable(prev) && !m.used[prev] {
		m.used[prev] = true
		return prev, nil
	}
	for a, i := m.Gateway().Next(), 0; i < 1<<16 && m.usable(a); a, i = a.Next(), i+1 {
		if !m.used[a] && (held == nil || !held(a)) {
			m.used[a] = true
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: %s (%d in use)", ErrExhausted, m.prefix, len(m.used))
}

// usable reports whether a is a pod address of the CIDR: not the network address, the gateway or
// (IPv4) the broadcast address.
func (m *IPAM) usable(a netip.Addr) bool {
	if !m.prefix.Contains(a) || a == m.prefix.Addr() || a == m.Gateway() {
		return false
	}
	return !a.Is4() || m.prefix.Contains(a.Next())
}

// Release frees an address; releasing a free one is a no-op.
func (m *IPAM) Release(a netip.Addr) { delete(m.used, a) }
