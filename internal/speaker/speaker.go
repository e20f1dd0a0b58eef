// Package speaker is `ironlb speaker`: on every node it makes the Services' external addresses reachable
// on the nodes' network in layer-2 mode, and in BGP mode advertises them to the routers that BGPPeers
// name (bgp.go, through package bgp). For each address covered by an L2Advertisement, one node is
// elected (internal/election, MetalLB's ranking) among the nodes whose speaker is alive by ironlb's own
// heartbeats (internal/liveness, tens of milliseconds instead of memberlist's seconds); that
// node answers ARP / neighbor solicitations for it and sends gratuitous announcements when it takes over
// (internal/speaker/layer2).
//
// The layer-2 side has three parts, each in its own file:
//   - objects.go: the thin adapter from the informers' stores to config.BuildModel (decoding the
//     custom resources), which turns the objects into the model both modes use, once per change, and
//     reports what the model leaves out (a log line and a Warning event per distinct drop);
//   - plan.go: the pure layer-2 plan: from the model, the detectors' view and this node's memory,
//     what to announce, withdraw, keep lingering and re-point, each with its reason;
//   - owner.go: the owner, built by newSpeaker over its I/O dependencies: one goroutine (run) feeds
//     the plan and applies it. Informer handlers, the detectors and the responders only kick it.
//
// Run (this file) opens the sockets, builds the informers and wires the parts together.
package speaker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/kube"
	"github.com/ironlb/ironlb/internal/kube/kubenode"
	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/speaker/bfd"
	"github.com/ironlb/ironlb/internal/speaker/layer2"
)

// Config is what `ironlb speaker` flags set.
type Config struct {
	Node          string        // this node's name ($NODE_NAME)
	Namespace     string        // configuration namespace (metallb-system)
	LBClass       string        // announce only Services of this loadBalancerClass; "" = only those without one (config.Serves)
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
	// MetricsSecure serves MetricsAddr over HTTPS to authorized clients only (kube.ServeSecureMetrics);
	// false serves plain HTTP to anyone (bind it to 127.0.0.1).
	MetricsSecure bool
	// HealthAddr serves /healthz and /readyz over plain HTTP for the kubelet's probes (""
	// disables): ready once the informers have synced and this node is ready (readiness: past its
	// start-up listening, its data plane able to answer, not leaving). The metrics server serves the
	// same /readyz answer (without the informers line) and an always-ok /healthz.
	HealthAddr string
	Nice       int           // scheduling priority to run at (needs CAP_SYS_NICE); 0 leaves it
	Refresh    time.Duration // re-announce every address this often (switch FDB, ARP cache ageing); 0 = never
	// ExcludeInterfaces are regular expressions of interface names never announced on, as MetalLB's
	// announcedInterfacesToExclude; nil means DefaultExcludeInterfaces (MetalLB's default list).
	// The InternalIP's interface is always announced on.
	ExcludeInterfaces []string

	// HeartbeatKeySecret is the Secret in Namespace holding the heartbeat keys ("" =
	// DefaultHeartbeatKeySecret); see heartbeatkey.go.
	HeartbeatKeySecret string
	// HeartbeatWindow is how far a heartbeat's timestamp may be from this node's clock (0 =
	// liveness.DefaultWindow); the nodes' clocks must agree within it.
	HeartbeatWindow time.Duration

	// PodName and PodUID name the speaker's Pod ($POD_NAME, $POD_UID), the owner of its
	// ConfigurationState; empty: the object has no owner.
	PodName, PodUID string

	// Logger receives the speaker's logs (nil: slog.Default(), which the command line builds from
	// --log-level and --log-format).
	Logger *slog.Logger
}

// Run runs the speaker until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := cmp.Or(cfg.Logger, slog.Default()).With("component", "speaker", "node", cfg.Node)
	if cfg.Node == "" {
		return errors.New("speaker: --node (or $NODE_NAME) is required")
	}
	// The probes answer from the start, until Run returns (after the handover, while /readyz says
	// the speaker is leaving): liveness does not wait for the apiserver, the sockets or the
	// informers; readiness fails until they exist.
	var probes probeState
	hctx, stopHealth := context.WithCancel(context.Background())
	defer stopHealth()
	if err := kube.ServeHealth(hctx, cfg.HealthAddr, kube.HealthHandler(nil, probes.checks()), log); err != nil {
		return err
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
	// The node's address family: IPv4 when it has an IPv4 InternalIP, else IPv6 (an IPv6-only node).
	// Heartbeats and echo probes go over it; its peers are the nodes of the same family.
	nodeIP, ok := kubenode.PrimaryInternalIP(node)
	if !ok {
		return fmt.Errorf("node %s has no InternalIP", cfg.Node)
	}
	ifi, err := interfaceWith(nodeIP)
	if err != nil {
		return err
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	log = log.With("iface", ifi.Name)
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ironlb-speaker", Host: cfg.Node})
	// A node address on an interface that cannot answer ARP/NDP (lo, dummy, a tunnel): BGP only
	// (l2eligible.go).
	noL2 := layer2Eligibility(*ifi, noARP(ifi.Index))
	noL2Msg := ""
	if noL2 != "" {
		noL2Msg = describeLayer2(cfg.Node, ifi, noL2)
		log.Warn("not eligible for layer 2: running BGP only", "reason", noL2, "ip", nodeIP, "detail", noL2Msg)
		rec.Eventf(&corev1.ObjectReference{Kind: "Node", Name: cfg.Node, APIVersion: "v1"}, corev1.EventTypeWarning, "Layer2Ineligible", "%s", noL2Msg)
	}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)

	// The parts below call back into s, which is built once they exist; none of them runs (and so
	// calls back) before it is.
	var s *speaker
	l2cfg := func(name string) layer2.Config {
		return layer2.Config{OnConflict: func(ip netip.Addr, mac net.HardwareAddr) { s.onConflict(ip, mac) }, Logger: log, Refresh: cfg.Refresh,
			OnNetDown: func(err error) { s.onSocketError(name)(err) }, OnCount: m.layer2Count}
	}
	var arp, ndp *layer2.Managed
	if noL2 == "" {
		if arp, err = dialManaged(ifi, layer2.DialARP, l2cfg(responderARP), func(err error) { s.onSocketError(responderARP)(err) }); err != nil {
			return err
		}
	}
	var secondary []secondaryLink
	var secManaged []*layer2.Managed
	if noL2 == "" { // a node that cannot serve layer 2 on its own interface is never elected
		secondary, secManaged, err = openSecondaries(ifi, cfg.ExcludeInterfaces, l2cfg, func(name string) func(error) {
			return func(err error) { s.onSecondaryError(name)(err) }
		}, func(ip netip.Addr, mac net.HardwareAddr) { s.onSecondaryConflict(ip, mac) }, log)
		if err != nil {
			return err
		}
	}
	if noL2 == "" && hasIPv6(ifi) {
		if ndp, err = dialManaged(ifi, layer2.DialNDP, l2cfg(responderNDP), func(err error) { s.onSocketError(responderNDP)(err) }); err != nil {
			log.Warn("NDP responder unavailable: IPv6 addresses are not announced", "err", err)
		}
	}
	udpNet := "udp4"
	if nodeIP.Is6() {
		udpNet = "udp6"
	}
	udp, err := net.ListenPacket(udpNet, netip.AddrPortFrom(nodeIP, uint16(cfg.HeartbeatPort)).String())
	if err != nil {
		return fmt.Errorf("heartbeat socket: %w", err)
	}
	mon := liveness.NewMonitor(udp, liveness.NewDetector(cfg.Interval, cfg.Multiplier), cfg.HeartbeatWindow,
		func() liveness.Heartbeat { return s.heartbeat() }, func() { s.poke() }, log)
	mon.OnDeath = func() { m.peersDead.WithLabelValues("heartbeat").Inc() }
	mon.OnReject = m.heartbeatRejected
	keyName := cfg.HeartbeatKeySecret
	if keyName == "" {
		keyName = DefaultHeartbeatKeySecret
	}
	keys := newHeartbeatKeys(cfg.Namespace, keyName, mon, log)
	kinf := keys.informer(cs)
	var echo *liveness.Echoer
	if cfg.EchoInterval > 0 {
		tr := liveness.NewEchoTracker(cfg.EchoInterval, cfg.EchoBurst, cfg.EchoTimeout, cfg.EchoMisses)
		if echo, err = liveness.ListenEcho(nodeIP, tr, func(downs []liveness.Down) { s.onEchoDowns(downs) }, log); err != nil {
			log.Error("echo detector unavailable, relying on heartbeats alone", "err", err)
		}
	}
	st := newStatusWriter(dyn, l2StatusKind, cfg.Namespace, cfg.Node, log)
	cst := newConfigStateWriter(dyn, cfg.Namespace, cfg.Node, cfg.PodName, cfg.PodUID, log)
	inf := informers.NewSharedInformerFactory(cs, 0)
	svcs := inf.Core().V1().Services().Informer()
	slcs := inf.Discovery().V1().EndpointSlices().Informer()
	nodes := inf.Core().V1().Nodes().Informer()
	dinf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cfg.Namespace, nil)
	ads := dinf.ForResource(v1beta1.L2AdvertisementGVR).Informer()
	pools := dinf.ForResource(v1beta1.IPAddressPoolGVR).Informer()
	d := deps{Log: log, Interface: ifi, Heartbeats: mon, Keys: keys, Status: st, ConfigState: cst, Metrics: m, Kube: cs, Reopen: map[string]reopener{}, Neighbours: netlinkNeighbours{index: ifi.Index},
		Recorder: rec, NoLayer2: noL2, Secondary: secondary,
		Objects: stores{services: svcs.GetStore(), slices: slcs.GetStore(), nodes: nodes.GetStore(), pools: pools.GetStore(), l2ads: ads.GetStore()}}
	if arp != nil { // never a nil *Managed in the interface
		d.ARP = arp
		d.Reopen[responderARP] = arp
	}
	if ndp != nil {
		d.NDP = ndp
		d.Reopen[responderNDP] = ndp
	}
	if echo != nil {
		d.Echo = echo
	}
	switch {
	case nodeIP.Is4() && arp != nil:
		d.Rejoin = linkRejoin{ip: nodeIP, l2: arp}
	case nodeIP.Is6() && ndp != nil:
		d.Rejoin = linkRejoin{ip: nodeIP, l2: ndp}
	}
	s = newSpeaker(cfg, d)
	if noL2 != "" {
		cst.Set(layer2Condition(noL2Msg, noL2))
	}

	// The responders, detectors and metrics outlive ctx by the handover grace: on SIGTERM this node tells
	// its peers it leaves and keeps answering until they have taken over. Run waits for them (at most
	// ioStopTimeout) after they are told to stop.
	var io sync.WaitGroup
	defer waitFor(&io, ioStopTimeout, log)
	ioctx, stopIO := context.WithCancel(context.Background())
	defer stopIO()
	for _, r := range []*layer2.Managed{arp, ndp} {
		if r == nil {
			continue
		}
		r.SetAnswerFunc(s.sp.answer)
		io.Go(func() { _ = r.Run(ioctx) }) // a failing responder is reported to s.onSocketError
	}
	for _, r := range secManaged {
		r.SetAnswerFunc(s.sp.answerSecondary(r.Interface().HardwareAddr))
		io.Go(func() { _ = r.Run(ioctx) }) // a failing responder is reported to s.onSecondaryError
	}
	// The link the responders serve: deleted, renamed, down or back (dataplane.go).
	io.Go(func() {
		if err := layer2.WatchLink(ioctx, ifi.Name, s.onLink, log); err != nil {
			log.Error("cannot watch the announcing interface: a deleted or downed link is seen only by its sockets", "err", err)
		}
	})
	io.Go(func() { _ = mon.Run(ioctx) })
	if echo != nil {
		io.Go(func() { _ = echo.Run(ioctx) })
	}
	io.Go(func() { st.Run(ioctx) })
	io.Go(func() { cst.Run(ioctx) })
	io.Go(func() { s.watchStrictARP(ioctx, 5*time.Minute) })
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
	var auth *kube.Authorizer
	if cfg.MetricsSecure {
		auth = kube.NewAuthorizer(cs)
	}
	if err := kube.ServeSecureMetrics(ioctx, cfg.MetricsAddr, auth, reg, s.log, kube.Route{Path: "/readyz", Handler: s.readyz}); err != nil {
		return err
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.objectsChanged() }, UpdateFunc: func(_, _ any) { s.objectsChanged() },
		DeleteFunc: func(any) { s.objectsChanged() }}
	all := []cache.SharedIndexInformer{svcs, slcs, nodes, ads, pools,
		s.bgp.peers, s.bgp.ads, s.bgp.profiles, s.bgp.communities, s.bgp.secrets}
	synced := make([]cache.InformerSynced, 0, len(all))
	for _, i := range all {
		_, _ = i.AddEventHandler(h)
		synced = append(synced, i.HasSynced)
	}
	probes.set(synced, s)
	inf.Start(ctx.Done())
	dinf.Start(ctx.Done())
	kinf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	// No key, no heartbeats: without them this speaker would take every peer for dead and announce
	// every address itself. Wait for the key before listening; until then it is not ready. (The
	// key's informer is not in the sync above: without RBAC for the Secret it would never sync, and
	// wait says why every 10 s.)
	// /readyz names the Secret meanwhile; a Warning event on this node says it once per reason.
	reported := ""
	if !keys.wait(ctx, 10*time.Second, func(why string) {
		if why != reported {
			reported = why
			s.rec.Eventf(&corev1.ObjectReference{Kind: "Node", Name: cfg.Node, APIVersion: "v1"}, corev1.EventTypeWarning, "HeartbeatKeyMissing",
				"node %q: %s: it sends and accepts no heartbeats and stays unready (announces nothing)", cfg.Node, why)
		}
	}) {
		return nil
	}
	// Listen before speaking: a speaker that elected before hearing its peers would announce every
	// address itself. Start probing the peers now; twice the slower detector's detection time is
	// enough to hear every live one.
	peers := heartbeatPeers(s.model(), cfg.Node, cfg.HeartbeatPort)
	s.mon.SetPeers(peers)
	if s.echo != nil {
		s.echo.SetPeers(peers)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(s.listenTime()):
	}
	s.setReady()
	s.log.Info("speaker ready", "ip", nodeIP, "heartbeat", fmt.Sprintf("%s x %d", cfg.Interval, cfg.Multiplier),
		"echo", fmt.Sprintf("every %s (%s when overdue), %d misses, timeout %s: node loss seen within %s", cfg.EchoInterval, cfg.EchoBurst, cfg.EchoMisses, cfg.EchoTimeout, s.echoDetection()))
	return s.run(ctx)
}

// probeState is what the health server's /readyz reads before and after Run has built the informers
// and the owner (set once; the server reads it from its own goroutines).
type probeState struct {
	synced atomic.Pointer[[]cache.InformerSynced]
	s      atomic.Pointer[speaker]
}

var errStarting = errors.New("starting")

func (p *probeState) set(synced []cache.InformerSynced, s *speaker) {
	p.synced.Store(&synced)
	p.s.Store(s)
}

// checks are /readyz's: the informers synced, then the speaker's own readiness.
func (p *probeState) checks() []kube.Check {
	return []kube.Check{
		{Name: "informers", Check: func() error {
			synced := p.synced.Load()
			if synced == nil {
				return errStarting
			}
			return kube.InformersSynced(*synced...).Check()
		}},
		{Name: "speaker", Check: func() error {
			if s := p.s.Load(); s != nil {
				return s.readyCheck()
			}
			return errStarting
		}},
	}
}

// ioStopTimeout bounds how long Run waits for its I/O goroutines once they are told to stop.
const ioStopTimeout = time.Second

// waitFor waits for wg, at most timeout.
func waitFor(wg *sync.WaitGroup, timeout time.Duration, log *slog.Logger) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		log.Warn("speaker parts did not stop in time", "timeout", timeout)
	}
}

// listenTime is how long the speaker listens to its peers before it speaks: at start-up, and when
// its data plane comes back (dataplane.go). Twice the slower detector's detection time is enough to
// hear every live peer.
func (s *speaker) listenTime() time.Duration {
	listen := 2 * s.cfg.Interval * time.Duration(s.cfg.Multiplier)
	if s.echo != nil {
		listen = max(listen, 2*s.echoDetection())
	}
	return listen
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

// dialManaged opens a responder on ifi with dial and wraps it for reopening: a reopen looks the
// interface up again by name (it may have been created again, with another index) and needs it up.
func dialManaged(ifi *net.Interface, dial func(*net.Interface, layer2.Config) (*layer2.Responder, error), cfg layer2.Config,
	onFail func(error)) (*layer2.Managed, error) {
	r, err := dial(ifi, cfg)
	if err != nil {
		return nil, err
	}
	return layer2.NewManaged(r, func() (*layer2.Responder, error) {
		now, err := layer2.LookupUp(ifi.Name)
		if err != nil {
			return nil, err
		}
		return dial(now, cfg)
	}, onFail)
}

// openSecondaries opens ARP (and, with an IPv6 address, NDP) responders on every interface besides
// primary that can announce (interfaces.go). An interface whose responder cannot be opened is left
// out (logged), as MetalLB does.
func openSecondaries(primary *net.Interface, exclude []string, l2cfg func(string) layer2.Config, onFail func(string) func(error),
	onConflict func(netip.Addr, net.HardwareAddr), log *slog.Logger) ([]secondaryLink, []*layer2.Managed, error) {
	if exclude == nil {
		exclude = DefaultExcludeInterfaces
	}
	re, err := excludeRegexp(exclude)
	if err != nil {
		return nil, nil, fmt.Errorf("interfaces to exclude: %w", err)
	}
	links, ifs, err := readLinks()
	if err != nil {
		return nil, nil, fmt.Errorf("listing interfaces: %w", err)
	}
	var out []secondaryLink
	var all []*layer2.Managed
	for _, name := range announceInterfaces(links, re) {
		if name == primary.Name {
			continue
		}
		i := slices.IndexFunc(ifs, func(ifi net.Interface) bool { return ifi.Name == name })
		ifi := &ifs[i]
		cfg := l2cfg(responderARP)
		cfg.OnNetDown, cfg.OnConflict = onFail(name), onConflict
		arp, err := dialManaged(ifi, layer2.DialARP, cfg, onFail(name))
		if err != nil {
			log.Warn("cannot open an ARP responder: not announcing on this interface", "iface", name, "err", err)
			continue
		}
		l := secondaryLink{Name: name, ARP: arp, Reopen: []reopener{arp}}
		all = append(all, arp)
		if hasIPv6(ifi) {
			cfg := l2cfg(responderNDP)
			cfg.OnNetDown, cfg.OnConflict = onFail(name), onConflict
			if ndp, err := dialManaged(ifi, layer2.DialNDP, cfg, onFail(name)); err != nil {
				log.Warn("NDP responder unavailable on this interface: IPv6 addresses are not announced on it", "iface", name, "err", err)
			} else {
				l.NDP = ndp
				l.Reopen = append(l.Reopen, ndp)
				all = append(all, ndp)
			}
		}
		log.Info("announcing on a further interface too", "iface", name, "mac", ifi.HardwareAddr.String())
		out = append(out, l)
	}
	return out, all, nil
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

// noARP reports the IFF_NOARP flag of the interface with index (false when it cannot be read).
func noARP(index int) bool {
	l, err := netlink.LinkByIndex(index)
	return err == nil && l.Attrs().RawFlags&unix.IFF_NOARP != 0
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
