// Package speaker is `ironlb speaker`: on every node it makes the Services' external addresses reachable
// on the nodes' network in layer-2 mode. For each address covered by an L2Advertisement, one node is
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
	"sort"
	"strings"
	"sync"
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
	Multiplier    int           // missed heartbeats before a peer is dead
	HoldDown      time.Duration // how long a returning node must be alive before it takes addresses back
	MetricsAddr   string        // Prometheus endpoint, "" disables
}

var (
	l2AdGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}
	poolGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
)

type speaker struct {
	cfg   Config
	log   *slog.Logger
	cs    kubernetes.Interface
	rec   record.EventRecorder
	arp   *layer2.Responder
	ndp   *layer2.Responder
	mon   *liveness.Monitor
	ifi   *net.Interface
	kick  chan struct{}
	start time.Time

	svcs, slices, nodes, ads, pools cache.SharedIndexInformer

	mu    sync.Mutex // guards ready
	ready bool

	// owned by run
	announced map[netip.Addr]string // address -> service key, announced by this node
	m         *metrics
}

type metrics struct {
	announced prometheus.Gauge
	takeovers *prometheus.CounterVec
	conflicts prometheus.Counter
	peersDead prometheus.Counter
}

// Run runs the speaker until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "speaker", "node", cfg.Node)
	if cfg.Node == "" {
		return errors.New("speaker: --node (or $NODE_NAME) is required")
	}
	cs, dyn, err := kube.Clients(cfg.Kubeconfig, "ironlb-speaker/"+cfg.Node, 50, 100)
	if err != nil {
		return err
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, cfg.Node, metav1.GetOptions{})
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
		announced: map[netip.Addr]string{}}
	reg := prometheus.NewRegistry()
	s.m = &metrics{
		announced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_speaker_announced_addresses", Help: "Addresses this node announces."}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_speaker_takeovers_total", Help: "Addresses this node started announcing."}, []string{"reason"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "ironlb_speaker_duplicate_announcer_total", Help: "Packets where another MAC claimed an address this node announces."}),
		peersDead: prometheus.NewCounter(prometheus.CounterOpts{Name: "ironlb_speaker_peer_deaths_total", Help: "Peers declared dead by the heartbeat detector."}),
	}
	reg.MustRegister(s.m.announced, s.m.takeovers, s.m.conflicts, s.m.peersDead)
	onConflict := func(ip netip.Addr, mac net.HardwareAddr) {
		s.m.conflicts.Inc()
		s.log.Warn("duplicate announcer: another MAC answers for an address this node announces", "ip", ip, "mac", mac)
	}
	conn, err := layer2.ListenARP(ifi)
	if err != nil {
		return err
	}
	if s.arp, err = layer2.NewARP(ifi, conn, layer2.Config{OnConflict: onConflict, Logger: s.log}); err != nil {
		return err
	}
	go func() {
		if err := s.arp.Run(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("ARP responder stopped", "err", err)
		}
	}()
	if hasIPv6(ifi) {
		if nconn, err := layer2.ListenNDP(ifi); err == nil {
			if groups, err := layer2.ListenGroups(ifi); err == nil {
				if s.ndp, err = layer2.NewNDP(ifi, nconn, groups, layer2.Config{OnConflict: onConflict, Logger: s.log}); err == nil {
					go func() { _ = s.ndp.Run(ctx) }()
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
		return liveness.Heartbeat{Node: cfg.Node, Ready: s.ready, Interfaces: []string{ifi.Name}}
	}, func() { s.m.peersDead.Inc(); s.poke() }, s.log)
	go func() { _ = s.mon.Run(ctx) }()
	kube.ServeMetrics(ctx, cfg.MetricsAddr, reg, s.log)
	inf := informers.NewSharedInformerFactory(cs, 0)
	s.svcs = inf.Core().V1().Services().Informer()
	s.slices = inf.Discovery().V1().EndpointSlices().Informer()
	s.nodes = inf.Core().V1().Nodes().Informer()
	dinf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cfg.Namespace, nil)
	s.ads = dinf.ForResource(l2AdGVR).Informer()
	s.pools = dinf.ForResource(poolGVR).Informer()
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { s.poke() }, UpdateFunc: func(_, _ any) { s.poke() }, DeleteFunc: func(any) { s.poke() }}
	for _, i := range []cache.SharedIndexInformer{s.svcs, s.slices, s.nodes, s.ads, s.pools} {
		_, _ = i.AddEventHandler(h)
	}
	inf.Start(ctx.Done())
	dinf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.svcs.HasSynced, s.slices.HasSynced, s.nodes.HasSynced, s.ads.HasSynced, s.pools.HasSynced) {
		return ctx.Err()
	}
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	s.log.Info("speaker ready", "ip", nodeIP, "heartbeat", fmt.Sprintf("%s x %d", cfg.Interval, cfg.Multiplier))
	return s.run(ctx)
}

func (s *speaker) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *speaker) run(ctx context.Context) error {
	resync := time.NewTicker(time.Second) // hold-down ends and other time-based changes
	defer resync.Stop()
	for {
		s.reconcile(ctx)
		select {
		case <-ctx.Done():
			s.withdrawAll()
			return nil
		case <-s.kick:
		case <-resync.C:
		}
	}
}

// reconcile elects the announcer of every address and makes this node's responders match.
func (s *speaker) reconcile(ctx context.Context) {
	now := time.Now()
	nodes, peers := s.nodeView(now)
	s.mon.SetPeers(peers)
	pools := s.poolMap()
	ads := s.advertisements()
	eps := s.endpoints()
	var svcs []election.Service
	adsFor := map[string][]election.Advertisement{}
	for _, o := range s.svcs.GetStore().List() {
		svc := o.(*corev1.Service)
		if !config.Ours(svc, s.cfg.LBClass) {
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
		key := svc.Namespace + "/" + svc.Name
		pool := poolOf(svc, addrs[0], pools)
		if pool == nil {
			continue // an address in no pool is never announced, even if someone forged the status
		}
		adsFor[key] = selecting(ads, pool)
		svcs = append(svcs, election.Service{Key: key, Addrs: addrs,
			Local:     svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
			Endpoints: eps[key]})
	}
	want := map[netip.Addr]string{}
	for _, group := range election.Group(svcs) {
		d := election.Elect(election.Input{Services: group, Advertisements: adsFor[group[0].Key], HoldDown: s.cfg.HoldDown}, nodes, now)
		if d.Node != s.cfg.Node {
			continue
		}
		for _, a := range d.Addrs {
			want[a] = group[0].Key
		}
	}
	for a, key := range want {
		if _, ok := s.announced[a]; ok {
			continue
		}
		s.announce(a, key)
	}
	for a, key := range s.announced {
		if _, ok := want[a]; !ok {
			s.withdraw(a, key)
		}
	}
	s.m.announced.Set(float64(len(s.announced)))
}

func (s *speaker) responder(a netip.Addr) *layer2.Responder {
	if a.Is4() {
		return s.arp
	}
	return s.ndp
}

func (s *speaker) announce(a netip.Addr, key string) {
	r := s.responder(a)
	if r == nil {
		return
	}
	if err := r.Announce(a); err != nil {
		s.log.Error("announcing", "ip", a, "service", key, "err", err)
		return
	}
	s.announced[a] = key
	s.m.takeovers.WithLabelValues("elected").Inc()
	// Gratuitous announcements at once and a few times more against loss (as request and reply).
	go func() {
		for _, d := range []time.Duration{0, 20 * time.Millisecond, 200 * time.Millisecond, time.Second} {
			time.Sleep(d)
			if err := r.Gratuitous(a); err != nil {
				s.log.Warn("gratuitous announcement", "ip", a, "err", err)
			}
		}
	}()
	s.log.Info("announcing", "ip", a, "service", key)
	if ns, name, ok := strings.Cut(key, "/"); ok {
		if svc, err := s.cs.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
			s.rec.Eventf(svc, corev1.EventTypeNormal, "nodeAssigned", "announcing from node %q with protocol \"layer2\"", s.cfg.Node)
		}
	}
}

func (s *speaker) withdraw(a netip.Addr, key string) {
	if r := s.responder(a); r != nil {
		_ = r.Withdraw(a)
	}
	delete(s.announced, a)
	s.log.Info("withdrawn", "ip", a, "service", key)
}

func (s *speaker) withdrawAll() {
	for a, key := range s.announced {
		s.withdraw(a, key)
	}
}

// nodeView turns Nodes and heartbeats into election nodes, and lists the peers to heartbeat.
func (s *speaker) nodeView(now time.Time) ([]election.Node, []liveness.Peer) {
	var out []election.Node
	var peers []liveness.Peer
	for _, o := range s.nodes.GetStore().List() {
		n := o.(*corev1.Node)
		en := election.Node{Name: n.Name, Labels: n.Labels, Excluded: election.ExcludedByLabel(n.Labels)}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue {
				en.NetworkUnavailable = true
			}
		}
		if n.Name == s.cfg.Node {
			en.Alive, en.ReadySince, en.Interfaces = true, s.start, []string{s.ifi.Name}
		} else {
			if ip, ok := internalIP(n, true); ok {
				peers = append(peers, liveness.Peer{Node: n.Name, Addr: netip.AddrPortFrom(ip, uint16(s.cfg.HeartbeatPort))})
			}
			alive, since := s.mon.Alive(n.Name)
			if hb, ok := s.mon.Info(n.Name); ok && alive && hb.Ready {
				en.Alive, en.ReadySince, en.Interfaces = true, since, hb.Interfaces
			}
		}
		out = append(out, en)
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].Node < peers[j].Node })
	return out, peers
}

type poolInfo struct {
	name   string
	labels map[string]string
	ranges []allocator.Range
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
	contains := func(p *poolInfo) bool {
		for _, r := range p.ranges {
			if r.Contains(a) {
				return true
			}
		}
		return false
	}
	if p, ok := pools[svc.Annotations[config.AnnotationAllocatedFromPool]]; ok && contains(p) {
		return p
	}
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if contains(pools[n]) {
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
