package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/metallbmetrics"
	"github.com/ironlb/ironlb/internal/speaker/layer2"
)

// The owner: one goroutine (run) owns the layer-2 state. It feeds the plan (plan.go) with the model
// and the detectors' view, and applies the result through its dependencies, each behind a small
// interface so that owner_test.go drives it over fakes. Informer handlers, the detectors and the
// responders' conflict reports only kick it.

// responder answers ARP or NDP for the addresses announced (*layer2.Responder).
type responder interface {
	Announce(ip netip.Addr) error
	Withdraw(ip netip.Addr) error
	Gratuitous(ip netip.Addr) error
	GratuitousTo(ip, clientIP netip.Addr, clientMAC, mac net.HardwareAddr) error
}

// heartbeats is the heartbeat detector (*liveness.Monitor).
type heartbeats interface {
	SetPeers(peers []liveness.Peer)
	Alive(node string) (bool, time.Time)
	Info(node string) (liveness.Heartbeat, bool)
	SendNow()
}

// echoes is the echo detector (*liveness.Echoer).
type echoes interface {
	SetPeers(peers []liveness.Peer)
	Up(node string) (bool, time.Time)
}

// statusSink records the ServiceL2Statuses this node reports (*statusWriter); it never blocks.
type statusSink interface {
	Set(want map[string]map[string]any)
}

// clock is the time the owner reads, and its timers (realClock; a fake in tests).
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) timer
}

// timer is a timer of a clock.
type timer interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }

// deps are the speaker's I/O dependencies. ARP is required; NDP, Echo, Kube and Neighbours may be nil
// (no IPv6 address on the interface, echo detector off, no strict-ARP watch, no peer MACs known);
// Clock nil is the real clock.
type deps struct {
	Log        *slog.Logger
	Interface  *net.Interface // the announcing interface
	ARP, NDP   responder
	Heartbeats heartbeats
	Echo       echoes
	Status     statusSink
	Recorder   record.EventRecorder
	Objects    stores
	Metrics    *metrics
	Clock      clock
	Kube       kubernetes.Interface // for the strict-ARP watch
	// Reopen reopens the responders' sockets by name (responderARP, responderNDP) when the data
	// plane's health says so (dataplane.go); nil or missing: that responder is never reopened.
	Reopen     map[string]reopener
	Neighbours neighbours // the kernel's neighbour table: the peers' MACs
	// Rejoin tells the link this node is back after a data-plane fault; nil: nothing is told.
	Rejoin rejoiner
	// Keys says why the heartbeat key is missing, for /readyz; nil: never missing.
	Keys keyState
	// ConfigState records the speaker's ConfigurationState condition; nil: not reported.
	ConfigState configStateSink
	// Secondary are the interfaces besides Interface that can announce (owner_links.go).
	Secondary []secondaryLink
	// NoLayer2 says why this node cannot serve layer 2 (l2eligible.go); empty when it can. A node
	// that cannot runs no responder (ARP and NDP are nil), is never ready in its heartbeats and
	// announces nothing; /readyz stays ready for BGP.
	NoLayer2 layer2Reason
}

// keyState says why this speaker has no heartbeat key ("" when it has one): *heartbeatKeys.
type keyState interface{ missing() string }

// newSpeaker builds the owner over its dependencies. It starts nothing: run does.
func newSpeaker(cfg Config, d deps) *speaker {
	if d.Clock == nil {
		d.Clock = realClock{}
	}
	s := &speaker{cfg: cfg, log: d.Log, cs: d.Kube, rec: d.Recorder, arp: d.ARP, ndp: d.NDP, mon: d.Heartbeats, echo: d.Echo, neigh: d.Neighbours, rejoin: d.Rejoin,
		st: d.Status, cfgState: d.ConfigState, noL2: d.NoLayer2, ifi: d.Interface, objs: d.Objects, m: d.Metrics, clock: d.Clock, keys: d.Keys,
		kick: make(chan struct{}, 1), sp: newSpreadState(cfg.Node, d.Interface.HardwareAddr),
		announced: map[netip.Addr]string{}, macs: map[string]string{}, conflicts: make(chan conflict, 64),
		sec: d.Secondary, secFailed: map[string]string{}, on: map[netip.Addr][]string{},
		retries: &retries{pending: map[timer]struct{}{}}}
	s.remember(newMemory(handoverLinger))
	s.initDataplane(d)
	s.drops = newDropReporter(cfg.Node, d.Log, d.Recorder, d.Objects.object)
	return s
}

type speaker struct {
	cfg    Config
	log    *slog.Logger
	cs     kubernetes.Interface
	rec    record.EventRecorder
	arp    responder
	ndp    responder // nil without IPv6
	mon    heartbeats
	echo   echoes     // nil when the echo detector is off
	neigh  neighbours // nil: no peer MAC is known
	rejoin rejoiner   // nil: the link is not told this node is back
	keys   keyState   // nil: the key is never missing
	st     statusSink
	sp     *spreadState
	bgp    *bgpMode
	ifi    *net.Interface
	noL2   layer2Reason // why this node cannot serve layer 2 (deps.NoLayer2); set once
	clock  clock
	kick   chan struct{}
	// batchPending is set while a pokeSoon timer runs; lastReconcile is how long the last reconcile
	// took (nanoseconds).
	batchPending  atomic.Bool
	lastReconcile atomic.Int64

	objs  stores        // the informers' stores
	dirty atomic.Bool   // an object changed since the model was built
	drops *dropReporter // owned by run
	cur   *config.Model // owned by run: the model of the objects, as last built
	// bgpStale is set when the model is rebuilt: BGP mode's input changed. Owned by run.
	bgpStale bool
	// cfgState records the ConfigurationState's condition (nil: none); configStale is set when the
	// model is rebuilt, so that the condition is computed again after BGP mode's errors. Owned by run.
	cfgState    configStateSink
	configStale bool

	retries *retries // the gratuitous announcements' follow-ups

	mu       sync.Mutex // guards the following fields
	ready    bool       // past the start-up listening; readyLocked also asks the data plane
	readyAt  time.Time
	dp       dataplane // the data plane's health (dataplane.go)
	lastLoss time.Time // when the echo detector last declared a peer node lost
	leaving  bool
	// secFailed says why a secondary link's responder failed, by interface (owner_links.go).
	secFailed map[string]string

	sec        []secondaryLink         // the secondary links (fixed)
	on         map[netip.Addr][]string // owned by run: the interfaces each announced address is answered on
	secRetryAt time.Time               // owned by run: when failed secondary links are reopened next
	// owned by run; current, elKeys, handover, yielded and eligible are the plan's memory (memory)
	announced map[netip.Addr]string     // address -> service key, announced by this node
	current   map[netip.Addr]string     // election key -> node that won the last election
	elKeys    map[netip.Addr]netip.Addr // address -> its election key, as of the last reconcile
	handover  *handovers                // addresses lost to another node, answered until it claims them
	yielded   yields                    // addresses given up to a duplicate announcer, left to it briefly
	eligible  map[string]time.Time      // peer -> since when it is alive, ready and not leaving
	macs      map[string]string         // peer MAC -> node, from the neighbour table (learnMACs)
	conflicts chan conflict             // from the responders' goroutines
	wake      time.Time                 // when the plan may change by itself (Plan.Wake)
	m         *metrics
	reopen    map[string]reopener // the responders to reopen, by name
	dpShown   dataplaneShown      // owned by run
}

type metrics struct {
	announced prometheus.Gauge
	takeovers *prometheus.CounterVec
	conflicts prometheus.Counter
	peersDead *prometheus.CounterVec
	detection prometheus.Histogram
	strictARP prometheus.Gauge
	// dataplaneReady is 1 while the responders can answer (dataplane.go), 0 while not.
	dataplaneReady prometheus.Gauge

	// hbRejected counts the heartbeats rejected, by reason (indexed by liveness.Reason).
	hbRejected []prometheus.Counter

	// MetalLB's speaker metrics, under MetalLB's names (package metallbmetrics).
	k8s          *metallbmetrics.K8sClient
	mlbAnnounced *prometheus.GaugeVec // metallb_speaker_announced{service,protocol,node,ip}
	l2           *metallbmetrics.Layer2
}

// newMetrics builds the speaker's layer-2 metrics and registers them with reg.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		announced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_speaker_announced_addresses", Help: "Addresses this node announces."}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_speaker_takeovers_total", Help: "Addresses this node started announcing."}, []string{"reason"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "ironlb_speaker_duplicate_announcer_total", Help: "Packets where another MAC claimed an address this node announces."}),
		peersDead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_speaker_peer_deaths_total", Help: "Peers declared dead, by detector (echo: node or link lost; heartbeat: speaker lost)."}, []string{"detector"}),
		detection: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ironlb_speaker_detection_seconds", Help: "Silence of a peer node when the echo detector declared it dead.",
			Buckets: []float64{.01, .02, .03, .04, .05, .06, .08, .1, .15, .2, .5, 1}}),
		strictARP: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_speaker_kube_proxy_strict_arp_missing", Help: "1 when kube-proxy runs in IPVS mode without strictARP, so every node answers ARP for the Services' addresses."}),
		dataplaneReady: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_speaker_dataplane_ready",
			Help: "1 while this node's ARP/NDP responders can answer on their interface; 0 while a socket failed or the interface is gone or down (the node then reports not ready)."}),
	}
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_speaker_heartbeat_rejected_total",
		Help: "Heartbeats rejected, by reason: malformed, no-key (this speaker has none yet), unknown-node, wrong-source (not from the node's InternalIP), bad-mac (the HMAC does not verify), stale (timestamp outside the window), replay."},
		[]string{"reason"})
	// Known label values start at 0, so that dashboards show "none yet" rather than "no data".
	m.takeovers.WithLabelValues("elected")
	m.peersDead.WithLabelValues("echo")
	m.peersDead.WithLabelValues("heartbeat")
	m.dataplaneReady.Set(1)

	for _, r := range liveness.Rejections() {
		for int(r) >= len(m.hbRejected) {
			m.hbRejected = append(m.hbRejected, nil)
		}
		m.hbRejected[r] = rejected.WithLabelValues(r.String())
	}
	reg.MustRegister(m.announced, m.takeovers, m.conflicts, m.peersDead, m.detection, m.strictARP, m.dataplaneReady, rejected)
	m.k8s = metallbmetrics.NewK8sClient(reg)
	m.k8s.Show() // every speaker reads the configuration
	m.mlbAnnounced = metallbmetrics.NewSpeakerAnnounced(reg)
	m.l2 = metallbmetrics.NewLayer2(reg)
	return m
}

// layer2Count is the responders' OnCount: MetalLB's per-address layer-2 counters.
func (m *metrics) layer2Count(c layer2.Count, ip netip.Addr) {
	var v *prometheus.CounterVec
	switch c {
	case layer2.CountRequest:
		v = m.l2.Requests
	case layer2.CountAnswer:
		v = m.l2.Responses
	case layer2.CountGratuitous:
		v = m.l2.Gratuitous
	default:
		return
	}
	v.WithLabelValues(ip.String()).Inc()
}

// configKinds are the kinds of the configuration objects: one of them left out of the model (it does
// not decode, or is invalid) makes the configuration stale, in MetalLB's terms.
var configKinds = map[string]bool{"IPAddressPool": true, "L2Advertisement": true, "BGPPeer": true,
	"BGPAdvertisement": true, "BFDProfile": true, "Community": true}

// configValid reports whether the model left no configuration object out.
func configValid(drops []config.Dropped) bool {
	for _, d := range drops {
		if configKinds[d.Kind] {
			return false
		}
	}
	return true
}

// heartbeatRejected counts a heartbeat rejected (the Monitor's OnReject).
func (m *metrics) heartbeatRejected(r liveness.Reason) {
	if int(r) < len(m.hbRejected) && m.hbRejected[r] != nil {
		m.hbRejected[r].Inc()
	}
}

// heartbeat is this node's heartbeat, for the Monitor to send.
func (s *speaker) heartbeat() liveness.Heartbeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	hb := liveness.Heartbeat{Node: s.cfg.Node, Ready: s.readyLocked() && s.noL2 == "", Leaving: s.leaving, Interfaces: s.interfacesLocked()}
	if hb.Ready {
		hb.ReadyFor = s.clock.Now().Sub(s.readyAt)
	}
	return hb
}

// setReady marks this node ready to announce, from now.
func (s *speaker) setReady() {
	s.mu.Lock()
	s.ready, s.readyAt = true, s.clock.Now()
	s.mu.Unlock()
}

// onEchoDowns is the echo detector's callback: peers lost. It pokes the run loop at once.
func (s *speaker) onEchoDowns(downs []liveness.Down) {
	if len(downs) > 0 {
		s.mu.Lock()
		s.lastLoss = s.clock.Now()
		s.mu.Unlock()
	}
	for _, d := range downs {
		s.m.peersDead.WithLabelValues("echo").Inc()
		s.m.detection.Observe(d.Silence.Seconds())
		s.log.Warn("speaker peer node lost: echo unanswered", "peer", d.Peer, "silence", d.Silence)
	}
	s.poke()
}

// onConflict is the responders' OnConflict: another MAC claims an address this node announces.
func (s *speaker) onConflict(ip netip.Addr, mac net.HardwareAddr) {
	if !s.sp.isSpread(ip) { // in spread mode other nodes answer too, by design
		s.duplicate(ip, mac, false)
	}
}

// onSecondaryConflict is the OnConflict of the responders on the other interfaces.
func (s *speaker) onSecondaryConflict(ip netip.Addr, mac net.HardwareAddr) {
	if !s.sp.isSpread(ip) {
		s.duplicate(ip, mac, true)
	}
}

// objectBatch is how long object changes wait to be reconciled together, at least; maxObjectBatch at
// most, so that one slow reconcile cannot hold back the next object change (an EndpointSlice that
// moves an externalTrafficPolicy Local address) for many seconds. Changes come in bursts (a
// deployment of 10,000 Services is 20,000 Service and EndpointSlice events) and a reconcile reads
// every Service, so reconciling per event made every speaker spend a core on a large rollout;
// liveness changes still poke at once, so failover is not delayed.
const (
	objectBatch    = 50 * time.Millisecond
	maxObjectBatch = time.Second
)

// pokeSoon asks for a reconcile within objectBatch, or four times the last reconcile's duration if
// that is longer (with many Services a reconcile takes tens of milliseconds: this keeps a burst of
// changes from taking more than a fifth of a core), but never more than maxObjectBatch; calls
// meanwhile share it.
func (s *speaker) pokeSoon() {
	if s.batchPending.CompareAndSwap(false, true) {
		time.AfterFunc(min(max(objectBatch, 4*time.Duration(s.lastReconcile.Load())), maxObjectBatch), func() {
			s.batchPending.Store(false)
			s.poke()
		})
	}
}

// objectsChanged is the informers' handler: the model is rebuilt at the next reconcile, which comes
// within the object batch.
func (s *speaker) objectsChanged() {
	s.m.k8s.Updates.Inc()
	s.dirty.Store(true)
	s.pokeSoon()
}

func (s *speaker) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

type conflict struct {
	ip  netip.Addr
	mac net.HardwareAddr
	// secondary: seen on another interface than the InternalIP's, where the peers' MACs are not
	// known (learnMACs reads the InternalIP's neighbours only).
	secondary bool
}

func (s *speaker) run(ctx context.Context) error {
	resync := time.NewTicker(10 * time.Second) // safety net; changes come as kicks and hold-down ends
	defer resync.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		t0 := s.clock.Now()
		s.reconcile(ctx)
		s.lastReconcile.Store(int64(s.clock.Now().Sub(t0)))
		if !s.wake.IsZero() {
			wake.Reset(s.wake.Sub(s.clock.Now()))
		}
		select {
		case <-ctx.Done():
			s.leave()
			return nil
		case <-s.kick:
		case <-resync.C:
			s.dirty.Store(true)
		case <-wake.C:
		case c := <-s.conflicts:
			// Settle every claim waiting before the next reconcile: after a heal they come by the
			// dozen, and one reconcile each would delay the last by as many reconciles. The peers'
			// MACs are read afresh: a partition may have left their neighbour entries unresolved
			// at the last reconcile.
			if s.cur != nil {
				s.learnMACs(s.cur)
			}
			for more := true; more; {
				s.resolve(c)
				select {
				case c = <-s.conflicts:
				default:
					more = false
				}
			}
		}
	}
}

// resolve settles a duplicate announcer (both nodes announce an address, as after a partition heals):
// of the two, the one MetalLB's ranking puts first keeps it, the other withdraws at once. Both nodes
// see each other's gratuitous announcements and reach the same verdict.
func (s *speaker) resolve(c conflict) {
	key, ok := s.announced[c.ip]
	if !ok {
		return
	}
	other, known := s.macs[c.mac.String()]
	// On another interface the claimant's MAC is unknown; a claim of an address this node lingers on
	// (it lost the election to a live, eligible node) is the winner's.
	if (known || c.secondary) && s.handover.claimed(c.ip) {
		// Make-before-break: this node lost the election for the address and kept answering until now.
		s.log.Info("handed over: the new announcer claims the address", "ip", c.ip, "node", other, "service", key)
		s.withdraw(c.ip, key)
		return
	}
	s.duplicateEvent(c, key, other)
	if !known {
		return // not a speaker: a misconfigured host; keep announcing and let the event tell
	}
	if election.Rank(c.ip, []string{s.cfg.Node, other})[0] == s.cfg.Node {
		for _, r := range s.respsOf(c.ip) {
			_ = r.Gratuitous(c.ip) // reassert
		}
		return
	}
	s.log.Warn("duplicate announcer resolved: withdrawing in favour of a better-ranked node", "ip", c.ip, "node", other)
	if k, ok := s.elKeys[c.ip]; ok && s.current[k] == s.cfg.Node {
		s.current[k] = other // only this address's election: the others are not in dispute
	}
	s.withdraw(c.ip, key)
	s.yielded.hold(c.ip, other, s.clock.Now().Add(yieldHold))
}

// reconcile feeds the layer-2 plan and applies it: elections, announcements, withdrawals, handovers.
func (s *speaker) reconcile(ctx context.Context) {
	now := s.clock.Now()
	m := s.model()
	if s.bgpStale {
		s.bgpStale = false
		bgpValid := true
		if s.bgp != nil {
			bgpValid = s.bgp.reconcile(s.cfg.Namespace, s.bgpObjects(m))
		}
		s.m.k8s.Config(configValid(m.Dropped) && bgpValid)
	}
	if s.configStale && s.cfgState != nil {
		s.configStale = false
		var bgpErrs map[bgpconfig.ObjectRef]string
		if s.bgp != nil {
			bgpErrs = s.bgp.reported
		}
		s.cfgState.Set(config.ConfigCondition(config.ConditionConfigValid, configProblems(m.Dropped, bgpErrs)))
	}
	peers := heartbeatPeers(m, s.cfg.Node, s.cfg.HeartbeatPort)
	s.mon.SetPeers(peers)
	if s.echo != nil {
		s.echo.SetPeers(peers)
	}
	dpDown, dpRetry := s.dataplaneStep()
	if t := s.secondaryStep(now); !t.IsZero() && (dpRetry.IsZero() || t.Before(dpRetry)) {
		dpRetry = t
	}
	if s.noL2 != "" {
		dpDown = dataplaneReason(s.noL2) // it cannot answer: not alive in its own elections
	}
	s.mu.Lock()
	readyAt := s.readyAt
	s.mu.Unlock()
	s.learnMACs(m)
	p := plan(planInput{Config: planConfig{Self: s.cfg.Node, Interfaces: s.interfaces(), HoldDown: s.cfg.HoldDown},
		Model: m, Peers: s.peerViews(m), ReadySince: readyAt, Announced: s.announced, Dataplane: dpDown}, s.memory(), now)
	s.remember(p.Memory)
	s.wake = p.Wake
	if !dpRetry.IsZero() && (s.wake.IsZero() || dpRetry.Before(s.wake)) {
		s.wake = dpRetry
	}

	repoint := s.sp.set(p.Rings)
	for _, an := range p.Announce {
		s.announce(an.Addr, an.Key, an.Reason == AnnounceSpread, s.onFor(an.Addr, p))
	}
	// Announced addresses whose interfaces changed (an advertisement's interfaces, a secondary link
	// failed or back).
	for a, key := range s.announced {
		if _, ok := p.On[a]; ok {
			s.move(a, key, s.onFor(a, p), s.sp.isSpread(a))
		}
	}
	// Spread mode: the clients this node took over (a node left or joined the ring) learn its MAC now.
	for a, cs := range repoint {
		r := s.responder(a)
		if r == nil {
			continue
		}
		for _, c := range cs {
			if err := r.GratuitousTo(a, c.ip, c.mac, s.ifi.HardwareAddr); err != nil {
				s.log.Debug("re-pointing a client", "ip", a, "client", c.ip, "err", err)
			}
		}
		s.log.Info("spread: re-pointed clients", "ip", a, "clients", len(cs))
	}
	// Lost to another node. A failure (this node's endpoints, advertisement or Service gone) stops it
	// at once; a handover no failure caused is make-before-break: keep answering until the winner
	// claims the address on the wire (resolve) or the linger ends.
	for _, l := range p.Linger {
		if l.New {
			s.log.Info("handing over: answering until the new announcer claims the address", "ip", l.Addr, "service", l.Key, "linger", s.handover.linger)
		}
	}
	for _, w := range p.Withdraw {
		if w.Reason == WithdrawLingerEnded {
			s.log.Warn("handover: the new announcer did not claim the address in time", "ip", w.Addr, "service", w.Key, "linger", s.handover.linger)
		}
		s.withdraw(w.Addr, w.Key)
	}
	// A peer that comes back may have announced our addresses while it could not see us (a partition):
	// announce ours again so that each of us sees the other's claim and resolve settles it.
	for _, a := range p.Regratuitous {
		for _, r := range s.respsOf(a) {
			_ = r.Gratuitous(a)
		}
	}
	s.m.announced.Set(float64(len(s.announced)))
	status := map[string]map[string]any{}
	for _, key := range s.announced {
		status[key] = l2Status(key, s.cfg.Node, s.statusInterfaces(key))
	}
	s.st.Set(status)
}

// memory is the plan's memory, as the owner keeps it between plans.
func (s *speaker) memory() memory {
	return memory{Current: s.current, ElKeys: s.elKeys, Handover: s.handover, Yielded: s.yielded, Eligible: s.eligible}
}

// remember keeps the memory a plan returns.
func (s *speaker) remember(m memory) {
	s.current, s.elKeys, s.handover, s.yielded, s.eligible = m.Current, m.ElKeys, m.Handover, m.Yielded, m.Eligible
}

// model returns the model of the objects, rebuilt only when an informer saw a change since the last
// build (or the resync asks for it): liveness changes reconcile at once without rebuilding it. Each
// build reports what the model leaves out, and marks BGP mode's input stale.
func (s *speaker) model() *config.Model {
	if !s.dirty.Swap(false) && s.cur != nil {
		return s.cur
	}
	s.cur = config.BuildModel(s.objs.modelInput(s.cfg.LBClass))
	s.drops.report(s.cur.Dropped)
	s.bgpStale = true
	s.configStale = true
	return s.cur
}

// heartbeatPeers lists the peers to heartbeat and probe: every other node with an IPv4 InternalIP,
// by name.
func heartbeatPeers(m *config.Model, self string, port int) []liveness.Peer {
	var peers []liveness.Peer
	for _, n := range m.Nodes {
		if n.Name != self && n.InternalIP.IsValid() {
			peers = append(peers, liveness.Peer{Node: n.Name, Addr: netip.AddrPortFrom(n.InternalIP, uint16(port))})
		}
	}
	return peers
}

// peerViews asks the detectors about every peer node.
func (s *speaker) peerViews(m *config.Model) map[string]peerView {
	out := make(map[string]peerView, len(m.Nodes))
	for _, n := range m.Nodes {
		if n.Name == s.cfg.Node {
			continue
		}
		alive, _ := s.mon.Alive(n.Name)
		if s.echo != nil {
			up, _ := s.echo.Up(n.Name)
			alive = alive && up
		}
		hb, ok := s.mon.Info(n.Name)
		out[n.Name] = peerView{Alive: alive, Heard: ok, Ready: hb.Ready, Leaving: hb.Leaving, ReadyFor: hb.ReadyFor, Interfaces: hb.Interfaces}
	}
	return out
}

// learnMACs relearns which node each MAC is (for resolve) from this node's neighbour table: the entry
// of each peer node's InternalIP, which the kernel resolved itself (heartbeats and echo probes go
// there). Never from a heartbeat: a heartbeat carries no MAC, and anyone could claim one. A peer
// without an entry (not on-link, or not resolved yet) is left out; so is a MAC two peers share
// (a router in between), which names neither.
func (s *speaker) learnMACs(m *config.Model) {
	if s.neigh == nil {
		return
	}
	table, err := s.neigh.Neighbours()
	if err != nil {
		s.log.Warn("reading the neighbour table: peers' MACs unknown", "err", err)
		return
	}
	clear(s.macs)
	shared := map[string]bool{}
	for _, n := range m.Nodes {
		if n.Name == s.cfg.Node || !n.InternalIP.IsValid() {
			continue
		}
		mac, ok := table[n.InternalIP]
		if !ok {
			continue
		}
		k := mac.String()
		if _, dup := s.macs[k]; dup {
			shared[k] = true
		}
		s.macs[k] = n.Name
	}
	for k := range shared {
		delete(s.macs, k)
	}
}

func (s *speaker) responder(a netip.Addr) responder {
	if a.Is4() {
		return s.arp
	}
	return s.ndp
}

// announce starts answering for a on the interfaces ifs (Plan.On).
func (s *speaker) announce(a netip.Addr, key string, spread bool, ifs []string) {
	var rs []responder
	var on []string
	for _, name := range ifs {
		r := s.respOn(name, a)
		if r == nil {
			continue
		}
		if err := r.Announce(a); err != nil {
			s.log.Error("announcing", "ip", a, "service", key, "iface", name, "err", err)
			s.m.k8s.UpdateErrors.Inc()
			continue
		}
		rs, on = append(rs, r), append(on, name)
	}
	if len(rs) == 0 {
		if len(ifs) == 0 {
			s.log.Warn("not announcing: no interface to announce on (spread mode answers on the InternalIP's interface only)", "ip", a, "service", key)
		}
		return
	}
	s.announced[a] = key
	s.on[a] = on
	s.m.takeovers.WithLabelValues("elected").Inc()
	s.m.mlbAnnounced.WithLabelValues(key, "layer2", s.cfg.Node, a.String()).Set(1)
	if spread {
		// No broadcast: it would steer every client to this node. Clients are answered (and
		// re-pointed) one by one.
		s.log.Info("announcing in spread mode", "ip", a, "service", key)
		return
	}
	// Gratuitous announcements at once and a few times more against loss (as request and reply).
	for _, r := range rs {
		if err := r.Gratuitous(a); err != nil {
			s.log.Warn("gratuitous announcement", "ip", a, "err", err)
		}
	}
	for _, at := range gratuitousRetries {
		s.retries.after(s.clock, at, func() {
			for _, r := range rs {
				if err := r.Gratuitous(a); err != nil {
					s.log.Warn("gratuitous announcement", "ip", a, "err", err)
				}
			}
		})
	}
	s.mu.Lock()
	since := s.clock.Now().Sub(s.lastLoss)
	s.mu.Unlock()
	if since < time.Second {
		s.log.Info("announcing", "ip", a, "service", key, "interfaces", on, "sinceNodeLoss", since)
	} else {
		s.log.Info("announcing", "ip", a, "service", key, "interfaces", on)
	}
	// The Service from the informer's cache, never from the apiserver: this runs on the run goroutine,
	// and a request to an unreachable apiserver (restarting, or this node cut off) held every other
	// announcement, withdrawal and conflict resolution for seconds (issue 9's chaos run).
	if o, ok, _ := s.objs.services.GetByKey(key); ok {
		s.rec.Eventf(o.(*corev1.Service), corev1.EventTypeNormal, "nodeAssigned", "announcing from node %q with protocol \"layer2\"", s.cfg.Node)
	}
}

func (s *speaker) withdraw(a netip.Addr, key string) {
	for _, r := range s.respsOf(a) {
		_ = r.Withdraw(a)
	}
	delete(s.announced, a)
	delete(s.on, a)
	s.m.mlbAnnounced.DeleteLabelValues(key, "layer2", s.cfg.Node, a.String())
	s.handover.forget(a)
	s.log.Info("withdrawn", "ip", a, "service", key)
}

// leave hands this node's addresses over before it stops: peers are told at once that it leaves (and
// elect without it, sending their gratuitous announcements), while this node keeps answering for the
// grace period so that no request meets silence. The grace is waited in real time. The gratuitous
// follow-ups still pending are then cancelled (and any running waited for), and everything withdrawn.
func (s *speaker) leave() {
	s.mu.Lock()
	s.leaving = true
	s.mu.Unlock()
	if len(s.announced) > 0 && s.cfg.HandoverGrace > 0 {
		s.log.Info("leaving: handing addresses over", "addresses", len(s.announced), "grace", s.cfg.HandoverGrace)
		for end := time.Now().Add(s.cfg.HandoverGrace); time.Now().Before(end); time.Sleep(s.cfg.Interval) {
			s.mon.SendNow()
		}
	}
	s.retries.stop()
	s.withdrawAll()
}

// gratuitousRetries are when an announcement's gratuitous frames are sent again against loss, after
// the first: 20 ms, 200 ms and 1 s apart.
var gratuitousRetries = []time.Duration{20 * time.Millisecond, 220 * time.Millisecond, 1220 * time.Millisecond}

// retries are the pending follow-up gratuitous announcements: timers of the owner's clock, which
// stop cancels, waiting for any running one, so that no send outlives the speaker.
type retries struct {
	mu      sync.Mutex // guards the following fields
	pending map[timer]struct{}
	stopped bool
	wg      sync.WaitGroup
}

// after runs f after d, unless stop comes first.
func (r *retries) after(c clock, d time.Duration, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.wg.Add(1)
	var t timer
	t = c.AfterFunc(d, func() {
		defer r.wg.Done()
		r.mu.Lock() // after returned: t is set
		stopped := r.stopped
		delete(r.pending, t)
		r.mu.Unlock()
		if !stopped {
			f()
		}
	})
	r.pending[t] = struct{}{}
}

// stop cancels the pending retries and waits for those already running; later ones are not run.
func (r *retries) stop() {
	r.mu.Lock()
	r.stopped = true
	for t := range r.pending {
		if t.Stop() {
			r.wg.Done()
		}
	}
	clear(r.pending)
	r.mu.Unlock()
	r.wg.Wait()
}

// len returns the number of pending retries.
func (r *retries) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// duplicate is called by a responder when another MAC claims an address this node announces.
func (s *speaker) duplicate(ip netip.Addr, mac net.HardwareAddr, secondary bool) {
	s.m.conflicts.Inc()
	select {
	case s.conflicts <- conflict{ip, slices.Clone(mac), secondary}:
	default:
	}
}

func (s *speaker) duplicateEvent(c conflict, key, other string) {
	if other == "" {
		other = "an unknown host"
	} else {
		other = fmt.Sprintf("node %q", other)
	}
	s.log.Warn("duplicate announcer: another MAC answers for an address this node announces", "ip", c.ip, "mac", c.mac.String(), "by", other, "service", key)
	if o, ok, _ := s.objs.services.GetByKey(key); ok {
		s.rec.Eventf(o.(*corev1.Service), corev1.EventTypeWarning, "DuplicateAnnouncer",
			"node %q announces %s but %s (%s) also answers for it", s.cfg.Node, c.ip, c.mac, other)
	}
}

func (s *speaker) withdrawAll() {
	for a, key := range s.announced {
		s.withdraw(a, key)
	}
}
