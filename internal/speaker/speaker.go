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
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/kube"
	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/speaker/bfd"
	"github.com/ironlb/ironlb/internal/speaker/layer2"
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

	svcs, slices, nodes, ads, pools cache.SharedIndexInformer

	mu       sync.Mutex // guards the following fields
	ready    bool
	readyAt  time.Time
	lastLoss time.Time // when the echo detector last declared a peer node lost
	leaving  bool
	annKeys  map[netip.Addr]string // copy of announced for the responders' goroutines

	// owned by run
	announced map[netip.Addr]string     // address -> service key, announced by this node
	current   map[netip.Addr]string     // election key -> node that won the last election
	elKeys    map[netip.Addr]netip.Addr // address -> its election key, as of the last reconcile
	handover  *handovers                // addresses lost to another node, answered until it claims them
	yielded   yields                    // addresses given up to a duplicate announcer, left to it briefly
	eligible  map[string]time.Time      // peer -> since when it is alive, ready and not leaving
	macs      map[string]string         // peer MAC -> node, from heartbeats
	conflicts chan conflict             // from the responders' goroutines
	wake      time.Time                 // next hold-down end, when the election may change by itself
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
	nodeIP, ok := internalIP(node, true)
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
	s.svcs = inf.Core().V1().Services().Informer()
	s.slices = inf.Discovery().V1().EndpointSlices().Informer()
	s.nodes = inf.Core().V1().Nodes().Informer()
	dinf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cfg.Namespace, nil)
	s.ads = dinf.ForResource(l2AdGVR).Informer()
	s.pools = dinf.ForResource(poolGVR).Informer()
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
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.pokeSoon() }, UpdateFunc: func(_, _ any) { s.pokeSoon() }, DeleteFunc: func(any) { s.pokeSoon() }}
	all := []cache.SharedIndexInformer{s.svcs, s.slices, s.nodes, s.ads, s.pools,
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
	_, peers, _ := s.nodeView(time.Now())
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

// reconcile elects the announcer of every address and makes this node's responders match.
func (s *speaker) reconcile(ctx context.Context) {
	now := time.Now()
	nodes, peers, returned := s.nodeView(now)
	s.mon.SetPeers(peers)
	if s.echo != nil {
		s.echo.SetPeers(peers)
	}
	pools := s.poolMap()
	ads := s.advertisements()
	eps := s.endpoints()
	lbs := lbServices(s.svcs.GetStore().List(), s.cfg.LBClass, pools)
	if s.bgp != nil {
		s.bgp.reconcile(s.cfg.Namespace, s.bgpObjects(pools, lbs, eps))
	}
	var svcs []election.Service
	adsFor := map[string][]election.Advertisement{}
	spreadKeys := map[string]bool{}
	for _, l := range lbs {
		svc, key := l.svc, l.key
		adsFor[key] = selecting(ads, l.pool)
		if svc.Annotations[AnnotationSpread] == "true" {
			spreadKeys[key] = true
		}
		svcs = append(svcs, election.Service{Key: key, Addrs: l.addrs,
			Local:     svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
			Endpoints: eps[key]})
	}
	want := map[netip.Addr]string{}
	s.wake = time.Time{}
	for _, n := range nodes {
		if end := n.ReadySince.Add(s.cfg.HoldDown); n.Alive && end.After(now) && (s.wake.IsZero() || end.Before(s.wake)) {
			s.wake = end
		}
	}
	keys := map[netip.Addr]bool{}
	rings := map[netip.Addr]election.Ring{}
	lingers := map[netip.Addr]bool{} // addresses this node lost but may keep answering (Decision.Lingers)
	clear(s.elKeys)
	for _, group := range election.Group(svcs) {
		// Current is this speaker's memory of the last winner: every speaker computes the same elections
		// from the same view, so their memories agree, and a node whose own hold-down ends a moment
		// before the others' does not grab an address from its announcer in between.
		spread := spreadKeys[group[0].Key]
		d := election.Elect(election.Input{Services: group, Advertisements: adsFor[group[0].Key], HoldDown: s.cfg.HoldDown,
			Current: s.current[electionKey(group)], Spread: spread}, nodes, now)
		keys[d.Key] = true
		for _, a := range d.Addrs {
			s.elKeys[a] = d.Key
			if !spread && d.Lingers(s.cfg.Node) {
				lingers[a] = true
			}
		}
		if d.Node != "" {
			s.current[d.Key] = d.Node
		} else {
			delete(s.current, d.Key)
		}
		if spread && d.Node != "" && slices.Contains(d.Spread, s.cfg.Node) {
			ring := election.NewRing(d.Key, d.Spread)
			for _, a := range d.Addrs {
				want[a] = group[0].Key
				rings[a] = ring
			}
			continue
		}
		if d.Node != s.cfg.Node {
			continue
		}
		for _, a := range d.Addrs {
			want[a] = group[0].Key
		}
	}
	repoint := s.sp.set(rings)
	alive := map[string]bool{}
	for _, n := range nodes {
		alive[n.Name] = n.Alive && !n.ReadySince.IsZero()
	}
	for a, key := range want {
		s.handover.forget(a)
		if _, ok := s.announced[a]; ok {
			continue
		}
		if s.yielded.holds(a, now, func(n string) bool { return alive[n] }) {
			continue // given up to a node that claimed it too a moment ago, and still alive
		}
		_, spread := rings[a]
		s.announce(a, key, spread)
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
	for a, key := range s.announced {
		if _, ok := want[a]; ok {
			continue
		}
		// Lost to another node. A failure (this node's endpoints, advertisement or Service gone) stops
		// it at once; a handover no failure caused is make-before-break: keep answering until the
		// winner claims the address on the wire (resolve) or the linger ends.
		was := s.handover.lingering(a)
		if s.handover.keep(a, lingers[a], now) {
			if !was {
				s.log.Info("handing over: answering until the new announcer claims the address", "ip", a, "service", key, "linger", s.handover.linger)
			}
			continue
		}
		if was {
			s.log.Warn("handover: the new announcer did not claim the address in time", "ip", a, "service", key, "linger", s.handover.linger)
		}
		s.withdraw(a, key)
	}
	for _, end := range []time.Time{s.handover.next(), s.yielded.next(now)} {
		if !end.IsZero() && (s.wake.IsZero() || end.Before(s.wake)) {
			s.wake = end
		}
	}
	for k := range s.current {
		if !keys[k] {
			delete(s.current, k)
		}
	}
	// A peer that comes back may have announced our addresses while it could not see us (a partition):
	// announce ours again so that each of us sees the other's claim and resolve settles it.
	if len(returned) > 0 {
		for a := range s.announced {
			if s.sp.isSpread(a) || s.handover.lingering(a) {
				continue // a lingering address is the winner's: steering clients back here would undo it
			}
			if r := s.responder(a); r != nil {
				_ = r.Gratuitous(a)
			}
		}
	}
	s.m.announced.Set(float64(len(s.announced)))
	status := map[string]map[string]any{}
	for _, key := range s.announced {
		status[key] = l2Status(key, s.cfg.Node, []string{s.ifi.Name})
	}
	s.st.Set(status)
}

// electionKey is the key Elect uses for a group (Decision.Key): the smallest primary address.
func electionKey(group []election.Service) netip.Addr {
	var k netip.Addr
	for _, svc := range group {
		for _, a := range svc.Addrs {
			if a.IsValid() {
				if !k.IsValid() || a.Less(k) {
					k = a
				}
				break
			}
		}
	}
	return k
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
	if o, ok, _ := s.svcs.GetStore().GetByKey(key); ok {
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
	if o, ok, _ := s.svcs.GetStore().GetByKey(key); ok {
		s.rec.Eventf(o.(*corev1.Service), corev1.EventTypeWarning, "DuplicateAnnouncer",
			"node %q announces %s but %s (%s) also answers for it", s.cfg.Node, c.ip, c.mac, other)
	}
}

func (s *speaker) withdrawAll() {
	for a, key := range s.announced {
		s.withdraw(a, key)
	}
}

// nodeView turns Nodes and heartbeats into election nodes, and lists the peers to heartbeat.
func (s *speaker) nodeView(now time.Time) (out []election.Node, peers []liveness.Peer, returned []string) {
	for _, o := range s.nodes.GetStore().List() {
		n := o.(*corev1.Node)
		en := election.Node{Name: n.Name, Labels: n.Labels}
		en.Excluded, en.NetworkUnavailable = nodeExcluded(n)
		if n.Name == s.cfg.Node {
			s.mu.Lock()
			en.Alive, en.ReadySince, en.Interfaces = true, s.readyAt, []string{s.ifi.Name}
			s.mu.Unlock()
		} else {
			if ip, ok := internalIP(n, true); ok {
				peers = append(peers, liveness.Peer{Node: n.Name, Addr: netip.AddrPortFrom(ip, uint16(s.cfg.HeartbeatPort))})
			}
			alive, since := s.mon.Alive(n.Name)
			if s.echo != nil {
				up, upSince := s.echo.Up(n.Name)
				alive = alive && up
				if upSince.After(since) {
					since = upSince
				}
			}
			hb, ok := s.mon.Info(n.Name)
			if ok && len(hb.MAC) > 0 {
				s.macs[hb.MAC.String()] = n.Name
			}
			if ok && alive && hb.Ready && !hb.Leaving {
				// Hold-down runs from when the peer became ready by its own clock, so that every speaker
				// (a freshly started one too) agrees on when it ends.
				first, seen := s.eligible[n.Name]
				if !seen {
					first = now
					s.eligible[n.Name] = now
					returned = append(returned, n.Name)
				}
				since := now.Add(-hb.ReadyFor)
				if hb.ReadyFor == 0 {
					since = first
				}
				en.Alive, en.ReadySince, en.Interfaces = true, since, hb.Interfaces
			} else {
				delete(s.eligible, n.Name)
			}
		}
		out = append(out, en)
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].Node < peers[j].Node })
	return out, peers, returned
}

// nodeExcluded says whether a node may not announce: it carries the
// exclude-from-external-load-balancers label, or its NetworkUnavailable condition is True.
func nodeExcluded(n *corev1.Node) (excluded, networkUnavailable bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue {
			networkUnavailable = true
		}
	}
	return election.ExcludedByLabel(n.Labels), networkUnavailable
}

type poolInfo struct {
	name   string
	labels map[string]string
	ranges []allocator.Range
}

func (p *poolInfo) contains(a netip.Addr) bool {
	for _, r := range p.ranges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// lbService is a Service this speaker serves (config.Ours) with its load-balancer addresses and
// the pool holding them.
type lbService struct {
	svc   *corev1.Service
	key   string // "namespace/name"
	addrs []netip.Addr
	pool  *poolInfo
}

// lbServices picks, from the Services' store, those this speaker serves that have an address in a
// known pool: an address in no pool is never announced, even if someone forged the status, and a
// second address outside the first one's pool is dropped.
func lbServices(objs []any, lbClass string, pools map[string]*poolInfo) []lbService {
	var out []lbService
	for _, o := range objs {
		svc := o.(*corev1.Service)
		if !config.Ours(svc, lbClass) {
			continue
		}
		var addrs []netip.Addr
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				addrs = append(addrs, a.Unmap())
			}
		}
		if len(addrs) == 0 {
			continue
		}
		pool := poolOf(svc, addrs[0], pools)
		if pool == nil {
			continue
		}
		// A second address (dual stack) must lie in the same pool too.
		addrs = slices.DeleteFunc(addrs, func(a netip.Addr) bool { return !pool.contains(a) })
		out = append(out, lbService{svc: svc, key: svc.Namespace + "/" + svc.Name, addrs: addrs, pool: pool})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

func (s *speaker) poolMap() map[string]*poolInfo {
	out := map[string]*poolInfo{}
	for _, o := range s.pools.GetStore().List() {
		var p v1beta1.IPAddressPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.(*unstructured.Unstructured).Object, &p); err != nil {
			continue
		}
		pi := &poolInfo{name: p.Name, labels: p.Labels}
		for _, a := range p.Spec.Addresses {
			if rs, err := allocator.ParseRange(a); err == nil {
				pi.ranges = append(pi.ranges, rs...)
			}
		}
		out[p.Name] = pi
	}
	return out
}

// poolOf finds the pool holding a Service's address: the one the controller recorded, if it contains
// the address, else any pool that contains it.
func poolOf(svc *corev1.Service, a netip.Addr, pools map[string]*poolInfo) *poolInfo {
	if p, ok := pools[svc.Annotations[config.AnnotationAllocatedFromPool]]; ok && p.contains(a) {
		return p
	}
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if pools[n].contains(a) {
			return pools[n]
		}
	}
	return nil
}

type l2ad struct {
	ad        election.Advertisement
	pools     map[string]bool
	selectors []labels.Selector
}

func (s *speaker) advertisements() []l2ad {
	var out []l2ad
	for _, o := range s.ads.GetStore().List() {
		var a v1beta1.L2Advertisement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.(*unstructured.Unstructured).Object, &a); err != nil {
			continue
		}
		e := l2ad{ad: election.Advertisement{Name: a.Name, Interfaces: a.Spec.Interfaces}, pools: map[string]bool{}}
		for _, p := range a.Spec.IPAddressPools {
			e.pools[p] = true
		}
		for _, ls := range a.Spec.IPAddressPoolSelectors {
			if sel, err := metav1.LabelSelectorAsSelector(&ls); err == nil {
				e.selectors = append(e.selectors, sel)
			}
		}
		for _, ns := range a.Spec.NodeSelectors {
			sel := election.Selector{MatchLabels: ns.MatchLabels}
			for _, r := range ns.MatchExpressions {
				sel.MatchExpressions = append(sel.MatchExpressions, election.Requirement{Key: r.Key, Operator: election.Operator(r.Operator), Values: r.Values})
			}
			e.ad.NodeSelectors = append(e.ad.NodeSelectors, sel)
		}
		out = append(out, e)
	}
	return out
}

// selecting returns the advertisements that cover a pool: by name, by pool selector, or all pools when
// the advertisement names none (MetalLB's rule).
func selecting(ads []l2ad, p *poolInfo) []election.Advertisement {
	var out []election.Advertisement
	for _, a := range ads {
		match := len(a.pools) == 0 && len(a.selectors) == 0 || a.pools[p.name]
		for _, sel := range a.selectors {
			match = match || sel.Matches(labels.Set(p.labels))
		}
		if match {
			out = append(out, a.ad)
		}
	}
	return out
}

// endpoints maps "namespace/service" to its endpoints from EndpointSlices.
func (s *speaker) endpoints() map[string][]election.Endpoint {
	out := map[string][]election.Endpoint{}
	for _, o := range s.slices.GetStore().List() {
		es := o.(*discoveryv1.EndpointSlice)
		svc := es.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		key := es.Namespace + "/" + svc
		for _, e := range es.Endpoints {
			ep := election.Endpoint{Ready: e.Conditions.Ready == nil || *e.Conditions.Ready,
				Serving: e.Conditions.Serving != nil && *e.Conditions.Serving}
			if e.NodeName != nil {
				ep.Node = *e.NodeName
			}
			out[key] = append(out[key], ep)
		}
	}
	return out
}

func internalIP(n *corev1.Node, v4 bool) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() == v4 {
			return ip, true
		}
	}
	return netip.Addr{}, false
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
