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
	"net/netip"
	"os"
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
	LBClass     string // serve Services with this loadBalancerClass (and those with none)
	Kubeconfig  string // "" = in-cluster
	MetricsAddr string // Prometheus endpoint, "" disables
	// MetricsSecure serves MetricsAddr over HTTPS to authorized clients only (kube.ServeSecureMetrics);
	// false serves plain HTTP to anyone (bind it to 127.0.0.1).
	MetricsSecure  bool
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
}

const (
	workers   = 8 // goroutines overlapping API round trips; decisions stay serial under mu
	keyConfig = "~config"
	keyFlush  = "~flush"
	component = "ironlb-controller"
)

// Run runs the controller until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "controller")
	cs, dyn, err := kube.Clients(cfg.Kubeconfig, component, 500, 1000)
	if err != nil {
		return err
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Second
	}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
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
			if err := wh.serve(ctx); err != nil {
				log.Error("admission webhook", "err", err)
			}
		}()
	}
	if !cfg.LeaderElect {
		m.leader.Set(1)
		return newReconciler(cs, dyn, cfg, m, log).run(ctx)
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
			Lock: lock, ReleaseOnCancel: !cfg.KeepLeaseOnCancel,
			LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					started.Store(true)
					log.Info("became leader", "identity", id)
					m.leader.Set(1)
					done <- newReconciler(cs, dyn, cfg, m, log).run(ctx)
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
			if err := <-done; err != nil && ctx.Err() == nil {
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

	svcs  corelisters.ServiceLister
	nss   corelisters.NamespaceLister
	pools cache.SharedIndexInformer

	mu         sync.Mutex // guards the allocator and the fields below; held for decisions, never for API calls
	alloc      *allocator.Allocator
	config     *config.Pools
	configErr  error
	dirtyPools map[string]bool
	poolUIDs   map[string]types.UID
	exhausted  map[string]bool
	events     record.EventBroadcaster // shut down when run returns (a term ends)
}

func newReconciler(cs kubernetes.Interface, dyn dynamic.Interface, cfg Config, m *metrics, log *slog.Logger) *reconciler {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	return &reconciler{
		cs: cs, dyn: dyn, cfg: cfg, m: m, log: log, events: b,
		rec:        b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}),
		queue:      workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		alloc:      allocator.New(),
		dirtyPools: map[string]bool{},
		poolUIDs:   map[string]types.UID{},
		exhausted:  map[string]bool{},
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
	inf.Start(ctx.Done())
	dinf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, nsInf.HasSynced, r.pools.HasSynced) {
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
		err = r.flushPools(ctx)
		r.mu.Unlock()
	default:
		t := time.Now()
		err = r.syncService(ctx, key)
		r.m.syncSeconds.Observe(time.Since(t).Seconds())
	}
	if err != nil && ctx.Err() == nil {
		r.log.Warn("sync failed; retrying", "key", key, "err", err)
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
	}
	nsLabels := map[string]map[string]string{}
	if nss, err := r.nss.List(everything()); err == nil {
		for _, ns := range nss {
			nsLabels[ns.Name] = ns.Labels
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
	r.writeConfigState(ctx)
	if requeue {
		svcs, _ := r.svcs.List(everything())
		for _, s := range svcs {
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
				r.queue.Add(s.Namespace + "/" + s.Name)
			}
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
	write, err := r.decideLocked(key)
	r.mu.Unlock()
	if err != nil || write == nil {
		return err
	}
	return write(ctx)
}

type writeFunc func(ctx context.Context) error

func (r *reconciler) statusWrite(svc *corev1.Service, ips []netip.Addr, pool string) writeFunc {
	return func(ctx context.Context) error { return r.writeStatus(ctx, svc, ips, pool) }
}

func (r *reconciler) decideLocked(key string) (writeFunc, error) {
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
	if !config.Ours(svc, r.cfg.LBClass) {
		r.release(k)
		if _, had := svc.Annotations[config.AnnotationAllocatedFromPool]; had {
			return r.statusWrite(svc, nil, ""), nil // we gave it an address: take it back
		}
		return nil, nil
	}
	req, deprecated, err := config.Request(svc, r.config)
	for _, d := range deprecated {
		r.rec.Eventf(svc, corev1.EventTypeWarning, "deprecatedAnnotation", "annotation %s is deprecated; use %s", d, "metallb.io/"+strings.TrimPrefix(d, "metallb.universe.tf/"))
	}
	existing := config.IngressAddrs(svc)
	if err != nil {
		r.fail(svc, "InvalidService", err)
		r.release(k)
		if len(existing) > 0 {
			return r.statusWrite(svc, nil, ""), nil
		}
		return nil, nil
	}
	if len(existing) > 0 {
		if asg, err := r.alloc.Assign(req, existing); err == nil && fits(req, asg) {
			r.dirtyPools[asg.Pool] = true
			if svc.Annotations[config.AnnotationAllocatedFromPool] != asg.Pool {
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
		if len(existing) > 0 {
			return r.statusWrite(svc, nil, ""), nil
		}
		return nil, nil
	}
	r.dirtyPools[asg.Pool] = true
	r.m.allocations.WithLabelValues(asg.Pool).Inc()
	return func(ctx context.Context) error {
		if err := r.writeStatus(ctx, svc, asg.IPs, asg.Pool); err != nil {
			return err
		}
		ips := make([]string, len(asg.IPs))
		for i, a := range asg.IPs {
			ips[i] = fmt.Sprintf("%q", a.String())
		}
		r.rec.Eventf(svc, corev1.EventTypeNormal, "IPAllocated", "Assigned IP [%s]", strings.Join(ips, " "))
		r.log.Info("address assigned", "service", key, "ip", asg.IPs, "pool", asg.Pool)
		return nil
	}, nil
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

func (r *reconciler) release(k allocator.Key) {
	if asg, ok := r.alloc.Get(k); ok {
		r.alloc.Release(k)
		r.dirtyPools[asg.Pool] = true
	}
}

func (r *reconciler) fail(svc *corev1.Service, why string, err error) {
	r.m.failures.WithLabelValues(why).Inc()
	r.rec.Eventf(svc, corev1.EventTypeWarning, "AllocationFailed", "Failed to allocate IP for %q: %s: %v", svc.Namespace+"/"+svc.Name, why, err)
	r.log.Warn("allocation failed", "service", svc.Namespace+"/"+svc.Name, "reason", why, "err", err)
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

// writeStatus sets (or with no ips clears) the Service's ingress and the ip-allocated-from-pool annotation.
func (r *reconciler) writeStatus(ctx context.Context, svc *corev1.Service, ips []netip.Addr, pool string) error {
	if ctx.Err() != nil {
		return ctx.Err() // leadership or the process is ending: a former leader must not write
	}
	var ann string
	if pool == "" {
		ann = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, config.AnnotationAllocatedFromPool)
	} else {
		ann = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, config.AnnotationAllocatedFromPool, pool)
	}
	if svc.Annotations[config.AnnotationAllocatedFromPool] != pool {
		if _, err := r.cs.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, []byte(ann), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("annotating service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	want := make([]corev1.LoadBalancerIngress, 0, len(ips))
	vip := corev1.LoadBalancerIPModeVIP
	for _, a := range ips {
		want = append(want, corev1.LoadBalancerIngress{IP: a.String(), IPMode: &vip})
	}
	cur := config.IngressAddrs(svc)
	if len(cur) == len(ips) && len(svc.Status.LoadBalancer.Ingress) == len(ips) {
		same := true
		for i := range cur {
			same = same && cur[i] == ips[i]
		}
		if same {
			return nil
		}
	}
	patch, err := jsonMarshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": want}}})
	if err != nil {
		return err
	}
	if _, err := r.cs.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("updating status of service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

func (r *reconciler) poolEvent(pool, typ, reason, msg string) {
	ref := &corev1.ObjectReference{Kind: "IPAddressPool", APIVersion: "metallb.io/v1beta1", Namespace: r.cfg.Namespace, Name: pool, UID: r.poolUIDs[pool]}
	r.rec.Event(ref, typ, reason, msg)
}

// flushPools writes the counters and conditions of changed pools to their status, and the gauges.
func (r *reconciler) flushPools(ctx context.Context) error {
	var errs []error
	for name := range r.dirtyPools {
		obj, exists, _ := r.pools.GetStore().GetByKey(r.cfg.Namespace + "/" + name)
		if !exists {
			delete(r.dirtyPools, name)
			continue
		}
		st, _ := r.alloc.Stats(name) // zero for an invalid pool
		r.m.inUse.WithLabelValues(name, "ipv4").Set(float64(st.AssignedV4))
		r.m.inUse.WithLabelValues(name, "ipv6").Set(float64(st.AssignedV6))
		r.m.total.WithLabelValues(name, "ipv4").Set(float64(st.AvailableV4 + st.AssignedV4))
		r.m.total.WithLabelValues(name, "ipv6").Set(float64(st.AvailableV6 + st.AssignedV6))
		if r.exhausted[name] && (st.AvailableV4 > 0 || st.AvailableV6 > 0) {
			r.exhausted[name] = false
		}
		var old []metav1.Condition
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if raw, found, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); found {
				b, _ := jsonMarshal(raw)
				_ = json.Unmarshal(b, &old)
			}
		}
		conds := poolConditions(old, r.config.Invalid[name], r.exhausted[name], time.Now())
		patch, _ := jsonMarshal(map[string]any{"status": map[string]any{
			"assignedIPv4": st.AssignedV4, "assignedIPv6": st.AssignedV6,
			"availableIPv4": st.AvailableV4, "availableIPv6": st.AvailableV6, "conditions": conds}})
		_, err := r.dyn.Resource(v1beta1.IPAddressPoolGVR).Namespace(r.cfg.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("pool %s status: %w", name, err))
			continue
		}
		delete(r.dirtyPools, name)
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

// writeConfigState publishes whether the loaded configuration is valid (MetalLB's ConfigurationState).
func (r *reconciler) writeConfigState(ctx context.Context) {
	result, summary := "Valid", ""
	if r.configErr != nil {
		result, summary = "Invalid", r.configErr.Error()
	}
	c := r.dyn.Resource(v1beta1.ConfigurationStateGVR).Namespace(r.cfg.Namespace)
	name := "controller"
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "ConfigurationState",
		"metadata": map[string]any{"name": name, "namespace": r.cfg.Namespace,
			"labels": map[string]any{"metallb.io/component-type": "controller"}},
	}}
	if _, err := c.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		r.log.Warn("creating ConfigurationState", "err", err)
		return
	}
	status := map[string]any{"result": result, "errorSummary": summary}
	patch := map[string]any{"status": status}
	b, _ := jsonMarshal(patch)
	if _, err := c.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		r.log.Warn("updating ConfigurationState", "err", err)
	}
}
