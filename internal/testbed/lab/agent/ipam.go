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
func (m *IPAM) Allocate() (netip.Addr, error) {
	a := m.Gateway().Next()
	for i := 0; i < 1<<16 && m.prefix.Contains(a); i++ {
		next := a.Next()
		if !m.prefix.Contains(next) && a.Is4() { // broadcast
			break
		}
		if !m.used[a] {
			m.used[a] = true
			return a, nil
		}
		a = next
	}
	return netip.Addr{}, fmt.Errorf("%w: %s (%d in use)", ErrExhausted, m.prefix, len(m.used))
}

// Release frees an address; releasing a free one is a no-op.
func (m *IPAM) Release(a netip.Addr) { delete(m.used, a) }
