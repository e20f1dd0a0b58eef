package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/speaker/bgp"
)

// TestMetalLBBGPMetricsLoopback runs BGP mode's adapter against a GoBGP router on the loopback
// (as package bgp's loopback tests do; no root needed) and checks that MetalLB's BGP metrics follow
// the real session: up with the prefix advertised and UPDATEs counted, then down when the router
// drops the neighbor. MetalLBBGPSessionDown reads metallb_bgp_session_up.
func TestMetalLBBGPMetricsLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("a loopback BGP session takes seconds")
	}
	// The router: AS 64512 on 127.0.0.1, a free port, passive towards 127.0.0.11.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	router := server.NewBgpServer()
	served := make(chan struct{})
	go func() { defer close(served); router.Serve() }()
	t.Cleanup(func() { router.Stop(); <-served })
	ctx := context.Background()
	if err := router.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 64512, RouterId: "127.0.0.1",
		ListenPort: int32(port), ListenAddresses: []string{"127.0.0.1"}}}); err != nil {
		t.Fatal(err)
	}
	if err := router.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{Conf: &api.PeerConf{NeighborAddress: "127.0.0.11", PeerAsn: 64512},
		Transport: &api.Transport{PassiveMode: true}}}); err != nil {
		t.Fatal(err)
	}

	// BGP mode, as startBGP builds it, without the apiserver.
	peers := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	b := &bgpMode{node: "node-a", log: slog.New(slog.DiscardHandler), rec: record.NewFakeRecorder(100), peers: peers,
		sessions: map[netip.Addr]*sessionTrack{}, stopping: make(chan struct{}),
		sessStatus: newStatusWriter(nil, sessionStateKind, testNS, "node-a", slog.New(slog.DiscardHandler))}
	b.sp = bgp.New(bgp.Config{OnState: func(st bgp.SessionStatus) { b.onState(testNS, st) }})
	reg := prometheus.NewRegistry()
	b.m = newBGPMetrics(reg, b.sp)
	st, errs := bgpconfig.Build(bgpconfig.Input{
		Node:            bgpconfig.Node{Name: "node-a"},
		DefaultRouterID: netip.MustParseAddr("10.0.0.10"),
		Peers: []v1beta2.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64512,
			Address: "127.0.0.1", Port: uint16(port), SrcAddress: "127.0.0.11", ConnectTime: &metav1.Duration{Duration: 2 * time.Second}}}},
		Advertisements: []v1beta1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "all"}}},
		Pools:          []bgpconfig.Pool{{Name: "default"}},
		Services: []bgpconfig.Service{{Key: "ns/one", Pool: "default", Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")},
			Endpoints: []election.Endpoint{{Node: "node-a", Ready: true}}}},
	})
	if len(errs) != 0 {
		t.Fatalf("config errors: %v", errs)
	}
	b.sp.Set(st)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.sp.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	mp := fmt.Sprintf("127.0.0.1:%d", port)
	// 30 s: GoBGP waits out its connect-retry timer on a loaded machine.
	waitGathered(t, reg, 30*time.Second, "metallb_bgp_session_up", mp, func(v float64) bool { return v == 1 })
	waitGathered(t, reg, 10*time.Second, "metallb_bgp_announced_prefixes_total", mp, func(v float64) bool { return v == 1 })
	waitGathered(t, reg, 10*time.Second, "metallb_bgp_updates_total", mp, func(v float64) bool { return v >= 1 })
	waitGathered(t, reg, 10*time.Second, "metallb_bgp_opens_sent", mp, func(v float64) bool { return v >= 1 })
	waitGathered(t, reg, 10*time.Second, "metallb_bgp_keepalives_received", mp, func(v float64) bool { return v >= 1 })
	if v := testutil.ToFloat64(b.m.mlbBGP.PendingPrefixes.WithLabelValues(mp)); v != 1 {
		t.Errorf("metallb_bgp_pending_prefixes_total = %v, want 1", v)
	}

	// The router drops the neighbor (a Cease NOTIFICATION): the session is down.
	if err := router.DeletePeer(ctx, &api.DeletePeerRequest{Address: "127.0.0.11"}); err != nil {
		t.Fatal(err)
	}
	waitGathered(t, reg, 30*time.Second, "metallb_bgp_session_up", mp, func(v float64) bool { return v == 0 })
}

// waitGathered waits until the series of name with label peer=peer satisfies ok.
func waitGathered(t *testing.T, reg prometheus.Gatherer, timeout time.Duration, name, peer string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, found := gathered(t, reg, name, peer)
		if found && ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s{peer=%q} = %v (present %v) after %v", name, peer, v, found, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func gathered(t *testing.T, reg prometheus.Gatherer, name, peer string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "peer" && lp.GetValue() == peer {
					if m.Gauge != nil {
						return m.GetGauge().GetValue(), true
					}
					return m.GetCounter().GetValue(), true
				}
			}
		}
	}
	return 0, false
}
