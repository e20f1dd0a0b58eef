package speaker

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/liveness"
)

func TestLayer2Eligibility(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x12, 0x00, 0x03}
	for _, tc := range []struct {
		name  string
		ifi   net.Interface
		noARP bool
		want  layer2Reason
	}{
		{"Ethernet (veth, bridge port)", net.Interface{Name: "eth0", Flags: net.FlagUp | net.FlagBroadcast | net.FlagMulticast, HardwareAddr: mac}, false, ""},
		{"dummy: a MAC but NOARP", net.Interface{Name: "dummy0", Flags: net.FlagUp | net.FlagBroadcast, HardwareAddr: mac}, true, Layer2NoARP},
		{"loopback (lo: a zero MAC, NOARP)", net.Interface{Name: "lo", Flags: net.FlagUp | net.FlagLoopback, HardwareAddr: make(net.HardwareAddr, 6)}, true, Layer2Loopback},
		{"point-to-point tunnel (tun, wireguard)", net.Interface{Name: "wg0", Flags: net.FlagUp | net.FlagPointToPoint}, false, Layer2PointToPoint},
		{"no hardware address (tun)", net.Interface{Name: "dummy0", Flags: net.FlagUp | net.FlagBroadcast}, false, Layer2NoHardwareAddress},
		{"all-zero hardware address", net.Interface{Name: "x0", Flags: net.FlagUp | net.FlagBroadcast, HardwareAddr: make(net.HardwareAddr, 6)}, false, Layer2NoHardwareAddress},
		{"not Ethernet (InfiniBand's 20 bytes)", net.Interface{Name: "ib0", Flags: net.FlagUp | net.FlagBroadcast, HardwareAddr: make(net.HardwareAddr, 20)}, false, Layer2NoHardwareAddress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := layer2Eligibility(tc.ifi, tc.noARP); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestOwnerNoLayer2: a node whose address is on an interface that cannot answer (here lo) runs no
// responder; elected alone, it announces nothing and writes no ServiceL2Status, its heartbeats say it
// is not ready (its peers elect without it), and /readyz says ready, BGP only, with the reason.
func TestOwnerNoLayer2(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	lo := &net.Interface{Index: 1, Name: "lo", Flags: net.FlagUp | net.FlagLoopback, HardwareAddr: make(net.HardwareAddr, 6)}
	why := layer2Eligibility(*lo, true)
	e.s = newSpeaker(Config{Node: e.self, HoldDown: 5 * time.Second}, deps{Log: slog.New(slog.DiscardHandler), Interface: lo,
		Heartbeats: e.hb, Status: e.status, Recorder: e.rec, Objects: e.objs, Metrics: e.m, Clock: e.clock, Neighbours: e.neigh, NoLayer2: why})
	e.s.setReady()
	e.clock.Advance(time.Hour)
	e.s.reconcile(context.Background())
	if len(e.s.announced) != 0 {
		t.Errorf("announced %v, want nothing", e.s.announced)
	}
	if len(e.status.want) != 0 {
		t.Errorf("status %v, want none", e.status.want)
	}
	if hb := e.s.heartbeat(); hb.Ready {
		t.Error("heartbeat says ready: peers would elect this node")
	}
	ok, msg := e.s.readiness()
	if !ok || !strings.Contains(msg, "BGP only") || !strings.Contains(msg, string(Layer2Loopback)) {
		t.Errorf("readiness %v %q, want ready, BGP only, with the reason", ok, msg)
	}
	// The peer, on a MAC-carrying interface, elects without this node once it is up.
	e.peerUp()
	e.s.reconcile(context.Background())
	if len(e.s.announced) != 0 {
		t.Errorf("announced %v with the peer up, want nothing", e.s.announced)
	}
}

// TestHeartbeatPeersIPv6: IPv6-only nodes are heartbeat and echo peers at their IPv6 InternalIP.
func TestHeartbeatPeersIPv6(t *testing.T) {
	objs := emptyStores()
	for n, a := range map[string]string{"a": "fc00:f853:ccd:e793::2", "b": "fc00:f853:ccd:e793::3", "c": "172.18.0.4"} {
		if err := objs.nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: a}}}}); err != nil {
			t.Fatal(err)
		}
	}
	m := config.BuildModel(objs.modelInput(""))
	got := heartbeatPeers(m, "a", 7946)
	want := []liveness.Peer{{Node: "b", Addr: netip.MustParseAddrPort("[fc00:f853:ccd:e793::3]:7946")}, {Node: "c", Addr: netip.MustParseAddrPort("172.18.0.4:7946")}}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
}
