package speaker

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// neighbours is the kernel's neighbour table on the announcing interface (netlinkNeighbours; a fake
// in tests): which hardware address each on-link IP address answers from. The owner learns the peer
// nodes' MACs there, from their InternalIPs, to tell which node answers when two claim an address;
// never from heartbeats, which anyone could forge. Heartbeats and echo probes to each peer keep its
// entry fresh. A peer that is not on-link (routed) has no entry and its MAC stays unknown.
type neighbours interface {
	Neighbours() (map[netip.Addr]net.HardwareAddr, error)
}

// netlinkNeighbours reads the neighbour table of one interface.
type netlinkNeighbours struct{ index int }

// Neighbours returns the resolved entries (reachable, stale, delay, probe, permanent) of the interface.
func (n netlinkNeighbours) Neighbours() (map[netip.Addr]net.HardwareAddr, error) {
	list, err := netlink.NeighList(n.index, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]net.HardwareAddr, len(list))
	for _, e := range list {
		if e.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED|netlink.NUD_NOARP) != 0 || e.State == netlink.NUD_NONE || len(e.HardwareAddr) == 0 {
			continue
		}
		if a, ok := netip.AddrFromSlice(e.IP); ok {
			out[a.Unmap()] = e.HardwareAddr
		}
	}
	return out, nil
}
