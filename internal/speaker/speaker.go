// Package speaker is `ironlb speaker`: on every node it makes the Services' external addresses reachable
// on the nodes' network in layer-2 mode, and in BGP mode advertises them to the routers that BGPPeers
// name (bgp.go, through package bgp). For each address covered by an L2Advertisement, one node is
// elected (internal/election, MetalLB's ranking) among the nodes whose speaker is alive by ironlb's own
// heartbeats (internal/speaker/liveness, tens of milliseconds instead of memberlist's seconds); that
// node answers ARP / neighbor solicitations for it and sends gratuitous announcements when it takes over
// (internal/speaker/layer2).
//
// One goroutine (run) owns the decisions: informer handlers and liveness changes only kick it.
package speaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/kube"
	"github.com/ironlb/ironlb/internal/kube/kubenode"
	"github.com/ironlb/ironlb/internal/speaker/bfd"
	"github.com/ironlb/ironlb/internal/speaker/layer2"
	"github.com/ironlb/ironlb/internal/speaker/liveness"
)

// Config is what `ironlb speaker` flags set.
type Config struct {
	Node          string        // this node's name ($NODE_NAME)
	Namespace     string        // configuration namespace (metallb-system)
	LBClass       string        // also serve this loadBalancerClass
	Kubeconfig    string        // "" = in-cluster
	HeartbeatPort int           // UDP port of the heartbeats between speakers
	Interval      time.Duration // heartbeat interval
	Multiplier    int           // missed heartbeats before a peer's speaker is dead
	EchoInterval  time.Duration // echo probe interval (0 disables the echo detector)
	EchoBurst     time.Duration // echo probe interval while an answer is overdue
	EchoTimeout   time.Duration // how long an echo probe may wait for its answer
	EchoMisses    int           // unanswered echo probes before a peer node is dead
	HandoverGrace time.Duration // on SIGTERM: keep answering this long after telling peers we leave
	HoldDown      time.Duration // how long a returning node must be alive before it takes addresses back
	MetricsAddr   string        // Prometheus endpoint, "" disables
	Nice          int           // scheduling priority to run at (needs CAP_SYS_NICE); 0 leaves it
	Refresh       time.Duration // re-announce every address this often (switch FDB, ARP cache ageing); 0 = never
}

var (
	l2AdGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}
	poolGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
)

type speaker struct {
	cfg  Config
	log  *slog.Logger
	cs   kubernetes.Interface
	rec  record.EventRecorder
	arp  *layer2.Responder
	ndp  *layer2.Responder
	mon  *liveness.Monitor
	echo *liveness.Echoer // nil when the echo detector is off
	st   *statusWriter
	sp   *spreadState
	bgp  *bgpMode
	ifi  *net.Interface
	kick chan struct{}
	// batchPending is set while a pokeSoon timer runs; lastReconcile is how long the last reconcile
	// took (nanoseconds).
	batchPending  atomic.Bool
	lastReconcile atomic.Int64
	start         time.Time

	objs  stores        // the informers' stores
	dirty atomic.Bool   // an object changed since the model was built
	drops *dropReporter // owned by run
	cur   *config.Model // owned by run: the model of the objects, as last built
	// bgpStale is set when the model is rebuilt: BGP mode's input changed. Owned by run.
	bgpStale bool

	mu       sync.Mutex // guards the following fields
	ready    bool
	readyAt  time.Time
	lastLoss time.Time // when the echo detector last declared a peer node lost
	leaving  bool
	annKeys  map[netip.Addr]string // copy of announced for the responders' goroutines

	// owned by run; current, elKeys, handover, yielded and eligible are the plan's memory (memory)
	announced map[netip.Addr]string     // address -> service key, announced by this node
	current   map[netip.Addr]string     // election key -> node that won the last election
	elKeys    map[netip.Addr]netip.Addr // address -> its election key, as of the last reconcile
	handover  *handovers                // addresses lost to another node, answered until it claims them
	yielded   yields                    // addresses given up to a duplicate announcer, left to it briefly
	eligible  map[string]time.Time      // peer -> since when it is alive, ready and not leaving
	macs      map[string]string         // peer MAC -> node, from heartbeats
	conflicts chan conflict             // from the responders' goroutines
	wake      time.Time                 // when the plan may change by itself (Plan.Wake)
	m         *metrics
}

type metrics struct {
	announced prometheus.Gauge
	takeovers *prometheus.CounterVec
	conflicts prometheus.Counter
	peersDead *prometheus.CounterVec
	detection prometheus.Histogram
	strictARP prometheus.Gauge
}

// Run runs the speaker until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "speaker", "node", cfg.Node)
	if cfg.Node == "" {
		return errors.New("speaker: --node (or $NODE_NAME) is required")
	}
	// Failure detection in tens of milliseconds needs the CPU within milliseconds even when other work
	// saturates the node: run ahead of ordinary processes (threads created later inherit it).
	if cfg.Nice != 0 {
		if err := bfd.SetProcessNice(cfg.Nice); err != nil {
			log.Warn("cannot raise scheduling priority (grant CAP_SYS_NICE); detection may be late when the CPU is saturated", "nice", cfg.Nice, "err", err)
		}
	}
	cs, dyn, err := kube.Clients(cfg.Kubeconfig, "ironlb-speaker/"+cfg.Node, 50, 100)
	if err != nil {
		return err
	}
	node, err := getNode(ctx, cs, cfg.Node, log)
	if err != nil {
		return fmt.Errorf("reading node %s: %w", cfg.Node, err)
	}
	nodeIP, ok := kubenode.InternalIP(node, true)
	if !ok {
		return fmt.Errorf("node %s has no IPv4 InternalIP", cfg.Node)
	}
	ifi, err := interfaceWith(nodeIP)
	if err != nil {
		return err
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	s := &speaker{cfg: cfg, log: log.With("iface", ifi.Name), cs: cs, ifi: ifi, kick: make(chan struct{}, 1), start: time.Now(),
		rec:       b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ironlb-speaker", Host: cfg.Node}),
		announced: map[netip.Addr]string{}, annKeys: map[netip.Addr]string{}, current: map[netip.Addr]string{},
		elKeys: map[netip.Addr]netip.Addr{}, handover: newHandovers(handoverLinger), yielded: yields{},
		eligible: map[string]time.Time{}, macs: map[string]string{}, conflicts: make(chan conflict, 64)}
	reg := prometheus.NewRegistry()
	s.m = &metrics{
		announced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_speaker_announced_addresses", Help: "Addresses this node announces."}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_speaker_takeovers_total", Help: "Addresses this node started announcing."}, []string{"reason"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "ironlb_speaker_duplicate_announcer_total", Help: "Packets where another MAC claimed an address this node announces."}),
		peersDead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_speaker_peer_deaths_total", Help: "Peers declared dead, by detector (echo: node or link lost; heartbeat: speaker lost)."}, []string{"detector"}),
		detection: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ironlb_speaker_detection_seconds", Help: "Silence of a peer node when the echo detector declared it dead.",
			Buckets: []float64{.01, .02, .03, .04, .05, .06, .08, .1, .15, .2, .5, 1}}),
	}
	s.m.strictARP = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_speaker_kube_proxy_strict_arp_missing", Help: "1 when kube-proxy runs in IPVS mode without strictARP, so every node answers ARP for the Services' addresses."})
	// Known label values start at 0, so that dashboards show "none yet" rather than "no data".
	s.m.takeovers.WithLabelValues("elected")
	s.m.peersDead.WithLabelValues("echo")
	s.m.peersDead.WithLabelValues("heartbeat")
	reg.MustRegister(s.m.announced, s.m.takeovers, s.m.conflicts, s.m.peersDead, s.m.detection, s.m.strictARP)
	onConflict := func(ip netip.Addr, mac net.HardwareAddr) {
		if !s.sp.isSpread(ip) { // in spread mode other nodes answer too, by design
			s.duplicate(ip, mac)
		}
	}
	s.sp = newSpreadState(cfg.Node, ifi.HardwareAddr)
	// The responders, detectors and metrics outlive ctx by the handover grace: on SIGTERM this node tells
	// its peers it leaves and keeps answering until they have taken over.
	ioctx, stopIO := context.WithCancel(context.Background())
	defer stopIO()
	conn, err := layer2.ListenARP(ifi)
	if err != nil {
		return err
	}
	if s.arp, err = layer2.NewARP(ifi, conn, layer2.Config{OnConflict: onConflict, Logger: s.log, Refresh: cfg.Refresh}); err != nil {
		return err
	}
	s.arp.SetAnswerFunc(s.sp.answer)
	go func() {
		if err := s.arp.Run(ioctx); err != nil && ioctx.Err() == nil {
			s.log.Error("ARP responder stopped", "err", err)
		}
	}()
	if hasIPv6(ifi) {
		if nconn, err := layer2.ListenNDP(ifi); err == nil {
			if groups, err := layer2.ListenGroups(ifi); err == nil {
				if s.ndp, err = layer2.NewNDP(ifi, nconn, groups, layer2.Config{OnConflict: onConflict, Logger: s.log, Refresh: cfg.Refresh}); err == nil {
					s.ndp.SetAnswerFunc(s.sp.answer)
					go func() { _ = s.ndp.Run(ioctx) }()
				}
			}
		}
	}
	udp, err := net.ListenPacket("udp4", netip.AddrPortFrom(nodeIP, uint16(cfg.HeartbeatPort)).String())
	if err != nil {
		return fmt.Errorf("heartbeat socket: %w", err)
	}
	s.mon = liveness.NewMonitor(udp, liveness.NewDetector(cfg.Interval, cfg.Multiplier), func() liveness.Heartbeat {
		s.mu.Lock()
		defer s.mu.Unlock()
		hb := liveness.Heartbeat{Node: cfg.Node, Ready: s.ready, Leaving: s.leaving, Interfaces: []string{ifi.Name}, MAC: ifi.HardwareAddr}
		if s.ready {
			hb.ReadyFor = time.Since(s.readyAt)
		}
		return hb
	}, func() { s.poke() }, s.log)
	s.mon.OnDeath = func() { s.m.peersDead.WithLabelValues("heartbeat").Inc() }
	go func() { _ = s.mon.Run(ioctx) }()
	if cfg.EchoInterval > 0 {
		tr := liveness.NewEchoTracker(cfg.EchoInterval, cfg.EchoBurst, cfg.EchoTimeout, cfg.EchoMisses)
		e, err := liveness.ListenEcho(nodeIP, tr, func(downs []liveness.Down) {
			if len(downs) > 0 {
				s.mu.Lock()
				s.lastLoss = time.Now()
				s.mu.Unlock()
			}
			for _, d := range downs {
				s.m.peersDead.WithLabelValues("echo").Inc()
				s.m.detection.Observe(d.Silence.Seconds())
				s.log.Warn("speaker peer node lost: echo unanswered", "peer", d.Peer, "silence", d.Silence)
			}
			s.poke()
		}, s.log)
		if err != nil {
			s.log.Error("echo detector unavailable, relying on heartbeats alone", "err", err)
		} else {
			s.echo = e
			go func() { _ = e.Run(ioctx) }()
		}
	}
	s.st = newStatusWriter(dyn, l2StatusKind, cfg.Namespace, cfg.Node, s.log)
	go s.st.Run(ioctx)
	go s.watchStrictARP(ioctx, 5*time.Minute)
	inf := informers.NewSharedInformerFactory(cs, 0)
	svcs := inf.Core().V1().Services().Informer()
	slcs := inf.Discovery().V1().EndpointSlices().Informer()
	nodes := inf.Core().V1().Nodes().Informer()
	dinf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cfg.Namespace, nil)
	ads := dinf.ForResource(l2AdGVR).Informer()
	pools := dinf.ForResource(poolGVR).Informer()
	s.objs = stores{services: svcs.GetStore(), slices: slcs.GetStore(), nodes: nodes.GetStore(), pools: pools.GetStore(), l2ads: ads.GetStore()}
	s.drops = newDropReporter(cfg.Node, s.log, s.rec, s.objs.object)
	// BGP mode: its informers, status writers and the GoBGP adapter. The adapter stops when ctx
	// ends, closing its sessions with a Cease NOTIFICATION while the layer-2 handover runs.
	bgpDone := s.startBGP(ctx, ioctx, dyn, cs, reg)
	defer func() {
		select {
		case <-bgpDone:
		case <-time.After(bgpStopTimeout):
			s.log.Warn("bgp did not stop in time", "timeout", bgpStopTimeout)
		}
	}()
	kube.ServeMetrics(ioctx, cfg.MetricsAddr, reg, s.log)
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.objectsChanged() }, UpdateFunc: func(_, _ any) { s.objectsChanged() },
		DeleteFunc: func(any) { s.objectsChanged() }}
	all := []cache.SharedIndexInformer{svcs, slcs, nodes, ads, pools,
		s.bgp.peers, s.bgp.ads, s.bgp.profiles, s.bgp.communities, s.bgp.secrets}
	synced := make([]cache.InformerSynced, 0, len(all))
	for _, i := range all {
		_, _ = i.AddEventHandler(h)
		synced = append(synced, i.HasSynced)
	}
	inf.Start(ctx.Done())
	dinf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	// Listen before speaking: a speaker that elected before hearing its peers would announce every
	// address itself. Start probing the peers now; twice the slower detector's detection time is
	// enough to hear every live one.
	peers := heartbeatPeers(s.model(), cfg.Node, cfg.HeartbeatPort)
	s.mon.SetPeers(peers)
	if s.echo != nil {
		s.echo.SetPeers(peers)
	}
	listen := 2 * cfg.Interval * time.Duration(cfg.Multiplier)
	if s.echo != nil {
		listen = max(listen, 2*s.echoDetection())
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(listen):
	}
	s.mu.Lock()
	s.ready, s.readyAt = true, time.Now()
	s.mu.Unlock()
	s.log.Info("speaker ready", "ip", nodeIP, "heartbeat", fmt.Sprintf("%s x %d", cfg.Interval, cfg.Multiplier),
		"echo", fmt.Sprintf("every %s (%s when overdue), %d misses, timeout %s: node loss seen within %s", cfg.EchoInterval, cfg.EchoBurst, cfg.EchoMisses, cfg.EchoTimeout, s.echoDetection()))
	return s.run(ctx)
}

func (s *speaker) echoDetection() time.Duration {
	return liveness.NewEchoTracker(s.cfg.EchoInterval, s.cfg.EchoBurst, s.cfg.EchoTimeout, s.cfg.EchoMisses).DetectionTime()
}

// getNode reads this node's object, retrying quickly: after a node boots, the speaker may start before
// kube-proxy has programmed the apiserver's ClusterIP, and a single request would wait out a 30 s dial
// timeout before the container restarts with back-off.
func getNode(ctx context.Context, cs kubernetes.Interface, name string, log *slog.Logger) (*corev1.Node, error) {
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := cs.CoreV1().Nodes().Get(rctx, name, metav1.GetOptions{})
		cancel()
		if err == nil || ctx.Err() != nil || attempt == 120 {
			return n, err
		}
		if attempt%5 == 1 {
			log.Info("waiting for the apiserver", "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
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
}

func (s *speaker) run(ctx context.Context) error {
	resync := time.NewTicker(10 * time.Second) // safety net; changes come as kicks and hold-down ends
	defer resync.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		t0 := time.Now()
		s.reconcile(ctx)
		s.lastReconcile.Store(int64(time.Since(t0)))
		if !s.wake.IsZero() {
			wake.Reset(time.Until(s.wake))
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
			// dozen, and one reconcile each would delay the last by as many reconciles.
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
	if known && s.handover.claimed(c.ip) {
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
		if r := s.responder(c.ip); r != nil {
			_ = r.Gratuitous(c.ip) // reassert
		}
		return
	}
	s.log.Warn("duplicate announcer resolved: withdrawing in favour of a better-ranked node", "ip", c.ip, "node", other)
	if k, ok := s.elKeys[c.ip]; ok && s.current[k] == s.cfg.Node {
		s.current[k] = other // only this address's election: the others are not in dispute
	}
	s.withdraw(c.ip, key)
	s.yielded.hold(c.ip, other, time.Now().Add(yieldHold))
}

// reconcile feeds the layer-2 plan and applies it: elections, announcements, withdrawals, handovers.
func (s *speaker) reconcile(ctx context.Context) {
	now := time.Now()
	m := s.model()
	if s.bgpStale && s.bgp != nil {
		s.bgpStale = false
		s.bgp.reconcile(s.cfg.Namespace, s.bgpObjects(m))
	}
	peers := heartbeatPeers(m, s.cfg.Node, s.cfg.HeartbeatPort)
	s.mon.SetPeers(peers)
	if s.echo != nil {
		s.echo.SetPeers(peers)
	}
	s.mu.Lock()
	readyAt := s.readyAt
	s.mu.Unlock()
	p := plan(planInput{Config: planConfig{Self: s.cfg.Node, Interfaces: []string{s.ifi.Name}, HoldDown: s.cfg.HoldDown},
		Model: m, Peers: s.peerViews(m), ReadySince: readyAt, Announced: s.announced}, s.memory(), now)
	s.remember(p.Memory)
	s.wake = p.Wake

	repoint := s.sp.set(p.Rings)
	for _, an := range p.Announce {
		s.announce(an.Addr, an.Key, an.Reason == AnnounceSpread)
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
		if r := s.responder(a); r != nil {
			_ = r.Gratuitous(a)
		}
	}
	s.m.announced.Set(float64(len(s.announced)))
	status := map[string]map[string]any{}
	for _, key := range s.announced {
		status[key] = l2Status(key, s.cfg.Node, []string{s.ifi.Name})
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

// peerViews asks the detectors about every peer node, and learns the peers' MACs from their
// heartbeats (for resolve).
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
		if ok && len(hb.MAC) > 0 {
			s.macs[hb.MAC.String()] = n.Name
		}
		out[n.Name] = peerView{Alive: alive, Heard: ok, Ready: hb.Ready, Leaving: hb.Leaving, ReadyFor: hb.ReadyFor, Interfaces: hb.Interfaces}
	}
	return out
}

func (s *speaker) responder(a netip.Addr) *layer2.Responder {
	if a.Is4() {
		return s.arp
	}
	return s.ndp
}

func (s *speaker) announce(a netip.Addr, key string, spread bool) {
	r := s.responder(a)
	if r == nil {
		return
	}
	if err := r.Announce(a); err != nil {
		s.log.Error("announcing", "ip", a, "service", key, "err", err)
		return
	}
	s.announced[a] = key
	s.mu.Lock()
	s.annKeys[a] = key
	s.mu.Unlock()
	s.m.takeovers.WithLabelValues("elected").Inc()
	if spread {
		// No broadcast: it would steer every client to this node. Clients are answered (and
		// re-pointed) one by one.
		s.log.Info("announcing in spread mode", "ip", a, "service", key)
		return
	}
	// Gratuitous announcements at once and a few times more against loss (as request and reply).
	if err := r.Gratuitous(a); err != nil {
		s.log.Warn("gratuitous announcement", "ip", a, "err", err)
	}
	go func() {
		for _, d := range []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, time.Second} {
			time.Sleep(d)
			if err := r.Gratuitous(a); err != nil {
				s.log.Warn("gratuitous announcement", "ip", a, "err", err)
			}
		}
	}()
	s.mu.Lock()
	since := time.Since(s.lastLoss)
	s.mu.Unlock()
	if since < time.Second {
		s.log.Info("announcing", "ip", a, "service", key, "sinceNodeLoss", since)
	} else {
		s.log.Info("announcing", "ip", a, "service", key)
	}
	// The Service from the informer's cache, never from the apiserver: this runs on the run goroutine,
	// and a request to an unreachable apiserver (restarting, or this node cut off) held every other
	// announcement, withdrawal and conflict resolution for seconds (issue 9's chaos run).
	if o, ok, _ := s.objs.services.GetByKey(key); ok {
		s.rec.Eventf(o.(*corev1.Service), corev1.EventTypeNormal, "nodeAssigned", "announcing from node %q with protocol \"layer2\"", s.cfg.Node)
	}
}

func (s *speaker) withdraw(a netip.Addr, key string) {
	if r := s.responder(a); r != nil {
		_ = r.Withdraw(a)
	}
	delete(s.announced, a)
	s.handover.forget(a)
	s.mu.Lock()
	delete(s.annKeys, a)
	s.mu.Unlock()
	s.log.Info("withdrawn", "ip", a, "service", key)
}

// leave hands this node's addresses over before it stops: peers are told at once that it leaves (and
// elect without it, sending their gratuitous announcements), while this node keeps answering for the
// grace period so that no request meets silence.
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
	s.withdrawAll()
}

// duplicate is called by a responder when another MAC claims an address this node announces.
func (s *speaker) duplicate(ip netip.Addr, mac net.HardwareAddr) {
	s.m.conflicts.Inc()
	select {
	case s.conflicts <- conflict{ip, slices.Clone(mac)}:
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

// interfaceWith finds the interface holding ip.
func interfaceWith(ip netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		addrs, _ := ifs[i].Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == ip {
				return &ifs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no interface holds the node address %s", ip)
}

func hasIPv6(ifi *net.Interface) bool {
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && !p.Addr().IsLinkLocalUnicast() {
			return true
		}
	}
	return false
}
