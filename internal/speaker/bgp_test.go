package speaker

import (
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/speaker/bgp"
)

// TestOnState feeds onState a session's history and checks the metrics, the BGPSessionState it
// records and the events on the BGPPeer.
func TestOnState(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	peers := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	if err := peers.GetStore().Add(uobj("metallb.io/v1beta2", "BGPPeer", "r1", map[string]any{})); err != nil {
		t.Fatal(err)
	}
	stopping := make(chan struct{})
	b := &bgpMode{node: "n1", log: slog.New(slog.DiscardHandler), rec: rec, peers: peers, sessions: map[netip.Addr]*sessionTrack{},
		sessStatus: newStatusWriter(nil, sessionStateKind, testNS, "n1", slog.New(slog.DiscardHandler)), stopping: stopping}
	reg := prometheus.NewRegistry()
	b.m = newBGPMetrics(reg, bgp.New(bgp.Config{}))
	peer := netip.MustParseAddr("192.0.2.1")
	st := func(bgpStatus, bfdStatus string, reason bgp.DownReason, msg string) bgp.SessionStatus {
		return bgp.SessionStatus{Name: "r1", Peer: peer, Port: 179, BGPStatus: bgpStatus, BFDStatus: bfdStatus, Reason: reason, Message: msg, Paths: 2}
	}
	for _, s := range []bgp.SessionStatus{
		st("Idle", "down", bgp.Connecting, ""),
		st("Active", "down", bgp.ConnectFailed, "i/o timeout"),
		st("Connect", "down", bgp.ConnectFailed, "i/o timeout"), // same failure: no second event
		st("Established", "down", "", ""),
		st("Established", "up", "", ""),
		st("Idle", "down", bgp.BFDDown, "BFD down: control detection time expired"),
		st("Established", "up", "", ""),
	} {
		b.onState(testNS, s)
	}
	var events []string
	for len(rec.Events) > 0 {
		e := <-rec.Events
		events = append(events, e[:strings.Index(e, " BGP session")])
	}
	want := []string{"Warning ConnectFailed", "Normal SessionEstablished", "Warning BFDDown", "Normal SessionEstablished"}
	if strings.Join(events, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v", events, want)
	}
	if v := testutil.ToFloat64(b.m.sessionUp.WithLabelValues("192.0.2.1", "r1")); v != 1 {
		t.Errorf("session_up %v", v)
	}
	if v := testutil.ToFloat64(b.m.bfdUp.WithLabelValues("192.0.2.1")); v != 1 {
		t.Errorf("bfd_session_up %v", v)
	}
	// MetalLB's: the session under "address:port", BFD under the address and vrf default, with
	// FRR's up and down events (up twice, down once).
	checkMetrics(t, reg, `
# HELP metallb_bfd_session_down_events Number of BFD session down events
# TYPE metallb_bfd_session_down_events counter
metallb_bfd_session_down_events{peer="192.0.2.1",vrf="default"} 1
# HELP metallb_bfd_session_up BFD session state (1 is up, 0 is down)
# TYPE metallb_bfd_session_up gauge
metallb_bfd_session_up{peer="192.0.2.1",vrf="default"} 1
# HELP metallb_bfd_session_up_events Number of BFD session up events
# TYPE metallb_bfd_session_up_events counter
metallb_bfd_session_up_events{peer="192.0.2.1",vrf="default"} 2
# HELP metallb_bgp_pending_prefixes_total Number of prefixes that should be advertised on the BGP session
# TYPE metallb_bgp_pending_prefixes_total gauge
metallb_bgp_pending_prefixes_total{peer="192.0.2.1:179"} 2
# HELP metallb_bgp_session_up BGP session state (1 is up, 0 is down)
# TYPE metallb_bgp_session_up gauge
metallb_bgp_session_up{peer="192.0.2.1:179"} 1
`)
	if up, down := testutil.ToFloat64(b.m.bfdChanges.WithLabelValues("192.0.2.1", "up")), testutil.ToFloat64(b.m.bfdChanges.WithLabelValues("192.0.2.1", "down")); up != 2 || down != 1 {
		t.Errorf("bfd changes up %v down %v, want 2 and 1", up, down)
	}
	if got := b.sessStatus.latest.Latest()["192.0.2.1"]; got["bgpStatus"] != "Established" || got["bfdStatus"] != "up" || got["node"] != "n1" {
		t.Errorf("BGPSessionState status %v", got)
	}

	// Down: MetalLB's session gauge follows (its BGPSessionDown alert's input).
	b.onState(testNS, st("Active", "down", bgp.HoldTimerExpired, "hold timer expired"))
	if v := testutil.ToFloat64(b.m.mlbBGP.SessionUp.WithLabelValues("192.0.2.1:179")); v != 0 {
		t.Errorf("metallb_bgp_session_up %v after the session went down, want 0", v)
	}
	if v := testutil.ToFloat64(b.m.mlbBFD.SessionUp.WithLabelValues("192.0.2.1", "default")); v != 0 {
		t.Errorf("metallb_bfd_session_up %v after BFD went down, want 0", v)
	}
	b.onState(testNS, st("Established", "up", "", ""))
	for len(rec.Events) > 0 {
		<-rec.Events
	}

	// A flapping session: a burst of events, then the rate limit.
	for range 10 {
		b.onState(testNS, st("Idle", "down", bgp.HoldTimerExpired, "hold timer expired"))
		b.onState(testNS, st("Established", "up", "", ""))
	}
	if n := len(rec.Events); n != 0 {
		t.Errorf("%d events while flapping past the burst, want 0", n)
	}
	// Shutting down: no event for the sessions closed on purpose; removal drops metrics and status.
	close(stopping)
	b.onState(testNS, st("Idle", "N/A", "", ""))
	if n := len(rec.Events); n != 0 {
		t.Errorf("%d events on shutdown", n)
	}
	removed := st("Idle", "N/A", "", "")
	removed.Removed = true
	b.onState(testNS, removed)
	if n := testutil.CollectAndCount(b.m.sessionUp); n != 0 {
		t.Errorf("%d session_up series after removal", n)
	}
	for _, name := range []string{"metallb_bgp_session_up", "metallb_bgp_pending_prefixes_total", "metallb_bfd_session_up", "metallb_bfd_session_up_events"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
			t.Errorf("%d %s series after removal (%v)", n, name, err)
		}
	}
	if _, ok := b.sessStatus.latest.Latest()["192.0.2.1"]; ok {
		t.Error("BGPSessionState still wanted after removal")
	}
}

// TestWarnUnsupported: a BGPPeer or BFDProfile stored without the webhook and setting a field
// ironlb does not implement gets one Warning event UnsupportedField (not one per reconcile), and
// another when the field changes.
func TestWarnUnsupported(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	inf := func(objs ...*unstructured.Unstructured) cache.SharedIndexInformer {
		i := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
		for _, o := range objs {
			if err := i.GetStore().Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return i
	}
	b := &bgpMode{node: "n1", log: slog.New(slog.DiscardHandler), rec: rec,
		peers:    inf(uobj("metallb.io/v1beta2", "BGPPeer", "r1", map[string]any{})),
		profiles: inf(uobj("metallb.io/v1beta1", "BFDProfile", "fast", map[string]any{}), uobj("metallb.io/v1beta1", "BFDProfile", "plain", map[string]any{}))}
	yes := true
	ttl := uint32(254)
	in := bgpconfig.Input{
		Peers: []v1beta2.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: v1beta2.BGPPeerSpec{DualStackAddressFamily: true}}},
		BFDProfiles: []v1beta1.BFDProfile{
			{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Spec: v1beta1.BFDProfileSpec{EchoMode: &yes}},
			{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
		},
	}
	events := func() []string {
		var out []string
		for len(rec.Events) > 0 {
			out = append(out, <-rec.Events)
		}
		slices.Sort(out)
		return out
	}
	b.warnUnsupported(testNS, in)
	b.warnUnsupported(testNS, in)
	got := events()
	if len(got) != 2 || !strings.Contains(got[0], "Warning UnsupportedField node n1: BFDProfile fast: spec.echoMode: not supported") ||
		!strings.Contains(got[1], "Warning UnsupportedField node n1: BGPPeer r1: spec.dualStackAddressFamily: not supported") {
		t.Errorf("events %q, want one for BFDProfile fast and one for BGPPeer r1", got)
	}
	in.BFDProfiles[0].Spec.MinimumTTL, in.BFDProfiles[0].Spec.EchoMode = &ttl, nil
	b.warnUnsupported(testNS, in)
	if got := events(); len(got) != 1 || !strings.Contains(got[0], "BFDProfile fast: spec.minimumTtl") {
		t.Errorf("after the field changed: events %q, want one about minimumTtl", got)
	}
}

// checkMetrics compares the metrics of reg that want names with want, in the text format.
func checkMetrics(t *testing.T, reg prometheus.Gatherer, want string) {
	t.Helper()
	var names []string
	for _, l := range strings.Split(want, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[1] == "TYPE" {
			names = append(names, f[2])
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// TestSetAnnouncing: metallb_speaker_announced's bgp series follow the Services advertised from this
// node, and the ones withdrawn go.
func TestSetAnnouncing(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := &bgpMode{node: "n1", m: &bgpMetrics{mlbAnnounced: newMetrics(reg).mlbAnnounced}}
	b.setAnnouncing(map[string][]string{"default/a": {"198.51.100.1", "2001:db8::1"}, "default/b": {"198.51.100.2"}})
	b.setAnnouncing(map[string][]string{"default/a": {"198.51.100.1"}})
	checkMetrics(t, reg, `
# HELP metallb_speaker_announced Services being announced from this node. This is desired state, it does not guarantee that the routing protocols have converged.
# TYPE metallb_speaker_announced gauge
metallb_speaker_announced{ip="198.51.100.1",node="n1",protocol="bgp",service="default/a"} 1
`)
	if got := peerLabel(netip.MustParseAddr("2001:db8::1"), 179); got != "2001:db8::1:179" {
		t.Errorf("peerLabel = %q, want MetalLB's 2001:db8::1:179", got)
	}
}
