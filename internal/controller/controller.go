// Package controller is `ironlb controller`: it gives each Service of type LoadBalancer its external
// address(es) from MetalLB's IPAddressPools. Informer handlers only enqueue keys; workers (8, to overlap
// API round trips) turn each key into Service status, events, pool status and metrics, and every
// decision on the allocator is made under one mutex (reconciler.mu), one at a time. Pools are
// converted to the model once per change (internal/config); the allocator (internal/allocator) never sees
// a Kubernetes object.
package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/config"
	"github.com/ironlb/ironlb/internal/kube"
	"github.com/ironlb/ironlb/internal/liveness"
)

// Config is what `ironlb controller` flags set.
type Config struct {
	Namespace   string // where the configuration objects live (metallb-system)
	LBClass     string // serve only Services of this loadBalancerClass; "" = only those without one (config.Serves)
	Kubeconfig  string // "" = in-cluster
	MetricsAddr string // Prometheus endpoint, "" disables
	// MetricsSecure serves MetricsAddr over HTTPS to authorized clients only (kube.ServeSecureMetrics);
	// false serves plain HTTP to anyone (bind it to 127.0.0.1).
	MetricsSecure bool
	// HealthAddr serves /healthz and /readyz over plain HTTP for the kubelet's probes (health.go); ""
	// disables. The metrics server answers both too, always "ok".
	HealthAddr     string
	WebhookAddr    string // admission webhook (HTTPS), "" disables
	WebhookService string // the Service in Namespace that fronts the webhook
	WebhookConfig  string // the ValidatingWebhookConfiguration whose caBundle we keep
	// WebhookSecretNamespace holds the webhook's certificate Secret, out of the speakers' reach
	// ("" = Namespace); WebhookCertValidity is the certificate's lifetime (0 = one year), renewed
	// when a third of it is left.
	WebhookSecretNamespace string
	WebhookCertValidity    time.Duration
	LeaderElect            bool          // run the allocator only while holding the Lease
	Identity               string        // leader-election identity (pod name)
	FlushInterval          time.Duration // how often pool status is written (default 1 s)
	// Leader election timings (defaults 15 s, 10 s, 2 s as client-go's examples); tests shorten them.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// HeartbeatKeySecret is the Secret in Namespace holding the speakers' heartbeat key, created when
	// absent ("" = liveness.KeySecret); see heartbeatkey.go.
	HeartbeatKeySecret string
	// KeepLeaseOnCancel keeps the Lease when ctx ends, as a crash would; false (the default) gives it
	// up on a graceful stop so that another replica leads at once.
	KeepLeaseOnCancel bool
	// Logger receives the controller's logs (nil: slog.Default(), which the command line builds from
	// --log-level and --log-format).
	Logger *slog.Logger

	// writeHook, when set (tests only), is called before each write the reconciler makes: with
	// stageLease before the leader checks its lease, and with stageWrite after that check, just
	// before the API call; what names the object ("service default/x", "pool p",
	// "configurationstate"). A hook that blocks plays a process paused (SIGSTOP) at that point.
	writeHook func(stage writeStage, what string)
	// registry, when set (tests only), receives the metrics instead of a new registry.
	registry *prometheus.Registry
}

// writeStage is where a write is when Config.writeHook is called.
type writeStage string

const (
	stageLease writeStage = "lease" // before the lease check
	stageWrite writeStage = "write" // after the lease check, before the API call
)

const (
	workers   = 8 // goroutines overlapping API round trips; decisions stay serial under mu
	keyConfig = "~config"
	keyFlush  = "~flush"
	keyState  = "~state" // the ConfigurationState and the advertisements' selector errors
	keyInfra  = "~infra" // pools overlapping nodes, pod CIDRs or the Service CIDR
	component = "ironlb-controller"
)

// Run runs the controller until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := cmp.Or(cfg.Logger, slog.Default()).With("component", "controller")
	cs, dyn, err := kube.Clients(cfg.Kubeconfig, component, 500, 1000)
	if err != nil {
		return err
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Second
	}
	reg := cfg.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := newMetrics(reg)
	hl := newHealth(cfg)
	if err := kube.ServeHealth(ctx, cfg.HealthAddr, kube.HealthHandler(hl.liveChecks(), hl.readyChecks()), log); err != nil {
		return err
	}
	var auth *kube.Authorizer
	if cfg.MetricsSecure {
		auth = kube.NewAuthorizer(cs)
	}
	if err := kube.ServeSecureMetrics(ctx, cfg.MetricsAddr, auth, reg, log); err != nil {
		return err
	}
	go keepHeartbeatKey(ctx, cs, cfg.Namespace, cmp.Or(cfg.HeartbeatKeySecret, liveness.KeySecret), log)
	if cfg.WebhookAddr != "" {
		wh, err := newWebhook(ctx, cs, dyn, cfg, log)
		if err != nil {
			return fmt.Errorf("admission webhook: %w", err)
		}
		go func() {
			if err := wh.serve(ctx, func() { hl.webhookSynced.Store(true) }); err != nil {
				log.Error("admission webhook", "err", err)
			}
		}()
	}
	if !cfg.LeaderElect {
		m.leader.Set(1)
		m.k8s.Show()
		r := newReconciler(cs, dyn, cfg, m, log, nil)
		r.health = hl
		hl.startTerm()
		return r.run(ctx)
	}
	id := cfg.Identity
	if id == "" {
		id, _ = os.Hostname()
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: "ironlb-controller", Namespace: cfg.Namespace},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	// Campaign until ctx ends. A leader that loses its lease (the apiserver away longer than the renew
	// deadline, say) stops its reconciler, waits for it to end and campaigns again as a standby: the
	// process stays up, and the next term starts a new reconciler that re-reads everything from the API
	// (a former leader's allocator state is never trusted).
	for {
		// RunOrDie runs OnStartedLeading in a goroutine and returns when the term ends (renewing
		// fails for RenewDeadline, or ctx ends): wait for that goroutine before the next campaign.
		var started atomic.Bool
		done := make(chan error, 1)
		leCtx, cancel := context.WithCancel(ctx)
		leaderelection.RunOrDie(leCtx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: !cfg.KeepLeaseOnCancel, WatchDog: hl.watchdog,
			LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					started.Store(true)
					log.Info("became leader", "identity", id)
					m.leader.Set(1)
					m.k8s.Show() // MetalLB's config gauges: the leader reads the configuration
					f := &leaseFence{leases: cs.CoordinationV1().Leases(cfg.Namespace), name: lock.LeaseMeta.Name, id: id}
					r := newReconciler(cs, dyn, cfg, m, log, f)
					r.health = hl
					hl.startTerm()
					done <- r.run(ctx)
					hl.endTerm()
					cancel() // the reconciler failed on its own: end this term
				},
				OnStoppedLeading: func() {
					if started.Load() {
						log.Info("lost leadership", "identity", id)
					}
					m.leader.Set(0)
				},
			},
		})
		cancel()
		if started.Load() {
			err := <-done
			// A standby reads no configuration and allocates nothing: MetalLB's gauges (its alerts'
			// inputs) are the leader's alone.
			m.k8s.Hide()
			m.pools.Reset()
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Info("standing by: campaigning for the lease again", "identity", id)
	}
}

// reconciler owns the allocator. The informers and the queue are safe for concurrent use; the allocator
// and the state after it are guarded by mu (workers decide one at a time and write in parallel).
type reconciler struct {
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	cfg   Config
	m     *metrics
	log   *slog.Logger
	rec   record.EventRecorder
	queue workqueue.TypedRateLimitingInterface[string]

	// fence says whether this replica still holds the lease; nil without leader election.
	fence fence
	// health learns when the initial load is done (/readyz); nil: no one asks.
	health *health

	svcs                 corelisters.ServiceLister
	nss                  corelisters.NamespaceLister
	pools, l2Ads, bgpAds cache.SharedIndexInformer
	nodes                cache.SharedIndexInformer // names, addresses and pod CIDRs only
	// serviceCIDRs (nil when the apiserver does not serve networking.k8s.io/v1 ServiceCIDRs) and
	// apiSlices (the kubernetes Service's EndpointSlices) are read only to warn about pools holding
	// the Service CIDR or the apiserver's addresses (keyInfra). Neither is waited for: a warning
	// must never hold up allocation.
	serviceCIDRs, apiSlices cache.SharedIndexInformer

	mu         sync.Mutex // guards the allocator and the fields below; held for decisions, never for API calls
	alloc      *allocator.Allocator
	config     *config.Pools
	configErr  error
	dirtyPools map[string]bool
	poolUIDs   map[string]types.UID
	exhausted  map[string]bool
	// waiting holds the Services whose allocation failed: each is decided again whenever another
	// Service releases an address (as MetalLB reprocesses every Service then), since what failed for
	// want of an address may now succeed; else a Service stayed pending beside a free address until
	// it or the pools changed (found by TestDifferentialAllocation). The value is the failure last
	// reported for it: deciding it again with the same outcome records no new event or log line (every
	// pool change decides every waiting Service again: 400 differential sequences recorded ~21,900
	// identical AllocationFailed events and the recorder lagged by more than 15 s).
	waiting map[allocator.Key]string
	// badSelectors maps "Kind/name" of each advertisement that selects nothing (a selector does not
	// parse) to the message last reported for it, so that each problem gets one event and log line.
	badSelectors map[string]string
	// infraWarned maps each pool to the overlaps with the cluster's own addresses last reported for it.
	infraWarned map[string]string
	events      record.EventBroadcaster // shut down when run returns (a term ends)
}

func newReconciler(cs kubernetes.Interface, dyn dynamic.Interface, cfg Config, m *metrics, log *slog.Logger, f fence) *reconciler {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	return &reconciler{
		cs: cs, dyn: dyn, cfg: cfg, m: m, log: log, events: b, fence: f,
		rec:          b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}),
		queue:        workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		alloc:        allocator.New(),
		dirtyPools:   map[string]bool{},
		poolUIDs:     map[string]types.UID{},
		exhausted:    map[string]bool{},
		waiting:      map[allocator.Key]string{},
		badSelectors: map[string]string{},
		infraWarned:  map[string]string{},
	}
}

func (r *reconciler) run(ctx context.Context) error {
	defer r.events.Shutdown()
	defer r.queue.ShutDown()
	inf := informers.NewSharedInformerFactory(r.cs, 0)
	r.svcs = inf.Core().V1().Services().Lister()
	r.nss = inf.Core().V1().Namespaces().Lister()
	svcInf := inf.Core().V1().Services().Informer()
	nsInf := inf.Core().V1().Namespaces().Informer()
	dinf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(r.dyn, 0, r.cfg.Namespace, nil)
	r.pools = dinf.ForResource(v1beta1.IPAddressPoolGVR).Informer()
	r.l2Ads = dinf.ForResource(v1beta1.L2AdvertisementGVR).Informer()
	r.bgpAds = dinf.ForResource(v1beta1.BGPAdvertisementGVR).Informer()
	enqueueSvc := func(o any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			r.queue.Add(k)
		}
	}
	svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueueSvc, UpdateFunc: func(_, o any) { enqueueSvc(o) }, DeleteFunc: enqueueSvc})
	cfgChanged := func(any) { r.queue.Add(keyConfig) }
	r.pools.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: cfgChanged, UpdateFunc: func(o, n any) {
		if specChanged(o, n) {
			cfgChanged(n)
		}
	}, DeleteFunc: cfgChanged})
	nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: cfgChanged, UpdateFunc: func(o, n any) {
		if !equalLabels(o.(*corev1.Namespace).Labels, n.(*corev1.Namespace).Labels) {
			cfgChanged(n)
		}
	}, DeleteFunc: cfgChanged})
	// Advertisements are read only to report those that select nothing (config.SelectorErrors).
	adsChanged := func(any) { r.queue.Add(keyState) }
	for _, inf := range []cache.SharedIndexInformer{r.l2Ads, r.bgpAds} {
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: adsChanged, UpdateFunc: func(o, n any) {
			if specChanged(o, n) {
				adsChanged(n)
			}
		}, DeleteFunc: adsChanged})
	}
	// Nodes are read only to warn about pools holding their addresses or pod CIDRs (keyInfra).
	r.nodes = inf.Core().V1().Nodes().Informer()
	if err := r.nodes.SetTransform(func(o any) (any, error) {
		if n, ok := o.(*corev1.Node); ok {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion},
				Spec: corev1.NodeSpec{PodCIDRs: n.Spec.PodCIDRs}, Status: corev1.NodeStatus{Addresses: n.Status.Addresses}}, nil
		}
		return o, nil
	}); err != nil {
		return err
	}
	infraChanged := func(any) { r.queue.Add(keyInfra) }
	r.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: infraChanged, UpdateFunc: func(o, n any) {
		on, ok1 := o.(*corev1.Node)
		nn, ok2 := n.(*corev1.Node)
		if !ok1 || !ok2 || !slices.Equal(on.Spec.PodCIDRs, nn.Spec.PodCIDRs) || !slices.Equal(on.Status.Addresses, nn.Status.Addresses) {
			infraChanged(n)
		}
	}, DeleteFunc: infraChanged})
	if err := r.watchInfra(ctx, infraChanged); err != nil {
		return err
	}
	inf.Start(ctx.Done())
	dinf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, nsInf.HasSynced, r.pools.HasSynced, r.l2Ads.HasSynced, r.bgpAds.HasSynced, r.nodes.HasSynced) {
		return ctx.Err()
	}
	// Initial load: pools first, then every Service that already holds addresses is re-registered before
	// anything new is handed out (MetalLB #1774, #2443 came from getting this order wrong).
	t0 := time.Now()
	r.mu.Lock()
	r.syncConfig(ctx, false)
	r.mu.Unlock()
	n := r.reprocessAll(ctx)
	r.log.Info("initial load done", "services", n, "pools", len(r.config.Names), "took", time.Since(t0).Round(time.Millisecond))
	if r.health != nil {
		r.health.loaded.Store(true)
	}
	go func() {
		t := time.NewTicker(r.cfg.FlushInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				r.queue.ShutDown()
				return
			case <-t.C:
				r.queue.Add(keyFlush)
			}
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r.processNext(ctx) {
			}
		}()
	}
	wg.Wait()
	return nil
}

func (r *reconciler) processNext(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	var err error
	switch key {
	case keyConfig:
		r.mu.Lock()
		r.syncConfig(ctx, true)
		r.mu.Unlock()
	case keyFlush:
		r.mu.Lock()
		writes := r.poolStatusesLocked()
		r.mu.Unlock()
		err = r.writePoolStatuses(ctx, writes)
	case keyState:
		err = r.writeConfigState(ctx)
	case keyInfra:
		r.mu.Lock()
		r.warnInfraOverlapsLocked()
		r.mu.Unlock()
	default:
		t := time.Now()
		err = r.syncService(ctx, key)
		r.m.syncSeconds.Observe(time.Since(t).Seconds())
	}
	r.m.k8s.Updates.Inc()
	if err != nil && ctx.Err() == nil {
		r.m.k8s.UpdateErrors.Inc()
		switch {
		case errors.Is(err, errFenced):
			r.log.Info("not written: this replica no longer holds the lease", "key", key, "err", err)
		case apierrors.IsConflict(err):
			r.log.Info("not written: the object changed since it was read; deciding again", "key", key, "err", err)
		default:
			r.log.Warn("sync failed; retrying", "key", key, "err", err)
		}
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

// syncConfig reloads pools; with requeue it re-examines every Service (addresses that left the pools,
// Services that were waiting for an address).
func (r *reconciler) syncConfig(ctx context.Context, requeue bool) {
	var crs []v1beta1.IPAddressPool
	for _, o := range r.pools.GetStore().List() {
		u := o.(*unstructured.Unstructured)
		var p v1beta1.IPAddressPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			r.log.Error("decoding ipaddresspool", "pool", u.GetName(), "err", err)
			continue
		}
		crs = append(crs, p)
		r.poolUIDs[p.Name] = p.UID
		for _, w := range config.PoolWarnings(&p) {
			r.log.Warn("ipaddresspool setting has no effect", "pool", p.Name, "warning", w)
			r.poolEvent(p.Name, corev1.EventTypeWarning, "ConfigurationWarning", w)
		}
	}
	nsLabels := map[string]map[string]string{}
	if nss, err := r.nss.List(everything()); err == nil {
		for _, ns := range nss {
			nsLabels[ns.Name] = ns.Labels
		}
	}
	// A pool that is gone is flushed once more, which deletes its gauges.
	for n := range r.poolUIDs {
		if !slices.ContainsFunc(crs, func(p v1beta1.IPAddressPool) bool { return p.Name == n }) {
			r.dirtyPools[n] = true
			delete(r.poolUIDs, n)
		}
	}
	pools, err := config.ParsePools(crs, nsLabels)
	r.config, r.configErr = pools, err
	if err != nil {
		r.log.Error("invalid configuration; invalid pools are ignored", "err", err)
		r.m.configValid.Set(0)
	} else {
		r.m.configValid.Set(1)
	}
	r.m.k8s.Config(err == nil)
	for _, k := range r.alloc.SetPools(pools.Allocator()) {
		r.log.Warn("address left its pool; allocating a new one", "service", k.Namespace+"/"+k.Name)
		if svc, err := r.svcs.Services(k.Namespace).Get(k.Name); err == nil {
			r.rec.Event(svc, corev1.EventTypeWarning, "AddressRevoked", "the Service's address is no longer in any IPAddressPool that may serve it; allocating a new one")
		}
		r.queue.Add(k.Namespace + "/" + k.Name)
	}
	for _, n := range pools.Names {
		r.dirtyPools[n] = true
	}
	for n, err := range pools.Invalid {
		r.dirtyPools[n] = true
		r.poolEvent(n, corev1.EventTypeWarning, "InvalidConfiguration", err.Error())
	}
	r.queue.Add(keyState)
	r.queue.Add(keyInfra)
	if requeue {
		svcs, _ := r.svcs.List(everything())
		for _, s := range svcs {
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
				r.queue.Add(s.Namespace + "/" + s.Name)
			}
		}
	}
}

// warnInfraOverlapsLocked warns, once per change, about each pool that holds a node's address, a pod
// CIDR, the Service CIDR (ServiceCIDR objects, else the kubernetes Service's ClusterIP) or an address
// of the apiserver (config.InfraOverlaps): a ConfigurationWarning event on
// the pool and a log line. The pool is still used, as MetalLB would.
func (r *reconciler) warnInfraOverlapsLocked() {
	in := config.Infra{NodeAddrs: map[string][]netip.Addr{}, PodCIDRs: map[string][]netip.Prefix{}}
	if r.nodes != nil {
		for _, o := range r.nodes.GetStore().List() {
			n, ok := o.(*corev1.Node)
			if !ok {
				continue
			}
			for _, a := range n.Status.Addresses {
				if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
					continue
				}
				if ip, err := netip.ParseAddr(a.Address); err == nil {
					in.NodeAddrs[n.Name] = append(in.NodeAddrs[n.Name], ip)
				}
			}
			for _, c := range n.Spec.PodCIDRs {
				if pr, err := netip.ParsePrefix(c); err == nil {
					in.PodCIDRs[n.Name] = append(in.PodCIDRs[n.Name], pr)
				}
			}
		}
	}
	if k, err := r.svcs.Services(metav1.NamespaceDefault).Get("kubernetes"); err == nil {
		for _, c := range k.Spec.ClusterIPs {
			if ip, err := netip.ParseAddr(c); err == nil {
				in.ServiceIPs = append(in.ServiceIPs, ip)
			}
		}
	}
	in.ServiceCIDRs, in.APIServerAddrs = r.infraObjects()
	seen := map[string]bool{}
	for _, o := range r.pools.GetStore().List() {
		u := o.(*unstructured.Unstructured)
		var p v1beta1.IPAddressPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			continue
		}
		ws := config.InfraOverlaps(&p, in)
		msg := strings.Join(ws, "; ")
		if len(ws) == 0 || r.infraWarned[p.Name] == msg {
			if len(ws) > 0 {
				seen[p.Name] = true
			}
			continue
		}
		seen[p.Name] = true
		r.infraWarned[p.Name] = msg
		r.log.Warn("ipaddresspool overlaps the cluster's own addresses; Services may get them", "pool", p.Name, "overlaps", msg)
		r.poolEvent(p.Name, corev1.EventTypeWarning, "ConfigurationWarning", msg)
	}
	for n := range r.infraWarned {
		if !seen[n] {
			delete(r.infraWarned, n)
		}
	}
}

// reprocessAll handles every Service once: first those that already hold addresses (re-registered as
// they are), then the rest. It returns how many LoadBalancer Services it saw.
func (r *reconciler) reprocessAll(ctx context.Context) int {
	svcs, _ := r.svcs.List(everything())
	sort.Slice(svcs, func(i, j int) bool {
		hi, hj := len(svcs[i].Status.LoadBalancer.Ingress) > 0, len(svcs[j].Status.LoadBalancer.Ingress) > 0
		if hi != hj {
			return hi
		}
		if !svcs[i].CreationTimestamp.Equal(&svcs[j].CreationTimestamp) {
			return svcs[i].CreationTimestamp.Before(&svcs[j].CreationTimestamp)
		}
		return svcs[i].Namespace+"/"+svcs[i].Name < svcs[j].Namespace+"/"+svcs[j].Name
	})
	n := 0
	for _, s := range svcs {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		n++
		key := s.Namespace + "/" + s.Name
		if err := r.syncService(ctx, key); err != nil {
			r.queue.AddRateLimited(key)
		}
	}
	return n
}

// syncService converges one Service: the decision is taken under mu (the allocator's owner lock), the
// API writes after it, so several workers overlap their round trips while decisions stay serial. The
// work queue never hands the same key to two workers. Errors are only for failed API writes (retried);
// allocation failures are reported on the Service and not retried until something changes.
func (r *reconciler) syncService(ctx context.Context, key string) error {
	r.mu.Lock()
	d, err := r.decideLocked(key)
	r.mu.Unlock()
	if err != nil || d == nil {
		return err
	}
	return r.act(ctx, d)
}

// decision is what decideLocked concluded for one Service: the addresses and pool its status and
// annotation must show (none: clear them). The allocator already holds the addresses for it.
type decision struct {
	svc  *corev1.Service // the object decided from (its resourceVersion fences the write)
	ips  []netip.Addr
	pool string
	// allocated: a new allocation (an IPAllocated event and a log line follow the write).
	allocated bool
}

// act writes a decision (outside mu).
func (r *reconciler) act(ctx context.Context, d *decision) error {
	if err := r.writeStatus(ctx, d.svc, d.ips, d.pool); err != nil {
		return err
	}
	if d.allocated {
		ips := make([]string, len(d.ips))
		for i, a := range d.ips {
			ips[i] = fmt.Sprintf("%q", a.String())
		}
		r.rec.Eventf(d.svc, corev1.EventTypeNormal, "IPAllocated", "Assigned IP [%s]", strings.Join(ips, " "))
		r.log.Info("address assigned", "service", d.svc.Namespace+"/"+d.svc.Name, "ip", d.ips, "pool", d.pool)
	}
	return nil
}

func (r *reconciler) statusWrite(svc *corev1.Service, ips []netip.Addr, pool string) *decision {
	return &decision{svc: svc, ips: ips, pool: pool}
}

// decideLocked decides one Service from the informer's copy and the allocator (held under mu): nil
// when its status and annotation are already right, else the decision to write. It makes no API
// call; events about failures are recorded here.
func (r *reconciler) decideLocked(key string) (*decision, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, nil
	}
	k := allocator.Key{Namespace: ns, Name: name}
	svc, err := r.svcs.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		r.release(k)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	switch config.Serves(svc, r.cfg.LBClass) {
	case config.NotLoadBalancer:
		r.release(k)
		if _, had := svc.Annotations[config.AnnotationAllocatedFromPool]; had {
			return r.statusWrite(svc, nil, ""), nil // we gave it an address: take it back
		}
		return nil, nil
	case config.OtherClass:
		// Another implementation's Service: never written, whatever it carries (MetalLB filters it
		// out before its handler). The class is immutable while the type is LoadBalancer, so it
		// cannot hold an address from us; release only drops a stale in-memory entry.
		r.release(k)
		return nil, nil
	}
	req, deprecated, err := config.Request(svc, r.config)
	for _, d := range deprecated {
		r.rec.Eventf(svc, corev1.EventTypeWarning, "deprecatedAnnotation", "annotation %s is deprecated; use %s", d, "metallb.io/"+strings.TrimPrefix(d, "metallb.universe.tf/"))
	}
	existing := config.IngressAddrs(svc)
	// Any ingress entry, even one that is not an address (a forged status), is cleared on failure.
	hasStatus := len(svc.Status.LoadBalancer.Ingress) > 0
	if err != nil {
		r.fail(svc, "InvalidService", err)
		r.release(k)
		if hasStatus {
			return r.statusWrite(svc, nil, ""), nil
		}
		return nil, nil
	}
	if len(existing) > 0 {
		if asg, err := r.alloc.Assign(req, existing); err == nil && fits(req, asg) {
			delete(r.waiting, k)
			r.dirtyPools[asg.Pool] = true
			// Kept: the status must show exactly these addresses (a forged extra entry, a hostname or
			// an IPv4-mapped form is rewritten) and the annotation their pool.
			if svc.Annotations[config.AnnotationAllocatedFromPool] != asg.Pool || !statusIs(svc, asg.IPs) {
				return r.statusWrite(svc, asg.IPs, asg.Pool), nil
			}
			return nil, nil
		} else if err != nil {
			r.log.Info("service's current address cannot be kept; allocating anew", "service", key, "ip", existing, "err", err)
		}
		r.release(k)
	}
	asg, err := r.alloc.Allocate(req)
	if err != nil {
		r.fail(svc, reason(err), err)
		if hasStatus {
			return r.statusWrite(svc, nil, ""), nil
		}
		return nil, nil
	}
	delete(r.waiting, k)
	r.dirtyPools[asg.Pool] = true
	r.m.allocations.WithLabelValues(asg.Pool).Inc()
	return &decision{svc: svc, ips: asg.IPs, pool: asg.Pool, allocated: true}, nil
}

// fits reports whether an assignment satisfies what the Service asks for now (pool annotation, dual stack).
func fits(req allocator.Request, asg allocator.Assignment) bool {
	if req.Pool != "" && asg.Pool != req.Pool {
		return false
	}
	if req.Policy == allocator.RequireDualStack && len(asg.IPs) < 2 {
		return false
	}
	return true
}

// release frees k's addresses, if it holds any, and then requeues every Service waiting for an
// address (in namespace/name order, the order MetalLB reprocesses them in). k itself stops waiting:
// whoever calls release either forgets it or decides it anew.
func (r *reconciler) release(k allocator.Key) {
	delete(r.waiting, k)
	asg, ok := r.alloc.Get(k)
	if !ok {
		return
	}
	r.alloc.Release(k)
	r.dirtyPools[asg.Pool] = true
	keys := make([]string, 0, len(r.waiting))
	for w := range r.waiting {
		keys = append(keys, w.Namespace+"/"+w.Name)
	}
	slices.Sort(keys)
	for _, w := range keys {
		r.queue.Add(w)
	}
}

func (r *reconciler) fail(svc *corev1.Service, why string, err error) {
	k := allocator.Key{Namespace: svc.Namespace, Name: svc.Name}
	msg := fmt.Sprintf("Failed to allocate IP for %q: %s: %v", svc.Namespace+"/"+svc.Name, why, err)
	r.m.failures.WithLabelValues(why).Inc()
	if last, ok := r.waiting[k]; !ok || last != msg { // else said already: still waiting, same reason
		r.rec.Event(svc, corev1.EventTypeWarning, "AllocationFailed", msg)
		r.log.Warn("allocation failed", "service", svc.Namespace+"/"+svc.Name, "reason", why, "err", err)
	}
	r.waiting[k] = msg
	if why == "PoolExhausted" {
		var pe interface{ PoolName() string }
		pool := ""
		if errors.As(err, &pe) {
			pool = pe.PoolName()
		}
		if pool != "" && !r.exhausted[pool] {
			r.exhausted[pool] = true
			r.dirtyPools[pool] = true
			r.poolEvent(pool, corev1.EventTypeWarning, "PoolExhausted", fmt.Sprintf("no free address for Service %s/%s", svc.Namespace, svc.Name))
		}
	}
}

// reason maps allocator errors to the reasons used in events and metrics.
func reason(err error) string {
	if r := allocator.ReasonOf(err); r != "" {
		return string(r)
	}
	return "Other"
}

// writeStatus sets (or with no ips clears) the Service's ingress and the ip-allocated-from-pool
// annotation. Both writes are fenced (beforeWrite) and carry the resourceVersion of svc, the object the
// decision was made from (the status write the version the annotation write returned): if the Service
// changed meanwhile, the write fails with a conflict and the Service is decided again.
func (r *reconciler) writeStatus(ctx context.Context, svc *corev1.Service, ips []netip.Addr, pool string) error {
	what := "service " + svc.Namespace + "/" + svc.Name
	want := make([]corev1.LoadBalancerIngress, 0, len(ips))
	vip := corev1.LoadBalancerIPModeVIP
	for _, a := range ips {
		want = append(want, corev1.LoadBalancerIngress{IP: a.String(), IPMode: &vip})
	}
	annotate := svc.Annotations[config.AnnotationAllocatedFromPool] != pool
	sameStatus := statusIs(svc, ips)
	if !annotate && sameStatus {
		return nil
	}
	if err := r.beforeWrite(ctx, what); err != nil {
		return err
	}
	rv := svc.ResourceVersion
	if annotate {
		var v any = pool
		if pool == "" {
			v = nil
		}
		patch, err := jsonMarshal(withResourceVersion(map[string]any{"metadata": map[string]any{"annotations": map[string]any{config.AnnotationAllocatedFromPool: v}}}, rv))
		if err != nil {
			return err
		}
		out, err := r.cs.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("annotating service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		rv = out.ResourceVersion
	}
	if sameStatus {
		return nil
	}
	patch, err := jsonMarshal(withResourceVersion(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": want}}}, rv))
	if err != nil {
		return err
	}
	if _, err := r.cs.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("updating status of service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// statusIs reports whether the Service's status.loadBalancer.ingress is exactly ips, in order, each
// entry an address in its canonical form and nothing else.
func statusIs(svc *corev1.Service, ips []netip.Addr) bool {
	ing := svc.Status.LoadBalancer.Ingress
	if len(ing) != len(ips) {
		return false
	}
	for i := range ing {
		if ing[i].IP != ips[i].String() || ing[i].Hostname != "" {
			return false
		}
	}
	return true
}

func (r *reconciler) poolEvent(pool, typ, reason, msg string) {
	ref := &corev1.ObjectReference{Kind: "IPAddressPool", APIVersion: "metallb.io/v1beta1", Namespace: r.cfg.Namespace, Name: pool, UID: r.poolUIDs[pool]}
	r.rec.Event(ref, typ, reason, msg)
}

// poolStatus is the status one pool's object must show: what poolStatusesLocked decided for a
// dirty pool, written by writePoolStatuses outside mu.
type poolStatus struct {
	name, rv string // rv: the version it was decided from (the write's precondition)
	status   map[string]any
}

// poolStatusesLocked updates the gauges of the pools changed since the last flush and returns the
// status each of them must show; they are no longer dirty (writePoolStatuses marks those it fails to
// write dirty again). It makes no API call: mu is held for decisions, never for API round trips
// (pool writes under mu stalled every allocation for as long as a flush of all pools took, seconds
// on a loaded apiserver: found by TestDifferentialAllocation).
func (r *reconciler) poolStatusesLocked() []poolStatus {
	var out []poolStatus
	for _, name := range slices.Sorted(maps.Keys(r.dirtyPools)) {
		delete(r.dirtyPools, name)
		obj, exists, _ := r.pools.GetStore().GetByKey(r.cfg.Namespace + "/" + name)
		if !exists {
			r.m.pools.Delete(name)
			continue
		}
		st, _ := r.alloc.Stats(name) // zero for an invalid pool
		r.setPoolGauges(name, st)
		if r.exhausted[name] && (st.AvailableV4 > 0 || st.AvailableV6 > 0) {
			r.exhausted[name] = false
		}
		var old []metav1.Condition
		rv := ""
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if raw, found, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); found {
				b, _ := jsonMarshal(raw)
				_ = json.Unmarshal(b, &old)
			}
			rv = u.GetResourceVersion()
		}
		conds := poolConditions(old, r.config.Invalid[name], r.exhausted[name], time.Now())
		out = append(out, poolStatus{name: name, rv: rv, status: map[string]any{
			"assignedIPv4": st.AssignedV4, "assignedIPv6": st.AssignedV6,
			"availableIPv4": st.AvailableV4, "availableIPv6": st.AvailableV6, "conditions": conds}})
	}
	return out
}

// writePoolStatuses writes each pool's counters and conditions to its status (without mu); a pool
// whose write fails is marked dirty again, and the errors are returned (the flush is retried).
func (r *reconciler) writePoolStatuses(ctx context.Context, writes []poolStatus) error {
	var errs []error
	for _, w := range writes {
		err := r.beforeWrite(ctx, "pool "+w.name)
		if err == nil {
			patch, _ := jsonMarshal(withResourceVersion(map[string]any{"status": w.status}, w.rv))
			_, err = r.dyn.Resource(v1beta1.IPAddressPoolGVR).Namespace(r.cfg.Namespace).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
			if apierrors.IsNotFound(err) {
				err = nil // deleted meanwhile: the next flush drops its gauges
			} else if err != nil {
				err = fmt.Errorf("pool %s status: %w", w.name, err)
			}
		}
		if err != nil {
			errs = append(errs, err)
			r.mu.Lock()
			r.dirtyPools[w.name] = true
			r.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// poolConditions computes a pool's Valid and Exhausted conditions, keeping transition times that did not
// change.
func poolConditions(old []metav1.Condition, invalid error, exhausted bool, now time.Time) []metav1.Condition {
	valid := metav1.Condition{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Loaded", Message: "the pool is in use"}
	if invalid != nil {
		valid = metav1.Condition{Type: "Valid", Status: metav1.ConditionFalse, Reason: "InvalidConfiguration", Message: invalid.Error()}
	}
	exh := metav1.Condition{Type: "Exhausted", Status: metav1.ConditionFalse, Reason: "AddressesAvailable", Message: "no Service is waiting for an address from this pool"}
	if exhausted {
		exh = metav1.Condition{Type: "Exhausted", Status: metav1.ConditionTrue, Reason: "PoolExhausted", Message: "a Service is waiting for an address this pool cannot give"}
	}
	out := []metav1.Condition{valid, exh}
	for i := range out {
		out[i].LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
		for _, o := range old {
			if o.Type == out[i].Type && o.Status == out[i].Status {
				out[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return out
}

// configStateName is the controller's ConfigurationState (MetalLB's name for it); each speaker
// writes its own (speaker-<node>).
const configStateName = config.ConfigStateController

// configState computes the ConfigurationState's status from the loaded pools and the advertisements,
// and reports each advertisement that selects nothing (config.SelectorErrors) once: a log line and a
// Warning event naming it and its bad selector.
func (r *reconciler) configState() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	bad := config.SelectorErrors(listAs[v1beta1.L2Advertisement](r.l2Ads), listAs[v1beta1.BGPAdvertisement](r.bgpAds))
	seen := map[string]bool{}
	var msgs []string
	for _, e := range bad {
		k := e.Kind + "/" + e.Name
		seen[k] = true
		msgs = append(msgs, e.Error())
		if r.badSelectors[k] == e.Error() {
			continue
		}
		r.badSelectors[k] = e.Error()
		r.log.Warn("advertisement selects nothing: a selector does not parse", "kind", e.Kind, "advertisement", e.Name, "field", e.Field, "err", e.Err)
		ref := &corev1.ObjectReference{Kind: e.Kind, APIVersion: "metallb.io/v1beta1", Namespace: e.Namespace, Name: e.Name}
		if inf := map[string]cache.SharedIndexInformer{"L2Advertisement": r.l2Ads, "BGPAdvertisement": r.bgpAds}[e.Kind]; inf != nil {
			if o, ok, _ := inf.GetStore().GetByKey(e.Namespace + "/" + e.Name); ok {
				if u, ok := o.(*unstructured.Unstructured); ok {
					ref.UID = u.GetUID()
				}
			}
		}
		r.rec.Event(ref, corev1.EventTypeWarning, "InvalidSelector", e.Error())
	}
	for k := range r.badSelectors {
		if !seen[k] {
			delete(r.badSelectors, k)
		}
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	var poolProblems []string
	if r.configErr != nil {
		poolProblems = []string{r.configErr.Error()}
	}
	pools := config.ConfigCondition(config.ConditionPoolValid, poolProblems)
	ads := config.ConfigCondition("advertisementSelectorsValid", msgs)
	pools.LastTransitionTime, ads.LastTransitionTime = now, now
	conds := []metav1.Condition{pools, ads}
	result, summary := config.ConfigStateStatus(conds) // MetalLB's rule, shared with the speakers
	return map[string]any{"result": string(result), "errorSummary": summary, "conditions": conds}
}

// writeConfigState publishes whether the loaded configuration is valid (MetalLB's ConfigurationState,
// with a condition for the pools and one for the advertisements' selectors). Like every write it is
// fenced and carries the resourceVersion it read; a conflict is retried through the queue.
func (r *reconciler) writeConfigState(ctx context.Context) error {
	status := r.configState()
	c := r.dyn.Resource(v1beta1.ConfigurationStateGVR).Namespace(r.cfg.Namespace)
	if err := r.beforeWrite(ctx, "configurationstate"); err != nil {
		return err
	}
	cur, err := c.Get(ctx, configStateName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "ConfigurationState",
			"metadata": map[string]any{"name": configStateName, "namespace": r.cfg.Namespace,
				"labels": map[string]any{config.LabelComponentType: "controller"}},
		}}
		cur, err = c.Create(ctx, obj, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("configurationstate %s: %w", configStateName, err)
	}
	// Keep the transition times of conditions whose status did not change.
	if raw, found, _ := unstructured.NestedSlice(cur.Object, "status", "conditions"); found {
		var old []metav1.Condition
		if b, err := jsonMarshal(raw); err == nil && json.Unmarshal(b, &old) == nil {
			conds := status["conditions"].([]metav1.Condition)
			for i := range conds {
				for _, o := range old {
					if o.Type == conds[i].Type && o.Status == conds[i].Status {
						conds[i].LastTransitionTime = o.LastTransitionTime
					}
				}
			}
		}
	}
	b, err := jsonMarshal(withResourceVersion(map[string]any{"status": status}, cur.GetResourceVersion()))
	if err != nil {
		return err
	}
	if _, err := c.Patch(ctx, configStateName, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("updating configurationstate %s: %w", configStateName, err)
	}
	return nil
}
