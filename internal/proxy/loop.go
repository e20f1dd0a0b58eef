package proxy

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/proxy/conntrack"
	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/healthcheck"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// syncer applies models to one family's table (nftapply.Syncer).
type syncer interface {
	Sync(ctx context.Context, m *nftrules.Model, full bool) (nftrules.Plan, error)
	Pending() int
}

type family struct {
	name knftables.Family
	s    syncer
}

// echoer is the liveness view of the other nodes (liveness.Echoer).
type echoer interface {
	Up(node string) (bool, time.Time)
	SetPeers(peers []liveness.Peer)
}

// eventRecorder records events on objects (record.EventRecorder).
type eventRecorder interface {
	Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// loopConfig is what the sync loop needs of Config.
type loopConfig struct {
	node          convert.NodeConfig
	syncPeriod    time.Duration // full resync
	minSyncPeriod time.Duration // least time between two syncs' starts
	retryMax      time.Duration // longest wait before retrying a failed sync
	addrRefresh   time.Duration // how often local addresses are re-read (CIDR node-port addresses only)
	healthTimeout time.Duration // a change pending longer makes the proxy unhealthy (0: 1 minute)
	// returnHold bounds how long a node that answers again after being declared dead waits for its
	// endpoints to be reported again (0: 30 s); see liveness.
	returnHold time.Duration
	// shortDeath is the longest silence after which a returning node is used again at once (0: 1 s;
	// negative: never); see liveness.
	shortDeath time.Duration
}

// proxier owns the dataplane of one node. The sync loop (run) owns the fields marked so; the
// informer handlers and the liveness callback only poke it.
type proxier struct {
	cfg        loopConfig
	log        *slog.Logger
	src        source
	fams       []family
	ct         conntrack.Deleter // nil: no conntrack cleanup
	hc         *healthcheck.Services
	health     *healthcheck.ProxyHealth
	rec        eventRecorder // nil: no events
	m          *metrics
	localAddrs func() ([]netip.Addr, error) // addresses on the node's interfaces
	kick       chan struct{}
	// linkKick: a link the DSR routes go through came up (linkUp): a full sync at once, even
	// while a failed one waits for its retry (the routes through the link went with it).
	linkKick chan struct{}

	mu       sync.Mutex // guards the following fields
	echo     echoer     // nil while the echo detector is off
	dead     map[string]bool
	deadAt   map[string]death     // when and how each dead node was declared dead
	returned map[string]returning // nodes answering again whose endpoints are not trusted yet
	// dirty are the Services whose object or EndpointSlices changed since the last build, and
	// allDirty says that anything else may have changed: the next build converts every Service.
	dirty    map[nftrules.ServiceKey]bool
	allDirty bool
	// For kube-proxy's metrics: the Services with Service and EndpointSlice changes not yet built,
	// and the EndpointSlices' last-change-trigger-times since the proxy started, per Service.
	svcPending, epPending map[nftrules.ServiceKey]bool
	triggers              map[nftrules.ServiceKey][]time.Time
	started               time.Time

	// owned by run
	conv     *convert.Converter
	building map[nftrules.ServiceKey][]time.Time       // triggers of the changes in the model being applied
	built    map[nftrules.ServiceKey]*nftrules.Service // the Services of the last build
	// rebuilt are the Services converted again since the last model applied (for the conntrack
	// diff), unless rebuiltAll: all of them were.
	rebuilt    []nftrules.ServiceKey
	rebuiltAll bool
	applied    *nftrules.Model // last model applied to every family
	chains     map[knftables.Family]int
	skipped    map[nftrules.ServiceKey]string // logged invalid Services and why
	peers      []liveness.Peer                // the detector's peers; written under mu (onEcho reads them on the detector's goroutine)
	addrs      []netip.Addr                   // local addresses, when node-port CIDRs need them
	addrsErr   error
	dsr        dsrApplier // nil: no direct server return (no IPv4 table)
	dsrDefault nftrules.ExternalMode
	dsrRefused map[nftrules.ServiceKey]string // refusals already reported
	dsrPlan    *nftrules.DSRPlan              // last plan applied
	dsrBadMACs map[string]string              // nodes whose published MACs did not parse, logged
	badCIDRs   string                         // ServiceCIDRs that did not parse, logged
}

// dsrApplier carries out direct-server-return plans (dsrapply.Applier).
type dsrApplier interface {
	Apply(ctx context.Context, plan *nftrules.DSRPlan) error
	Slots() map[string]int
	Warnings() []error
}

func newProxier(cfg loopConfig, log *slog.Logger, src source, fams []family, m *metrics) *proxier {
	for _, f := range fams { // at 0 from the start: dashboards show "none" rather than "no data"
		m.syncErrors.WithLabelValues(string(f.name))
		m.kube.addFamily(f.name)
	}
	return &proxier{
		cfg: cfg, log: log, src: src, fams: fams, m: m,
		health:     healthcheck.NewProxyHealth(cmp.Or(cfg.healthTimeout, time.Minute), nil),
		kick:       make(chan struct{}, 1),
		linkKick:   make(chan struct{}, 1),
		dead:       map[string]bool{},
		deadAt:     map[string]death{},
		dirty:      map[nftrules.ServiceKey]bool{},
		allDirty:   true,
		returned:   map[string]returning{},
		conv:       convert.NewConverter(cfg.node.Name),
		started:    time.Now(),
		triggers:   map[nftrules.ServiceKey][]time.Time{},
		svcPending: map[nftrules.ServiceKey]bool{},
		epPending:  map[nftrules.ServiceKey]bool{},
		chains:     map[knftables.Family]int{},
		skipped:    map[nftrules.ServiceKey]string{},
	}
}

// poke asks the loop for a sync that converts every Service; it never blocks, and pokes
// coalesce.
func (p *proxier) poke() {
	p.mu.Lock()
	p.allDirty = true
	p.mu.Unlock()
	p.wake()
}

// pokeService asks the loop for a sync after a change of one Service or its EndpointSlices.
func (p *proxier) pokeService(k nftrules.ServiceKey) {
	p.mu.Lock()
	p.dirty[k] = true
	p.mu.Unlock()
	p.wake()
}

// serviceEvent counts a Service's add, update or delete (kube-proxy's service changes).
func (p *proxier) serviceEvent(k nftrules.ServiceKey) {
	p.m.kube.serviceTotal.Inc()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.svcPending[k] = true
	p.m.kube.servicePending.Set(float64(len(p.svcPending)))
}

// sliceEvent counts an EndpointSlice's add, update or delete (kube-proxy's endpoint changes) and
// keeps its last-change-trigger-time for the network programming latency, as kube-proxy's
// EndpointsChangeTracker: only changes made after the proxy started, none for a deletion (its
// time is that of the last update), and a deletion forgets the Service's earlier ones.
func (p *proxier) sliceEvent(es *discoveryv1.EndpointSlice, deleted bool) {
	k := nftrules.ServiceKey{Namespace: es.Namespace, Name: es.Labels[discoveryv1.LabelServiceName]}
	if k.Name == "" {
		return
	}
	p.m.kube.endpointTotal.Inc()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epPending[k] = true
	p.m.kube.endpointPending.Set(float64(len(p.epPending)))
	if deleted {
		delete(p.triggers, k)
		return
	}
	if t, err := time.Parse(time.RFC3339Nano, es.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil && t.After(p.started) {
		p.triggers[k] = append(p.triggers[k], t)
	}
}

func (p *proxier) wake() {
	p.health.Queued()
	p.m.kube.queued.queued(time.Now())
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// linkUp says that a link the DSR routes go through came up (dsrapply.WatchLinks): the next sync
// is a full one, at once, even during a failed sync's back-off.
func (p *proxier) linkUp() {
	select {
	case p.linkKick <- struct{}{}:
	default:
	}
}

// run syncs on every poke, at most once per minSyncPeriod, fully every syncPeriod, and retries
// failures with a back-off (each retry a full sync); a link that comes up (linkUp) is synced at
// once, back-off or not. It returns when ctx ends.
func (p *proxier) run(ctx context.Context) error {
	resync := time.NewTimer(p.cfg.syncPeriod)
	defer resync.Stop()
	var retry <-chan time.Time
	var addrTick <-chan time.Time
	if p.needAddrs() && p.cfg.addrRefresh > 0 {
		t := time.NewTicker(p.cfg.addrRefresh)
		defer t.Stop()
		addrTick = t.C
	}
	var last time.Time
	backoff := time.Duration(0)
	full := true
	p.poke()
	for {
		kick := p.kick
		if retry != nil {
			kick = nil // failing: changes wait for the retry, which applies them all
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-resync.C:
			full = true
		case <-retry:
		case <-p.linkKick:
			full = true
		case <-addrTick:
			if !p.refreshAddrs() {
				continue
			}
		}
		if wait := p.cfg.minSyncPeriod - time.Since(last); !last.IsZero() && wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		select { // pokes that came meanwhile are served by this sync
		case <-p.kick:
		default:
		}
		last = time.Now()
		if err := p.sync(ctx, full); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, time.Second), p.cfg.retryMax)
			p.log.Error("sync failed; retrying with a full sync", "in", backoff, "err", err)
			retry = time.After(backoff)
			continue
		}
		backoff, retry = 0, nil
		if full {
			full = false
			resync.Reset(p.cfg.syncPeriod)
		}
	}
}

// sync builds the model and applies it to every family, then flushes stale UDP conntrack
// entries and updates the health checks.
func (p *proxier) sync(ctx context.Context, full bool) error {
	start := time.Now()
	m := p.build(full)
	built := time.Since(start)
	kind := "partial"
	var errs []error
	skipped := map[nftrules.ServiceKey]error{}
	for _, f := range p.fams {
		fstart := time.Now()
		plan, err := f.s.Sync(ctx, m, full)
		if plan.Full {
			kind = "full"
		}
		p.m.staleChains.WithLabelValues(string(f.name)).Set(float64(f.s.Pending()))
		if err != nil {
			p.m.syncErrors.WithLabelValues(string(f.name)).Inc()
			p.m.kube.nftSyncFailures.WithLabelValues(ipFamily(f.name)).Inc()
			errs = append(errs, err)
			continue
		}
		p.kubeSynced(f.name, m, plan.Full, built+time.Since(fstart))
		p.m.operations.WithLabelValues(string(f.name)).Set(float64(plan.Ops))
		p.m.changed.WithLabelValues(string(f.name)).Set(float64(len(plan.Changed)))
		if plan.Full {
			p.chains[f.name] = len(plan.AddedChains)
		} else {
			p.chains[f.name] += len(plan.AddedChains) - len(plan.StaleChains)
		}
		p.m.chains.WithLabelValues(string(f.name)).Set(float64(p.chains[f.name]))
		for k, err := range plan.Skipped {
			skipped[k] = err
		}
		for _, c := range plan.Conflicts {
			p.log.Warn("address claimed by two Services; the first keeps it", "conflict", c, "family", f.name)
		}
	}
	p.logSkipped(skipped)
	if p.dsr != nil {
		if err := p.syncDSR(ctx, m); err != nil {
			p.m.syncErrors.WithLabelValues("dsr").Inc()
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	elapsed := time.Since(start)
	p.health.Updated(start)
	p.m.syncDuration.WithLabelValues(kind).Observe(elapsed.Seconds())
	p.m.lastSync.SetToCurrentTime()
	p.m.services.Set(float64(len(m.Services)))
	if kind == "full" {
		p.log.Info("full sync", "services", len(m.Services), "took", elapsed)
	} else {
		p.log.Debug("sync", "services", len(m.Services), "took", elapsed)
	}

	old := p.applied
	p.applied = m
	if p.ct != nil {
		if p.rebuiltAll {
			p.flushConntrack(ctx, conntrack.Stale(old, m))
		} else {
			p.flushConntrack(ctx, conntrack.StaleOf(old, m, p.rebuilt))
		}
	}
	p.rebuilt, p.rebuiltAll = nil, false
	if p.hc != nil {
		checks := nftrules.HealthChecks(m)
		var addrs []netip.Addr
		if !p.cfg.node.NodePorts.All() {
			addrs = m.Node.NodePortAddresses
		}
		if err := p.hc.Sync(checks, addrs); err != nil {
			p.log.Error("health-check node ports", "err", err)
		}
		p.m.healthChecks.Set(float64(len(p.hc.Ports())))
	}
	return nil
}

// kubeSynced updates kube-proxy's metrics after family fam applied m (took: the model's build and
// this family's transaction, as kube-proxy's per-family sync).
func (p *proxier) kubeSynced(fam knftables.Family, m *nftrules.Model, full bool, took time.Duration) {
	k, l := p.m.kube, ipFamily(fam)
	k.syncDuration.WithLabelValues(l).Observe(took.Seconds())
	if full {
		k.syncFullDuration.WithLabelValues(l).Observe(took.Seconds())
	} else {
		k.syncPartialDuration.WithLabelValues(l).Observe(took.Seconds())
	}
	now := time.Now()
	for _, ts := range p.building {
		for _, t := range ts {
			k.networkProgramming.WithLabelValues(l).Observe(now.Sub(t).Seconds())
		}
	}
	in, ext := nftrules.NoLocalEndpoints(m, fam == knftables.IPv6Family)
	k.noLocalEndpoints.WithLabelValues("internal", l).Set(float64(in))
	k.noLocalEndpoints.WithLabelValues("external", l).Set(float64(ext))
	k.lastSync.WithLabelValues(l).Set(float64(now.UnixNano()) / 1e9)
}

func (p *proxier) flushConntrack(ctx context.Context, filters []conntrack.Filter) {
	if b, ok := p.ct.(conntrack.BatchDeleter); ok && len(filters) > 1 {
		// One read of the table for every filter; the count is the batch's.
		n, err := b.DeleteAll(ctx, filters)
		p.m.ctDeleted.Add(float64(n))
		if err != nil {
			p.m.ctErrors.Inc()
			p.log.Warn("deleting stale conntrack entries", "filters", len(filters), "first", filters[0].String(), "err", err)
		}
		if n > 0 {
			p.log.Info("deleted stale UDP conntrack entries", "filters", len(filters), "first", filters[0].String(), "entries", n)
		}
		return
	}
	for _, f := range filters {
		n, err := p.ct.Delete(ctx, f)
		if err != nil {
			p.m.ctErrors.Inc()
			p.log.Warn("deleting stale conntrack entries", "filter", f.String(), "err", err)
			continue
		}
		p.m.ctDeleted.Add(float64(n))
		if n > 0 {
			p.log.Info("deleted stale UDP conntrack entries", "filter", f.String(), "entries", n)
		}
	}
}

// build converts the cluster's objects into the model of this sync: every Service if all is
// true or something besides Services and EndpointSlices changed, else only the Services that
// changed since the last build.
func (p *proxier) build(all bool) *nftrules.Model {
	self := p.src.Node(p.cfg.node.Name)
	p.health.SetNodeEligible(convert.NodeEligible(self))
	dead := p.liveness()
	p.m.deadNodes.Set(float64(len(dead)))
	if p.needAddrs() && p.addrs == nil && p.addrsErr == nil {
		p.refreshAddrs()
	}
	p.mu.Lock()
	dirty, allDirty := p.dirty, p.allDirty
	p.dirty, p.allDirty = map[nftrules.ServiceKey]bool{}, false
	p.building, p.triggers = p.triggers, map[nftrules.ServiceKey][]time.Time{}
	clear(p.svcPending)
	clear(p.epPending)
	p.m.kube.servicePending.Set(0)
	p.m.kube.endpointPending.Set(0)
	p.mu.Unlock()
	var svcs map[nftrules.ServiceKey]*nftrules.Service
	var issues []convert.Issue
	if all || allDirty || p.built == nil {
		svcs, issues = p.conv.Services(p.src.Services(), p.src.SlicesOf)
		p.rebuiltAll = true
	} else {
		keys := make([]nftrules.ServiceKey, 0, len(dirty))
		for k := range dirty {
			keys = append(keys, k)
		}
		svcs, issues = p.conv.Update(p.built, keys, p.src.Service, p.src.SlicesOf)
		p.rebuilt = append(p.rebuilt, keys...)
	}
	p.built = svcs
	for _, is := range issues {
		key := is.Service.Namespace + "/" + is.Service.Name
		if is.Skip != convert.NotSkipped {
			p.log.Debug("service not proxied", "service", key, "reason", is.Skip.String())
		}
		for _, w := range is.Warnings {
			p.m.serviceIssues.WithLabelValues(string(w.Reason)).Inc()
			p.log.Warn("service problem worked around", "service", key, "reason", string(w.Reason), "msg", w.Message)
			if p.rec != nil {
				p.rec.Eventf(is.Service, corev1.EventTypeWarning, string(w.Reason), "%s", w.Message)
			}
		}
	}
	nc := p.cfg.node
	var bad []string
	nc.ServiceCIDRs, bad = convert.ServiceCIDRs(p.src.ServiceCIDRs())
	if b := strings.Join(bad, ", "); b != p.badCIDRs {
		p.badCIDRs = b
		if b != "" {
			p.log.Error("ServiceCIDR objects with CIDRs that do not parse; left out", "cidrs", b)
		}
	}
	return &nftrules.Model{Node: convert.Node(nc, self, p.addrs, dead), Services: svcs}
}

func (p *proxier) needAddrs() bool {
	return len(p.cfg.node.NodePorts.CIDRs) > 0 && !p.cfg.node.NodePorts.All()
}

// refreshAddrs re-reads the local addresses; it reports whether they changed.
func (p *proxier) refreshAddrs() bool {
	if p.localAddrs == nil {
		return false
	}
	addrs, err := p.localAddrs()
	if err != nil {
		if p.addrsErr == nil {
			p.log.Error("reading the node's addresses for --nodeport-addresses", "err", err)
		}
		p.addrsErr = err
		return false
	}
	p.addrsErr = nil
	slices.SortFunc(addrs, netip.Addr.Compare)
	if slices.Equal(addrs, p.addrs) {
		return false
	}
	p.addrs = addrs
	return true
}

// logSkipped logs each invalid Service once per reason.
func (p *proxier) logSkipped(now map[nftrules.ServiceKey]error) {
	p.m.skipped.Set(float64(len(now)))
	for k, err := range now {
		if msg := err.Error(); p.skipped[k] != msg {
			p.skipped[k] = msg
			p.log.Error("service left out of the rules", "service", k.String(), "err", err)
		}
	}
	for k := range p.skipped {
		if _, ok := now[k]; !ok {
			delete(p.skipped, k)
		}
	}
}

// death is when a peer was declared dead, and whether other peers were declared dead in the same
// batch of the detector (this node's own stall, most likely; see liveness).
type death struct {
	at       time.Time
	together bool
	// every: the batch left no peer answering (with two peers or more). It was this node that
	// was cut off (its own link down, a partition of this node), not every other node at once.
	every bool
}

// returning is a node that answers echo again after it was declared dead: since when, and the
// addresses of its endpoints that were ready at that moment and have not been reported again since.
// It stays left out until each of those has been seen not ready or gone (its kubelet restarted the
// pod), or the hold has passed.
type returning struct {
	at    time.Time
	stale map[string]bool
}

// liveness updates the echo detector's peers from the Nodes and returns the nodes whose endpoints
// are not to be used: those declared dead, and those answering again whose endpoints have not been
// reported again. A node back from a power cut answers echo before its kubelet has restarted its
// pods, while the EndpointSlices still hold them ready from before the cut: its endpoints are used
// again once every endpoint that was ready at its return has been seen not ready or gone (the
// kubelet reported that pod again; one Service's slice often holds several of the node's pods, and
// one pod is in the slices of several Services), or after returnHold (a partition: the pods never
// stopped). Other endpoints are preferred meanwhile, not required (nftrules uses a dead node's
// endpoints when no other is usable). A node gone from the cluster is forgotten.
//
// A node declared dead together with other peers (in one batch of the detector: this node's own
// detector starved under load, which makes every peer overdue at once) that answers again within
// shortDeath (1 s) is used again at once: it was this node that stalled, and no node loses power
// and boots that fast, so its pods never stopped. Holding it out would be worse than useless with
// direct server return: only the nodes that saw the false death hold it out, so for up to
// returnHold their tables disagree with the others', and the connections opened meanwhile break
// when the router moves them to an entry node with the other table (docs/dsr.md, "A false death's
// hold"). A node that died alone is held as above however soon it answers: answers right after a
// single death are what a host on the segment that took over a cut node's address sends (the
// replayed-heartbeat attack of the chaos soak), and the hold keeps the dead pods out meanwhile.
//
// Nodes declared dead in a batch that left no peer answering (two peers or more) are used again at
// once however long the silence: this node was cut off (its link down, a partition of this node:
// the chaos soak's responder-iface and partition faults), the others never stopped and their
// endpoints never changed, so the hold would keep them out for all of returnHold while this node's
// table disagreed with every other node's (the chaos soak of 2026-11-27 22:53: myk8s-worker3, back
// from 5 s without its link, sent every new flow to its own pods for 30 s, and a reused port's SYN
// that it could not serve had no other node to go to). The others saw this node die alone, and
// hold it. A cluster that loses every node but this one at once and gets them back is taken for
// this node's cut: their pods, if they restarted, are used before the kubelets report them.
func (p *proxier) liveness() map[string]bool {
	p.mu.Lock()
	e := p.echo
	p.mu.Unlock()
	if e == nil {
		return nil
	}
	var peers []liveness.Peer
	for _, n := range p.src.Nodes() {
		if n.Name == p.cfg.node.Name {
			continue
		}
		if ip, ok := convert.InternalIP(n, true); ok {
			peers = append(peers, liveness.Peer{Node: n.Name, Addr: netip.AddrPortFrom(ip, 0)})
		}
	}
	slices.SortFunc(peers, func(a, b liveness.Peer) int {
		if a.Node < b.Node {
			return -1
		}
		if a.Node > b.Node {
			return 1
		}
		return a.Addr.Compare(b.Addr)
	})
	known := map[string]bool{}
	for _, pe := range peers {
		known[pe.Node] = true
	}
	if !slices.Equal(peers, p.peers) {
		p.mu.Lock()
		p.peers = peers
		p.mu.Unlock()
		e.SetPeers(peers)
	}
	hold := cmp.Or(p.cfg.returnHold, 30*time.Second)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for n := range p.dead {
		if !known[n] {
			delete(p.dead, n)
			delete(p.deadAt, n)
			continue
		}
		if up, _ := e.Up(n); up {
			delete(p.dead, n)
			d := p.deadAt[n]
			silence := now.Sub(d.at)
			delete(p.deadAt, n)
			if short := cmp.Or(p.cfg.shortDeath, time.Second); short > 0 && d.together && silence < short {
				p.log.Info("node answers echo again after a short silence shared with other peers (this node stalled): using its endpoints at once", "node", n, "deadFor", silence)
				continue
			}
			if d.every {
				p.log.Info("node answers echo again after every peer fell silent at once (this node was cut off): using its endpoints at once", "node", n, "deadFor", silence)
				continue
			}
			stale := map[string]bool{}
			for a, ready := range p.nodeEndpoints(n) {
				if ready {
					stale[a] = true
				}
			}
			p.returned[n] = returning{at: now, stale: stale}
			p.log.Info("node answers echo again: using its endpoints once they are reported again", "node", n, "endpoints", len(stale), "atMost", hold)
			time.AfterFunc(hold, p.poke)
			continue
		}
		out[n] = true
	}
	for n, r := range p.returned {
		if known[n] && !out[n] {
			// Gone, or listed not ready in some slice: reported again.
			cur := p.nodeEndpoints(n)
			for a := range r.stale {
				if ready, ok := cur[a]; !ok || !ready {
					delete(r.stale, a)
				}
			}
		}
		switch {
		case !known[n] || out[n]:
			delete(p.returned, n)
		case len(r.stale) == 0:
			delete(p.returned, n)
			p.log.Info("returned node's endpoints reported again: using them", "node", n, "after", now.Sub(r.at))
		case now.Sub(r.at) >= hold:
			delete(p.returned, n)
			p.log.Info("returned node's endpoints not reported again: using them anyway", "node", n, "after", now.Sub(r.at), "unreported", len(r.stale))
		default:
			out[n] = true
		}
	}
	return out
}

// sliceSeen is the EndpointSlice informer's callback (adds and updates, in order, before any
// coalescing sync): an endpoint of a returning node listed not ready has been reported again, even
// if it is ready again by the next sync.
func (p *proxier) sliceSeen(es *discoveryv1.EndpointSlice) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.returned) == 0 {
		return
	}
	for _, ep := range es.Endpoints {
		if ep.NodeName == nil || ep.Conditions.Ready == nil || *ep.Conditions.Ready {
			continue
		}
		if r, ok := p.returned[*ep.NodeName]; ok {
			for _, a := range ep.Addresses {
				delete(r.stale, a)
			}
		}
	}
}

// nodeEndpoints returns the addresses of the endpoints on node in every Service's EndpointSlices,
// each with whether it is ready in all of them (a pod is in the slices of every Service selecting it,
// and each slice is updated on its own).
func (p *proxier) nodeEndpoints(node string) map[string]bool {
	out := map[string]bool{}
	for _, svc := range p.src.Services() {
		for _, es := range p.src.SlicesOf(svc.Namespace, svc.Name) {
			for _, ep := range es.Endpoints {
				if ep.NodeName == nil || *ep.NodeName != node {
					continue
				}
				ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
				for _, a := range ep.Addresses {
					was, ok := out[a]
					out[a] = ready && (!ok || was)
				}
			}
		}
	}
	return out
}

// onEcho is the echo detector's callback: downs are peers that stopped answering (nil when one
// came up). Called from the detector's goroutine; it only records and pokes.
func (p *proxier) onEcho(downs []liveness.Down) {
	p.mu.Lock()
	changed := false
	// every: no peer left answering after this batch (see death).
	every := len(downs) > 1 && len(p.peers) > 1
	if every {
		in := map[string]bool{}
		for _, d := range downs {
			in[d.Peer] = true
		}
		for _, pe := range p.peers {
			if !in[pe.Node] && !p.dead[pe.Node] {
				every = false
			}
		}
	}
	for _, d := range downs {
		if d.Peer == p.cfg.node.Name || p.dead[d.Peer] {
			continue
		}
		p.dead[d.Peer] = true
		p.deadAt[d.Peer] = death{at: time.Now(), together: len(downs) > 1, every: every}
		changed = true
		p.m.deaths.Inc()
		p.log.Warn("node stopped answering echo: not using its endpoints", "node", d.Peer, "silence", d.Silence)
	}
	if e := p.echo; e != nil {
		for n := range p.dead {
			if up, _ := e.Up(n); up {
				changed = true // build() forgets it
			}
		}
	}
	p.mu.Unlock()
	if changed {
		p.poke()
	}
}

// setEcho installs the echo detector (nil: none).
func (p *proxier) setEcho(e echoer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.echo = e
}

// syncDSR plans and applies the direct-server-return table and routes for m, and reports
// Services whose DSR request is refused (once per reason, as a Warning event).
func (p *proxier) syncDSR(ctx context.Context, m *nftrules.Model) error {
	ips := map[string]netip.Addr{}
	macs := map[string][]nftrules.EtherAddr{}
	bad := map[string]string{}
	for _, n := range p.src.Nodes() {
		if ip, ok := convert.InternalIP(n, true); ok {
			ips[n.Name] = ip
		}
		// The loop guard's peers: the MACs each node's proxy published on its own Node.
		ms, err := convert.NodeMACs(n)
		if err != nil {
			bad[n.Name] = err.Error()
			if p.dsrBadMACs[n.Name] != bad[n.Name] {
				p.log.Warn("direct server return: a node's published MACs do not parse; it is left out of the loop guard", "node", n.Name, "err", err)
			}
			continue
		}
		if len(ms) > 0 {
			macs[n.Name] = ms
		}
	}
	p.dsrBadMACs = bad
	plan := nftrules.PlanDSR(m, nftrules.DSRConfig{Default: p.dsrDefault, NodeIPs: ips, NodeMACs: macs, Slots: p.dsr.Slots()})
	err := p.dsr.Apply(ctx, &plan)
	for _, w := range p.dsr.Warnings() {
		p.log.Warn("direct server return", "err", w)
	}
	if err == nil {
		// Flows forwarded to an owner that left their port's owners (UDP: Nodes; TCP: Keep, the
		// owner's pods gone): their entries go, so that the next packet is hashed as a new flow
		// (DNATed here if the hash says this node; conntrack.DSRMoved says why). Only after the
		// new table is in: a packet in between is marked by the new rules, and its entry is then
		// selected too. Nothing is read unless an owner was lost (or on the first plan).
		if p.ct != nil {
			if fs := conntrack.DSRMoved(p.dsrPlan, &plan); len(fs) > 0 {
				p.flushConntrack(ctx, fs)
			}
		}
		p.dsrPlan = &plan
	}
	now := map[nftrules.ServiceKey]string{}
	for k, notes := range plan.Refused {
		for _, n := range notes {
			now[k] += string(n.Reason) + ";"
		}
		if p.dsrRefused[k] == now[k] {
			continue
		}
		for _, n := range notes {
			p.log.Warn("direct server return refused", "service", k.String(), "reason", string(n.Reason), "msg", n.Message)
			if p.rec != nil {
				if obj := p.src.Service(k.Namespace, k.Name); obj != nil {
					p.rec.Eventf(obj, corev1.EventTypeWarning, string(n.Reason), "%s", n.Message)
				}
			}
		}
	}
	p.dsrRefused = now
	p.m.dsrPorts.Set(float64(len(plan.Ports)))
	return err
}
