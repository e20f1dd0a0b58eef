package failover

import (
	"net/netip"
	"testing"

	"github.com/ironlb/ironlb/internal/election"
)

// TestAddressFamilies: the benchmark's address and pool follow the lab's node subnet: the seed's
// 172.18.255.x in the IPv4 lab, the same host parts of the /64 in the IPv6-only lab.
func TestAddressFamilies(t *testing.T) {
	nodes := []string{"myk8s-control-plane", "myk8s-worker", "myk8s-worker2", "myk8s-worker3"}
	for _, tc := range []struct {
		name     string
		subnet   string
		pool     string
		inSubnet string
	}{
		{"IPv4", "172.18.0.0/16", "172.18.255.200-172.18.255.250", "172.18.255.0/24"},
		{"IPv6", "fc00:f853:ccd:e793::/64", "fc00:f853:ccd:e793::ffc8-fc00:f853:ccd:e793::fffa", "fc00:f853:ccd:e793::ff00/120"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Address("myk8s-worker3", nodes, netip.MustParsePrefix(tc.subnet))
			if err != nil {
				t.Fatal(err)
			}
			if !netip.MustParsePrefix(tc.inSubnet).Contains(a) || election.Rank(a, nodes)[0] != "myk8s-worker3" {
				t.Errorf("Address = %s: want one of %s ranked to myk8s-worker3", a, tc.inSubnet)
			}
			if got := poolRange(a); got != tc.pool {
				t.Errorf("poolRange(%s) = %s, want %s", a, got, tc.pool)
			}
		})
	}
	if got, want := serviceURL(netip.MustParseAddr("fc00::1")), "http://[fc00::1]:80/"; got != want {
		t.Errorf("serviceURL = %s, want %s", got, want)
	}
}
