package speaker

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

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
	b.m = newBGPMetrics(prometheus.NewRegistry(), bgp.New(bgp.Config{}))
	peer := netip.MustParseAddr("192.0.2.1")
	st := func(bgpStatus, bfdStatus string, reason bgp.DownReason, msg string) bgp.SessionStatus {
		return bgp.SessionStatus{Name: "r1", Peer: peer, BGPStatus: bgpStatus, BFDStatus: bfdStatus, Reason: reason, Message: msg}
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
	if up, down := testutil.ToFloat64(b.m.bfdChanges.WithLabelValues("192.0.2.1", "up")), testutil.ToFloat64(b.m.bfdChanges.WithLabelValues("192.0.2.1", "down")); up != 2 || down != 1 {
		t.Errorf("bfd changes up %v down %v, want 2 and 1", up, down)
	}
	if got := b.sessStatus.want["192.0.2.1"]; got["bgpStatus"] != "Established" || got["bfdStatus"] != "up" || got["node"] != "n1" {
		t.Errorf("BGPSessionState status %v", got)
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
	if _, ok := b.sessStatus.want["192.0.2.1"]; ok {
		t.Error("BGPSessionState still wanted after removal")
	}
}
