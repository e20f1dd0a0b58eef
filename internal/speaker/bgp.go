package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/metallbmetrics"
	"github.com/ironlb/ironlb/internal/speaker/bfd"
	"github.com/ironlb/ironlb/internal/speaker/bgp"
)

// BGP mode runs beside layer 2 in every speaker, as in MetalLB: sessions exist only on the nodes a
// BGPPeer selects. The run loop builds the node's bgpconfig.State whenever the model was rebuilt (an object
// changed, or the periodic resync) and hands it to the GoBGP adapter (package bgp), whose own goroutine applies it; the adapter reports session
// changes through onState, which writes BGPSessionState objects, events and metrics.

// Session events are limited per BGPPeer to a burst of sessionEventBurst, then one per
// sessionEventEvery: a flapping session must not flood the API with events.
const (
	sessionEventBurst = 4
	sessionEventEvery = 30 * time.Second
)

// bgpMode is the speaker's BGP side.
type bgpMode struct {
	node string
	log  *slog.Logger
	rec  record.EventRecorder
	sp   *bgp.Speaker
	m    *bgpMetrics

	// informers of the configuration namespace, by ConfigError kind
	peers, ads, profiles, communities, secrets cache.SharedIndexInformer
	svcStatus, sessStatus                      *statusWriter

	// Owned by the speaker's run goroutine (reconcile).
	lv       bgpconfig.LastValid
	reported map[bgpconfig.ObjectRef]string // config errors last reported, by object
	// unsupported are the fields ironlb does not implement last warned about, by object (objects
	// stored without the admission webhook, which refuses them).
	unsupported map[bgpconfig.ObjectRef]string
	synced      bool // sessStatus had its first sync
	// announcing is the metallb_speaker_announced series of protocol bgp set now: service key ->
	// addresses.
	announcing map[string][]string

	// Owned by the bgp.Speaker's Run goroutine (onState).
	sessions map[netip.Addr]*sessionTrack
	// stopping is closed when the speaker stops: sessions then go down on purpose, which raises
	// no event.
	stopping <-chan struct{}
}

// sessionTrack is what onState remembers of one session, to see transitions.
type sessionTrack struct {
	last    bgp.SessionStatus
	warned  string // reason and message of the last Warning, "" after Established
	limiter eventLimiter
}

type bgpMetrics struct {
	sessionUp    *prometheus.GaugeVec
	bfdUp        *prometheus.GaugeVec
	bfdChanges   *prometheus.CounterVec
	configErrors *prometheus.GaugeVec
	// MetalLB's (package metallbmetrics): the BGP session gauges, labelled "address:port", and FRR
	// mode's BFD metrics.
	mlbBGP *metallbmetrics.BGP
	mlbBFD *metallbmetrics.BFD
	// mlbAnnounced is the speaker's metallb_speaker_announced (layer 2 shares it); nil in tests that
	// build bgpMode alone.
	mlbAnnounced *prometheus.GaugeVec
}

func newBGPMetrics(reg prometheus.Registerer, sp *bgp.Speaker) *bgpMetrics {
	m := &bgpMetrics{
		sessionUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ironlb_speaker_bgp_session_up",
			Help: "1 when the BGP session with the peer (address, BGPPeer name) is Established, else 0."}, []string{"peer", "name"}),
		bfdUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ironlb_speaker_bfd_session_up",
			Help: "1 when the BFD session with the peer is up, else 0; only for sessions with a BFD profile."}, []string{"peer"}),
		bfdChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_speaker_bfd_state_changes_total",
			Help: "BFD session state changes, by peer and new state."}, []string{"peer", "state"}),
		configErrors: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ironlb_speaker_config_errors",
			Help: "BGP configuration objects whose current version is invalid, by kind (the last valid version is used, if any)."}, []string{"kind"}),
	}
	for _, k := range []string{"BGPPeer", "BGPAdvertisement", "BFDProfile", "Community"} {
		m.configErrors.WithLabelValues(k).Set(0)
	}
	reg.MustRegister(m.sessionUp, m.bfdUp, m.bfdChanges, m.configErrors, &gobgpCollector{sp: sp})
	m.mlbBGP = metallbmetrics.NewBGP(reg)
	m.mlbBFD = metallbmetrics.NewBFD(reg)
	return m
}

// peerLabel is MetalLB's peer label of the BGP metrics: "address:port", written as MetalLB writes it
// (fmt "%s:%d": an IPv6 address without brackets).
func peerLabel(a netip.Addr, port uint16) string {
	return fmt.Sprintf("%s:%d", a, port)
}

// gobgpCollector reads GoBGP's counters at scrape time: the adapter's goroutine owns GoBGP, and a
// scrape that cannot get an answer within a second reports nothing rather than waiting.
type gobgpCollector struct{ sp *bgp.Speaker }

var (
	announcedDesc = prometheus.NewDesc("ironlb_speaker_bgp_announced_prefixes",
		"Prefixes advertised to the peer now (0 unless the session is Established).", []string{"peer"}, nil)
	updatesDesc = prometheus.NewDesc("ironlb_speaker_bgp_updates_sent_total",
		"BGP UPDATE messages sent to the peer (restarts from 0 when the session is re-created).", []string{"peer"}, nil)
)

func (c *gobgpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- announcedDesc; ch <- updatesDesc }

func (c *gobgpCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cs, err := c.sp.Counters(ctx)
	if err != nil {
		return
	}
	for _, pc := range cs {
		peer := pc.Peer.String()
		ch <- prometheus.MustNewConstMetric(announcedDesc, prometheus.GaugeValue, float64(pc.Advertised), peer)
		ch <- prometheus.MustNewConstMetric(updatesDesc, prometheus.CounterValue, float64(pc.UpdatesSent), peer)
		// MetalLB's: native mode's two, and FRR mode's message counters.
		mp := peerLabel(pc.Peer, pc.Port)
		ch <- prometheus.MustNewConstMetric(metallbmetrics.BGPPrefixesDesc, prometheus.GaugeValue, float64(pc.Advertised), mp)
		ch <- prometheus.MustNewConstMetric(metallbmetrics.BGPUpdatesDesc, prometheus.CounterValue, float64(pc.UpdatesSent), mp)
		for c, v := range map[metallbmetrics.BGPCounter]uint64{
			metallbmetrics.OpensSent: pc.OpensSent, metallbmetrics.OpensReceived: pc.OpensReceived,
			metallbmetrics.NotificationsSent: pc.NotificationsSent, metallbmetrics.UpdatesReceived: pc.UpdatesReceived,
			metallbmetrics.KeepalivesSent: pc.KeepalivesSent, metallbmetrics.KeepalivesReceived: pc.KeepalivesReceived,
			metallbmetrics.RouteRefreshSent: pc.RouteRefreshSent, metallbmetrics.TotalSent: pc.TotalSent,
			metallbmetrics.TotalReceived: pc.TotalReceived,
		} {
			ch <- prometheus.MustNewConstMetric(metallbmetrics.BGPCounterDescs[c], prometheus.CounterValue, float64(v), mp, metallbmetrics.DefaultVRF)
		}
	}
}

// informer returns the informer holding objects of a ConfigError kind.
func (b *bgpMode) informer(kind string) cache.SharedIndexInformer {
	switch kind {
	case "BGPPeer":
		return b.peers
	case "BGPAdvertisement":
		return b.ads
	case "BFDProfile":
		return b.profiles
	case "Community":
		return b.communities
	}
	return nil
}

// object returns an object of the configuration namespace from its informer, for events.
func (b *bgpMode) object(kind, ns, name string) runtime.Object {
	inf := b.informer(kind)
	if inf == nil {
		return nil
	}
	o, ok, _ := inf.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	return o.(runtime.Object)
}

// bgpObjects gathers BGP mode's objects from the informers, beside the model both modes share.
func (s *speaker) bgpObjects(m *config.Model) bgpObjects {
	return bgpObjects{model: m, node: s.cfg.Node,
		peers: s.bgp.peers.GetStore().List(), ads: s.bgp.ads.GetStore().List(), profiles: s.bgp.profiles.GetStore().List(),
		communities: s.bgp.communities.GetStore().List(), secrets: s.bgp.secrets.GetStore().List()}
}

// reconcile builds this node's BGP state, keeping invalid objects at their last valid version, and
// hands it to the adapter; it reports configuration errors and records the ServiceBGPStatuses. It
// returns false when an object of BGP mode did not decode or is invalid (the configuration is stale,
// in MetalLB's terms). Called from the speaker's run goroutine.
func (b *bgpMode) reconcile(ns string, o bgpObjects) bool {
	in, derrs := bgpInput(o)
	for _, err := range derrs {
		b.log.Warn("bgp configuration object left out", "err", err)
	}
	in.Node.Name = b.node
	st, errs, held := b.lv.Build(in)
	b.sp.Set(st)
	b.reportErrors(ns, errs, held)
	b.warnUnsupported(ns, in)

	status := map[string]map[string]any{}
	announcing := map[string][]string{}
	addrs := map[string][]netip.Addr{}
	for _, svc := range in.Services {
		addrs[svc.Key] = svc.Addrs
	}
	for _, svc := range st.Services {
		if svc.Reason == bgpconfig.Announced {
			status[svc.Key] = bgpStatus(svc.Key, b.node, svc.Peers)
			for _, a := range addrs[svc.Key] {
				announcing[svc.Key] = append(announcing[svc.Key], a.String())
			}
		}
	}
	b.setAnnouncing(announcing)
	b.svcStatus.Set(status)
	if !b.synced {
		// Remove BGPSessionStates left by an earlier run for sessions that are gone; the others
		// are rewritten as the adapter reports them.
		b.synced = true
		b.sessStatus.latest.Poke()
	}
	return len(derrs) == 0 && len(errs) == 0
}

// setAnnouncing sets metallb_speaker_announced's bgp series to now, deleting those that went.
func (b *bgpMode) setAnnouncing(now map[string][]string) {
	if b.m.mlbAnnounced == nil {
		return
	}
	for key, ips := range b.announcing {
		for _, ip := range ips {
			if !slices.Contains(now[key], ip) {
				b.m.mlbAnnounced.DeleteLabelValues(key, "bgp", b.node, ip)
			}
		}
	}
	for key, ips := range now {
		for _, ip := range ips {
			b.m.mlbAnnounced.WithLabelValues(key, "bgp", b.node, ip).Set(1)
		}
	}
	b.announcing = now
}

// reportErrors logs each configuration error and puts a Warning event on its object, once per
// distinct error, and sets the config errors gauge.
func (b *bgpMode) reportErrors(ns string, errs []*bgpconfig.ConfigError, held []bgpconfig.ObjectRef) {
	isHeld := map[bgpconfig.ObjectRef]bool{}
	for _, r := range held {
		isHeld[r] = true
	}
	counts := map[string]int{"BGPPeer": 0, "BGPAdvertisement": 0, "BFDProfile": 0, "Community": 0}
	now := map[bgpconfig.ObjectRef]string{}
	for _, e := range errs {
		ref := bgpconfig.ObjectRef{Kind: e.Kind, Name: e.Name}
		if _, dup := now[ref]; dup {
			now[ref] += "; " + e.Error()
			continue
		}
		counts[e.Kind]++
		now[ref] = e.Error()
	}
	for ref, text := range now {
		if b.reported[ref] == text {
			continue
		}
		what := "left out (never valid)"
		if isHeld[ref] {
			what = "its last valid version stays in use"
		}
		b.log.Warn("invalid bgp configuration: "+what, "kind", ref.Kind, "name", ref.Name, "err", text)
		if obj := b.object(ref.Kind, ns, ref.Name); obj != nil {
			b.rec.Eventf(obj, corev1.EventTypeWarning, "InvalidConfiguration", "node %s: %s; %s", b.node, text, what)
		}
	}
	for ref := range b.reported {
		if _, still := now[ref]; !still {
			b.log.Info("bgp configuration valid again", "kind", ref.Kind, "name", ref.Name)
		}
	}
	b.reported = now
	for k, n := range counts {
		b.m.configErrors.WithLabelValues(k).Set(float64(n))
	}
}

// warnUnsupported warns, once per object and field, about BGPPeers and BFDProfiles setting a
// MetalLB field ironlb does not implement (config.UnsupportedPeerFields, UnsupportedBFDFields): the
// webhook refuses them, but an object stored while it was off still reaches the speakers, which
// run it without that field. A log line and a Warning event UnsupportedField on the object.
func (b *bgpMode) warnUnsupported(ns string, in bgpconfig.Input) {
	now := map[bgpconfig.ObjectRef]string{}
	for i := range in.Peers {
		if err := config.UnsupportedPeerFields(&in.Peers[i]); err != nil {
			now[bgpconfig.ObjectRef{Kind: "BGPPeer", Name: in.Peers[i].Name}] = err.Error()
		}
	}
	for i := range in.BFDProfiles {
		if err := config.UnsupportedBFDFields(&in.BFDProfiles[i]); err != nil {
			now[bgpconfig.ObjectRef{Kind: "BFDProfile", Name: in.BFDProfiles[i].Name}] = err.Error()
		}
	}
	for ref, text := range now {
		if b.unsupported[ref] == text {
			continue
		}
		b.log.Warn("field not implemented by ironlb: the object is used without it", "kind", ref.Kind, "name", ref.Name, "err", text)
		if obj := b.object(ref.Kind, ns, ref.Name); obj != nil {
			b.rec.Eventf(obj, corev1.EventTypeWarning, "UnsupportedField", "node %s: %s; the object is used without it", b.node, text)
		}
	}
	b.unsupported = now
}

// onState is the adapter's OnState: it runs on the adapter's goroutine and must not block. It
// records the session's BGPSessionState, updates the metrics, and raises events on the BGPPeer for
// the transitions that matter.
func (b *bgpMode) onState(ns string, st bgp.SessionStatus) {
	peer := st.Peer.String()
	tr := b.sessions[st.Peer]
	mp := peerLabel(st.Peer, st.Port)
	if st.Removed {
		delete(b.sessions, st.Peer)
		b.sessStatus.Put(peer, nil)
		b.m.sessionUp.DeleteLabelValues(peer, st.Name)
		b.m.bfdUp.DeleteLabelValues(peer)
		if tr != nil && tr.last.Port != st.Port {
			b.deleteMetalLBSession(peerLabel(st.Peer, tr.last.Port), "")
		}
		b.deleteMetalLBSession(mp, peer)
		return
	}
	if tr == nil {
		tr = &sessionTrack{limiter: eventLimiter{burst: sessionEventBurst, every: sessionEventEvery}}
		b.sessions[st.Peer] = tr
	}
	prev := tr.last
	tr.last = st
	if prev.Name != "" && prev.Name != st.Name {
		b.m.sessionUp.DeleteLabelValues(peer, prev.Name)
	}
	if prev.Name != "" && prev.Port != st.Port {
		b.deleteMetalLBSession(peerLabel(st.Peer, prev.Port), "")
	}
	b.m.mlbBGP.SessionUp.WithLabelValues(mp).Set(b2f(st.Established()))
	b.m.mlbBGP.PendingPrefixes.WithLabelValues(mp).Set(float64(st.Paths))
	b.sessStatus.Put(peer, map[string]any{"bgpStatus": st.BGPStatus, "bfdStatus": st.BFDStatus, "node": b.node, "peer": peer, "vrf": ""})
	b.m.sessionUp.WithLabelValues(peer, st.Name).Set(b2f(st.Established()))
	if st.BFDStatus == bgp.NoBFD || st.BFDStatus == "" {
		b.m.bfdUp.DeleteLabelValues(peer)
		b.m.mlbBFD.SessionUp.DeleteLabelValues(peer, metallbmetrics.DefaultVRF)
	} else {
		b.m.bfdUp.WithLabelValues(peer).Set(b2f(st.BFDStatus == "up"))
		b.m.mlbBFD.SessionUp.WithLabelValues(peer, metallbmetrics.DefaultVRF).Set(b2f(st.BFDStatus == "up"))
		b.m.mlbBFD.SessionUpEvents.WithLabelValues(peer, metallbmetrics.DefaultVRF)
		b.m.mlbBFD.SessionDownEvents.WithLabelValues(peer, metallbmetrics.DefaultVRF)
		// A change of state, not BFD being configured (from "N/A" or nothing).
		if st.BFDStatus != prev.BFDStatus && prev.BFDStatus != bgp.NoBFD && prev.BFDStatus != "" {
			b.m.bfdChanges.WithLabelValues(peer, st.BFDStatus).Inc()
		}
		// FRR counts a session coming up, and one going down from up.
		switch {
		case st.BFDStatus == "up" && prev.BFDStatus != "up":
			b.m.mlbBFD.SessionUpEvents.WithLabelValues(peer, metallbmetrics.DefaultVRF).Inc()
		case st.BFDStatus != "up" && prev.BFDStatus == "up":
			b.m.mlbBFD.SessionDownEvents.WithLabelValues(peer, metallbmetrics.DefaultVRF).Inc()
		}
	}

	ev, ok := sessionEvent(prev, st)
	if !ok {
		return
	}
	select {
	case <-b.stopping:
		return
	default:
	}
	// Once per distinct failure: a session that keeps failing the same way raises one event
	// until it is established again.
	key := string(st.Reason) + ": " + st.Message
	switch {
	case !ev.warning:
		tr.warned = ""
	case !ev.down && key == tr.warned:
		return
	default:
		tr.warned = key
	}
	b.log.Log(context.Background(), ev.level(), "bgp session "+ev.reason, "peer", peer, "name", st.Name, "bgpStatus", st.BGPStatus,
		"reason", st.Reason, "message", st.Message)
	suppressed, allow := tr.limiter.allow(time.Now())
	if !allow {
		return
	}
	obj := b.object("BGPPeer", ns, st.Name)
	if obj == nil {
		return
	}
	msg := ev.message(b.node, st)
	if suppressed > 0 {
		msg += fmt.Sprintf(" (%d earlier session events not reported: rate limit)", suppressed)
	}
	typ := corev1.EventTypeNormal
	if ev.warning {
		typ = corev1.EventTypeWarning
	}
	b.rec.Event(obj, typ, ev.reason, msg)
}

// deleteMetalLBSession drops MetalLB's series of a session: the BGP ones under mp ("address:port")
// and, unless bfdPeer is "", the BFD ones under bfdPeer.
func (b *bgpMode) deleteMetalLBSession(mp, bfdPeer string) {
	b.m.mlbBGP.SessionUp.DeleteLabelValues(mp)
	b.m.mlbBGP.PendingPrefixes.DeleteLabelValues(mp)
	if bfdPeer != "" {
		for _, v := range []*prometheus.MetricVec{b.m.mlbBFD.SessionUp.MetricVec, b.m.mlbBFD.SessionUpEvents.MetricVec, b.m.mlbBFD.SessionDownEvents.MetricVec} {
			v.DeleteLabelValues(bfdPeer, metallbmetrics.DefaultVRF)
		}
	}
}

// sessionEventKind is an event to raise for a session transition.
type sessionEventKind struct {
	reason  string
	warning bool
	down    bool // left Established
}

// sessionEvent decides which transition from prev to st deserves an event: becoming Established
// (Normal, SessionEstablished), leaving it (Warning, with the DownReason as the event's reason), or
// a new reason for not connecting (Warning: ConnectFailed, BadPeerAS, NotificationReceived, ...).
// Connecting, and repeats of the same reason and message, raise none.
func sessionEvent(prev, st bgp.SessionStatus) (sessionEventKind, bool) {
	switch {
	case st.Established() && !prev.Established():
		return sessionEventKind{reason: "SessionEstablished"}, true
	case prev.Established() && !st.Established():
		reason := string(st.Reason)
		if reason == "" || st.Reason == bgp.Connecting {
			reason = string(bgp.Other)
		}
		return sessionEventKind{reason: reason, warning: true, down: true}, true
	case !st.Established() && st.Reason != "" && st.Reason != bgp.Connecting &&
		(st.Reason != prev.Reason || st.Message != prev.Message):
		return sessionEventKind{reason: string(st.Reason), warning: true}, true
	}
	return sessionEventKind{}, false
}

func (k sessionEventKind) level() slog.Level {
	if k.warning {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

func (k sessionEventKind) message(node string, st bgp.SessionStatus) string {
	switch {
	case !k.warning:
		return fmt.Sprintf("BGP session with %s established from node %s", st.Peer, node)
	case k.down:
		return fmt.Sprintf("BGP session with %s from node %s is no longer established: %s: %s", st.Peer, node, st.Reason, st.Message)
	}
	return fmt.Sprintf("BGP session with %s from node %s is not established: %s: %s", st.Peer, node, st.Reason, st.Message)
}

// eventLimiter is a token bucket: burst events at once, then one per every.
type eventLimiter struct {
	burst      int
	every      time.Duration
	tokens     float64
	last       time.Time
	suppressed int
}

// allow reports whether an event may be raised at now, and how many were refused since the last
// one allowed.
func (l *eventLimiter) allow(now time.Time) (suppressed int, ok bool) {
	if l.last.IsZero() {
		l.tokens = float64(l.burst)
	} else {
		l.tokens = min(float64(l.burst), l.tokens+float64(now.Sub(l.last))/float64(l.every))
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return 0, false
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return suppressed, true
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// bgpStopTimeout bounds how long Run waits, after the layer-2 handover, for GoBGP to close its
// sessions.
const bgpStopTimeout = time.Second

// startBGP opens the BFD socket, builds BGP mode's informers (on the configuration namespace) and
// status writers, and starts the GoBGP adapter until ctx ends. The returned channel is closed when
// the adapter has stopped and the BFD socket is closed.
func (s *speaker) startBGP(ctx, ioctx context.Context, dyn dynamic.Interface, cs kubernetes.Interface, reg prometheus.Registerer) <-chan struct{} {
	cfg := s.cfg
	log := s.log
	b := &bgpMode{node: cfg.Node, log: log, stopping: ctx.Done(), rec: s.rec, reported: map[bgpconfig.ObjectRef]string{}, unsupported: map[bgpconfig.ObjectRef]string{}, sessions: map[netip.Addr]*sessionTrack{},
		svcStatus:  newStatusWriter(dyn, bgpStatusKind, cfg.Namespace, cfg.Node, log),
		sessStatus: newStatusWriter(dyn, sessionStateKind, cfg.Namespace, cfg.Node, log)}
	dinf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cfg.Namespace, nil)
	b.peers = dinf.ForResource(v1beta2.BGPPeerGVR).Informer()
	b.ads = dinf.ForResource(v1beta1.BGPAdvertisementGVR).Informer()
	b.profiles = dinf.ForResource(v1beta1.BFDProfileGVR).Informer()
	b.communities = dinf.ForResource(v1beta1.CommunityGVR).Informer()
	// The Secrets of the configuration namespace, which passwordSecret names: every type, so that a
	// Secret of the wrong type is reported as such rather than as missing, but the cache keeps only
	// what BGP needs (passwordSecretOnly). Its RBAC already lets the speaker list them all
	// (docs/security.md); the webhook's Secret lives in another namespace.
	sinf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cfg.Namespace))
	b.secrets = sinf.Core().V1().Secrets().Informer()
	if err := b.secrets.SetTransform(passwordSecretOnly); err != nil {
		log.Error("secrets informer", "err", err) // only when already started, which it is not
	}
	dinf.Start(ctx.Done())
	sinf.Start(ctx.Done())

	bcfg := bgp.Config{Log: log, BFDRealtime: true, OnState: func(st bgp.SessionStatus) { b.onState(cfg.Namespace, st) }}
	// BFD on every node, as MetalLB runs bfdd: sessions with a BFD profile need it, and a node
	// without it (another BFD daemon holds the port) still serves BGP, reporting BFD "N/A".
	conn, err := bfd.Listen(bfd.ListenConfig{})
	if err != nil {
		log.Warn("bfd unavailable: sessions with a bfd profile run without bfd", "err", err)
	} else {
		bcfg.BFD = conn
	}
	b.sp = bgp.New(bcfg)
	b.m = newBGPMetrics(reg, b.sp)
	b.m.mlbAnnounced = s.m.mlbAnnounced
	s.bgp = b
	go b.svcStatus.Run(ioctx)
	go b.sessStatus.Run(ioctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.sp.Run(ctx); err != nil {
			log.Error("bgp stopped", "err", err)
		}
		if conn != nil {
			_ = conn.Close()
		}
	}()
	return done
}

// passwordSecretOnly is the Secrets informer's transform: it keeps a Secret's name, namespace,
// resource version and type, and the "password" key of a basic-auth Secret, and drops everything
// else (other keys, other Secrets' data, annotations such as last-applied-configuration), so that
// the speaker holds no Secret content it does not use.
func passwordSecretOnly(o any) (any, error) {
	sec, ok := o.(*corev1.Secret)
	if !ok {
		return o, nil
	}
	out := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sec.Name, Namespace: sec.Namespace, UID: sec.UID, ResourceVersion: sec.ResourceVersion},
		Type: sec.Type}
	if p, has := sec.Data[corev1.BasicAuthPasswordKey]; has && sec.Type == corev1.SecretTypeBasicAuth {
		out.Data = map[string][]byte{corev1.BasicAuthPasswordKey: p}
	}
	return out, nil
}
