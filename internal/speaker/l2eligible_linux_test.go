package speaker

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestLayer2EligibilityKernel: in a throwaway namespace, the node address found on lo, on a tun
// device (point-to-point, no MAC: what WireGuard looks like) and on a veth is judged as the speaker
// judges it at start-up (interfaceWith, then layer2Eligibility with IFF_NOARP from netlink).
func TestLayer2EligibilityKernel(t *testing.T) {
	netnstest.Require(t, "ip")
	ns := fmt.Sprintf("ilbt-l2e-%d", os.Getpid())
	netnstest.Add(t, ns)
	must := func(args ...string) {
		t.Helper()
		netnstest.Run(t, ns, append([]string{"ip"}, args...)...)
	}
	must("link", "set", "lo", "up")
	must("addr", "add", "2001:db8:100::1/128", "dev", "lo", "nodad") // a routed fabric's node address on lo
	must("link", "add", "la", "type", "veth", "peer", "name", "lb")
	must("addr", "add", "2001:db8:1::1/64", "dev", "la", "nodad")
	must("link", "set", "la", "up")
	rows := []struct {
		name string
		addr string
		want layer2Reason
	}{
		{"veth", "2001:db8:1::1", ""},
		{"loopback", "2001:db8:100::1", Layer2Loopback},
		{"loopback, IPv4", "127.0.0.1", Layer2Loopback},
	}
	// A tun device, where the kernel has them (ip tuntap): point-to-point, no MAC.
	if _, err := netnstest.Output(ns, "ip", "tuntap", "add", "dev", "tun0", "mode", "tun"); err == nil {
		must("addr", "add", "2001:db8:200::1/128", "dev", "tun0", "nodad")
		rows = append(rows, struct {
			name string
			addr string
			want layer2Reason
		}{"tun", "2001:db8:200::1", Layer2PointToPoint})
	} else {
		t.Log("no tun device here: that row is skipped")
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			netnstest.In(t, ns, func() {
				ifi, err := interfaceWith(netip.MustParseAddr(r.addr))
				if err != nil {
					t.Fatal(err)
				}
				if got := layer2Eligibility(*ifi, noARP(ifi.Index)); got != r.want {
					t.Errorf("%s on %s (flags %v, mac %q): %q, want %q", r.addr, ifi.Name, ifi.Flags, ifi.HardwareAddr, got, r.want)
				}
			})
		})
	}
}
