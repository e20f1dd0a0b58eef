package speaker

import (
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/election"
)

// AnnotationSpread opts a Service into spread mode: instead of one node answering every client's ARP
// request or neighbor solicitation for its address, each eligible node answers the clients that a
// consistent hash of the client's address gives it (election.Ring), so the address's inbound traffic
// enters through every eligible node, as Linux bonding's balance-alb spreads receive load.
const AnnotationSpread = config.AnnotationSpread

// maxClients bounds the clients remembered per spread address (for re-pointing them on a change).
const maxClients = 65536

type client struct {
	ip  netip.Addr
	mac net.HardwareAddr
}

// spreadState holds the rings of the spread addresses for the responders' goroutines (AnswerFunc)
// and remembers which clients asked, so that when an address's ring changes, the clients this node
// now owns can be re-pointed at once by unicast gratuitous ARP / neighbor advertisement.
type spreadState struct {
	self string

	mu      sync.Mutex // guards the following fields
	mac     net.HardwareAddr
	rings   map[netip.Addr]election.Ring
	clients map[netip.Addr]map[netip.Addr]net.HardwareAddr
}

func newSpreadState(self string, mac net.HardwareAddr) *spreadState {
	return &spreadState{self: self, mac: mac, rings: map[netip.Addr]election.Ring{}, clients: map[netip.Addr]map[netip.Addr]net.HardwareAddr{}}
}

// setMAC changes this node's MAC, the answer to the clients it owns (the interface came back with
// another MAC).
func (sp *spreadState) setMAC(mac net.HardwareAddr) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.mac = slices.Clone(mac)
}

// answer is the responders' AnswerFunc: addresses not in spread mode are answered with this node's
// MAC; spread addresses only to the clients this node owns, and never by broadcast (refresh, or a
// duplicate address probe from 0.0.0.0).
func (sp *spreadState) answer(ip, clientIP netip.Addr, clientMAC net.HardwareAddr) (net.HardwareAddr, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	ring, ok := sp.rings[ip]
	if !ok {
		return sp.mac, true
	}
	if !clientIP.IsValid() || clientIP.IsUnspecified() || len(clientMAC) == 0 {
		return nil, false
	}
	cs := sp.clients[ip]
	if cs == nil {
		cs = map[netip.Addr]net.HardwareAddr{}
		sp.clients[ip] = cs
	}
	if _, seen := cs[clientIP]; seen || len(cs) < maxClients {
		cs[clientIP] = slices.Clone(clientMAC)
	}
	if ring.Owner(clientIP) == sp.self {
		return sp.mac, true
	}
	return nil, false
}

// isSpread reports whether ip is announced in spread mode.
func (sp *spreadState) isSpread(ip netip.Addr) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	_, ok := sp.rings[ip]
	return ok
}

// set installs the rings of the spread addresses this node takes part in and returns, per address,
// the remembered clients that this node owns now but did not own before (to re-point them).
func (sp *spreadState) set(rings map[netip.Addr]election.Ring) map[netip.Addr][]client {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	out := map[netip.Addr][]client{}
	for ip, ring := range rings {
		old, had := sp.rings[ip]
		for cip, cmac := range sp.clients[ip] {
			if ring.Owner(cip) == sp.self && (!had || old.Owner(cip) != sp.self) {
				out[ip] = append(out[ip], client{cip, cmac})
			}
		}
	}
	for ip := range sp.rings {
		if _, ok := rings[ip]; !ok {
			delete(sp.clients, ip)
		}
	}
	sp.rings = rings
	return out
}

// answerSecondary is the AnswerFunc of a responder on a secondary interface (owner_links.go): every
// client is answered with that interface's MAC, but spread addresses never (spread mode answers on
// the InternalIP's interface only).
func (sp *spreadState) answerSecondary(mac net.HardwareAddr) func(ip, clientIP netip.Addr, clientMAC net.HardwareAddr) (net.HardwareAddr, bool) {
	mac = slices.Clone(mac)
	return func(ip, _ netip.Addr, _ net.HardwareAddr) (net.HardwareAddr, bool) {
		if sp.isSpread(ip) {
			return nil, false
		}
		return mac, true
	}
}
