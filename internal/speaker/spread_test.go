package speaker

import (
	"net"
	"net/netip"
	"testing"

	"github.com/ironlb/ironlb/internal/election"
)

func TestSpreadState(t *testing.T) {
	vip := netip.MustParseAddr("172.18.255.210")
	plain := netip.MustParseAddr("172.18.255.211")
	nodes := []string{"a", "b", "c"}
	mac := func(i int) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, byte(i)} }
	states := map[string]*spreadState{}
	for i, n := range nodes {
		states[n] = newSpreadState(n, mac(i+1))
		if got := states[n].set(map[netip.Addr]election.Ring{vip: election.NewRing(vip, nodes)}); len(got) != 0 {
			t.Fatalf("nothing to re-point before any client asked, got %v", got)
		}
	}
	// Every client gets exactly one answer among the three nodes, from the ring's owner.
	owners := map[string]int{}
	for c := 1; c <= 60; c++ {
		client := netip.AddrFrom4([4]byte{172, 18, 0, byte(100 + c)})
		answered := 0
		for _, n := range nodes {
			if _, ok := states[n].answer(vip, client, mac(100+c)); ok {
				answered++
				owners[n]++
				if want := election.NewRing(vip, nodes).Owner(client); want != n {
					t.Errorf("client %s answered by %s, ring owner %s", client, n, want)
				}
			}
		}
		if answered != 1 {
			t.Fatalf("client %s answered %d times", client, answered)
		}
	}
	for _, n := range nodes {
		if owners[n] == 0 {
			t.Errorf("node %s owns none of 60 clients: %v", n, owners)
		}
	}
	// An address not in spread mode is answered to everyone; spread ones never by broadcast refresh.
	if _, ok := states["a"].answer(plain, netip.MustParseAddr("172.18.0.101"), mac(9)); !ok {
		t.Error("plain address not answered")
	}
	if _, ok := states["a"].answer(vip, netip.Addr{}, nil); ok {
		t.Error("spread address answered to the zero client (broadcast refresh)")
	}
	if !states["a"].isSpread(vip) || states["a"].isSpread(plain) {
		t.Error("isSpread")
	}
	// c leaves: a and b re-point exactly c's former clients, each to its new owner.
	moved := 0
	for _, n := range []string{"a", "b"} {
		got := states[n].set(map[netip.Addr]election.Ring{vip: election.NewRing(vip, []string{"a", "b"})})
		for _, cl := range got[vip] {
			if election.NewRing(vip, nodes).Owner(cl.ip) != "c" {
				t.Errorf("%s re-points %s, which c did not own", n, cl.ip)
			}
			if election.NewRing(vip, []string{"a", "b"}).Owner(cl.ip) != n {
				t.Errorf("%s re-points %s, which it does not own now", n, cl.ip)
			}
			moved++
		}
	}
	if moved != owners["c"] {
		t.Errorf("re-pointed %d clients, c owned %d", moved, owners["c"])
	}
}
