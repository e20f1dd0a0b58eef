package controller

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/config"
)

// staticInformer is an informer that is never run: its store holds objs (as unstructured), which is
// all the webhook and the reconciler read from it.
func staticInformer(objs ...any) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	for _, o := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			panic(err)
		}
		_ = inf.GetStore().Add(&unstructured.Unstructured{Object: u})
	}
	return inf
}

func serviceLister(svcs ...*corev1.Service) (corelisters.ServiceLister, cache.Indexer) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, s := range svcs {
		_ = idx.Add(s)
	}
	return corelisters.NewServiceLister(idx), idx
}

// The Service holding 10.0.0.7 in the fuzz targets: sharing key "k", TCP/80, selector app=holder.
func fuzzHolder() *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: "default", ResourceVersion: "1",
		Annotations: map[string]string{config.AnnotationAllowSharedIP: "k", config.AnnotationAllocatedFromPool: "p4"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "holder"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "10.0.0.7"}}}}}
}

func fuzzPools() []v1beta1.IPAddressPool {
	p := func(name string, avoid bool, addrs ...string) v1beta1.IPAddressPool {
		return v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1beta1.IPAddressPoolSpec{Addresses: addrs, AvoidBuggyIPs: avoid}}
	}
	return []v1beta1.IPAddressPool{p("p4", false, "10.0.0.0/28"), p("p6", false, "fd00::/124"), p("avoid", true, "10.1.0.0/24")}
}

// FuzzWebhook sends arbitrary AdmissionReviews (raw bytes, and well-formed reviews around arbitrary
// objects, every operation) to every admission handler. Properties: a body that is not an
// AdmissionReview with a request is a 400; otherwise the answer is a well-formed review whose
// response carries the request's UID and no request, a refusal always carries a message, DELETE is
// refused only by the BFDProfile handler, the answer is the same when asked twice, and the Service
// handler never admits a Service asking for the holder's shared address with a clashing port or
// another backend.
func FuzzWebhook(f *testing.F) {
	svcs, _ := serviceLister(fuzzHolder())
	w := &webhook{cfg: Config{Namespace: ns}, log: slog.New(slog.DiscardHandler), svcs: svcs,
		pools: staticInformer(&fuzzPools()[0]), bgpAds: staticInformer(), communities: staticInformer(), peers: staticInformer(), nodes: staticInformer()}
	handlers := []http.HandlerFunc{w.handle(w.validatePool), w.handle(w.validatePeer), w.handle(w.validateL2Advertisement),
		w.handle(w.validateBGPAdvertisement), w.handle(w.validateCommunity),
		w.handleWithDelete(w.validateBFDProfile, w.validateBFDProfileDeletion), w.handle(w.validateService)}
	const serviceHandler, bfdHandler = 6, 5
	f.Add(uint8(0), []byte(`{}`), "CREATE", "u1", []byte(`{"metadata":{"name":"p","namespace":"metallb-system"},"spec":{"addresses":["10.0.0.0/29"]}}`), []byte(nil))
	f.Add(uint8(2), []byte(`{"request":null}`), "UPDATE", "u2", []byte(`{"metadata":{"name":"a","namespace":"metallb-system"},"spec":{"ipAddressPoolSelectors":[{"matchLabels":{"a":"b c"}}]}}`), []byte(`{}`))
	f.Add(uint8(5), []byte(`not json`), "DELETE", "", []byte(nil), []byte(`{"metadata":{"name":"x"}}`))
	f.Add(uint8(6), []byte(`{"request":{"uid":"x"}}`), "CREATE", "u3",
		[]byte(`{"metadata":{"name":"s","namespace":"default","annotations":{"metallb.io/allow-shared-ip":"k","metallb.io/loadBalancerIPs":"10.0.0.7"}},"spec":{"type":"LoadBalancer","ports":[{"port":80,"protocol":"TCP"}]}}`), []byte(nil))
	f.Add(uint8(6), []byte(`{"request":{"uid":"y","operation":"CONNECT"}}`), "UPDATE", "u4",
		[]byte(`{"metadata":{"name":"s","namespace":"default","annotations":{"metallb.io/allow-shared-ip":"k","metallb.io/loadBalancerIPs":"10.0.0.7"}},"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","ports":[{"port":80,"protocol":"UDP"}]}}`), []byte(nil))
	f.Fuzz(func(t *testing.T, which uint8, body []byte, op, uid string, obj, old []byte) {
		hi := int(which) % len(handlers)
		h := handlers[hi]
		bodies := [][]byte{body}
		req := &admissionv1.AdmissionRequest{UID: types.UID(uid), Operation: admissionv1.Operation(op)}
		if json.Valid(obj) {
			req.Object.Raw = obj
		}
		if json.Valid(old) {
			req.OldObject.Raw = old
		}
		if b, err := json.Marshal(admissionv1.AdmissionReview{Request: req}); err == nil {
			bodies = append(bodies, b)
		}
		for _, b := range bodies {
			call := func() *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(b)))
				return rec
			}
			rec := call()
			var in admissionv1.AdmissionReview
			if json.Unmarshal(b, &in) != nil || in.Request == nil {
				if rec.Code != http.StatusBadRequest {
					t.Fatalf("%q: status %d, want 400", b, rec.Code)
				}
				continue
			}
			var out admissionv1.AdmissionReview
			if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Response == nil {
				t.Fatalf("%q: answer %d %q is not an AdmissionReview with a response", b, rec.Code, rec.Body.String())
			}
			r := out.Response
			if r.UID != in.Request.UID || out.Request != nil {
				t.Fatalf("%q: answer UID %q (want %q), request echoed: %v", b, r.UID, in.Request.UID, out.Request != nil)
			}
			if !r.Allowed && (r.Result == nil || r.Result.Message == "") {
				t.Fatalf("%q: refused without a message", b)
			}
			if !r.Allowed && in.Request.Operation == admissionv1.Delete && hi != bfdHandler {
				t.Fatalf("%q: DELETE refused by handler %d", b, hi)
			}
			if again := call(); !bytes.Equal(again.Body.Bytes(), rec.Body.Bytes()) {
				t.Fatalf("%q: two answers: %q, then %q", b, rec.Body.String(), again.Body.String())
			}
			if hi != serviceHandler || !r.Allowed || (in.Request.Operation != admissionv1.Create && in.Request.Operation != admissionv1.Update) {
				continue
			}
			var svc corev1.Service
			if json.Unmarshal(in.Request.Object.Raw, &svc) != nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer ||
				(svc.Namespace == "default" && svc.Name == "holder") {
				continue
			}
			sreq, _, err := config.Request(&svc, nil)
			if err != nil || sreq.SharingKey != "k" || !slices.Contains(sreq.Requested, netip.MustParseAddr("10.0.0.7")) {
				continue
			}
			hreq, _, _ := config.Request(fuzzHolder(), nil)
			if _, clash := portClash(sreq.Ports, hreq.Ports); clash || sreq.BackendKey != hreq.BackendKey {
				t.Fatalf("%q: admitted a Service that can never share 10.0.0.7 with the holder", b)
			}
		}
	})
}

// newFuzzReconciler is a reconciler over static listers (no apiserver): what decideLocked needs.
func newFuzzReconciler(t *testing.T, svcs ...*corev1.Service) (*reconciler, cache.Indexer) {
	lister, idx := serviceLister(svcs...)
	pools, _ := config.ParsePools(fuzzPools(), nil)
	r := &reconciler{cfg: Config{Namespace: ns}, m: newMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler),
		rec: &record.FakeRecorder{}, svcs: lister, alloc: allocator.New(), config: pools,
		dirtyPools: map[string]bool{}, poolUIDs: map[string]types.UID{}, exhausted: map[string]bool{}, badSelectors: map[string]string{},
		waiting: map[allocator.Key]string{}, queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	t.Cleanup(r.queue.ShutDown)
	r.alloc.SetPools(pools.Allocator())
	return r, idx
}

// apply stores what a decision writes into the lister's copy of the Service, as the informer would
// show it after the write.
func apply(t *testing.T, idx cache.Indexer, d *decision) {
	svc := d.svc.DeepCopy()
	if d.pool == "" {
		delete(svc.Annotations, config.AnnotationAllocatedFromPool)
	} else {
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[config.AnnotationAllocatedFromPool] = d.pool
	}
	svc.Status.LoadBalancer.Ingress = nil
	for _, a := range d.ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a.String()})
	}
	if err := idx.Update(svc); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecision: the controller's decision on a Service with a forged status (any ingress entries),
// a forged ip-allocated-from-pool annotation, any requested addresses, sharing key, port and
// traffic policy, beside a Service holding 10.0.0.7. Properties: the holder keeps its address; the
// status the Service ends with (the one written, or the one kept when nothing is written) is exactly
// what the allocator holds for it, every address in a valid pool and the annotation naming that
// pool, so an address outside every pool or in another Service's hands is never kept; deciding
// again after the write writes nothing and changes nothing (idempotent); a fresh controller decides
// the same (deterministic).
func FuzzDecision(f *testing.F) {
	f.Add("10.0.0.7", "", "p4", "", "", uint16(80), false, false)
	f.Add("10.0.0.7", "", "p4", "", "k", uint16(443), false, false)
	f.Add("10.0.0.7", "", "p4", "", "k", uint16(80), true, false)
	f.Add("10.9.9.9", "fd00::3", "p6", "", "", uint16(80), false, true)
	f.Add("10.0.0.3", "hostname", "p4", "", "", uint16(80), false, false)
	f.Add("10.0.0.3", "10.0.0.3", "p4", "", "", uint16(80), false, false)
	f.Add("", "", "", "10.1.0.0", "", uint16(80), false, false)
	f.Add("10.1.0.255", "", "avoid", "", "", uint16(80), false, false)
	f.Add("::ffff:10.0.0.4", "", "p4", "10.0.0.4", "", uint16(80), false, false)
	f.Fuzz(func(t *testing.T, ing1, ing2, fromPool, lbIPs, shareKey string, port uint16, udp, local bool) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "forger", Namespace: "default", ResourceVersion: "1", Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "holder"},
				Ports: []corev1.ServicePort{{Port: int32(port), Protocol: corev1.ProtocolTCP}}}}
		if udp {
			svc.Spec.Ports[0].Protocol = corev1.ProtocolUDP
		}
		if local {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		for k, v := range map[string]string{config.AnnotationAllocatedFromPool: fromPool, config.AnnotationLoadBalancerIPs: lbIPs, config.AnnotationAllowSharedIP: shareKey} {
			if v != "" {
				svc.Annotations[k] = v
			}
		}
		for _, ip := range []string{ing1, ing2} {
			if ip != "" {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
			}
		}
		type result struct {
			ips       []netip.Addr
			pool      string
			allocated bool
			written   bool
		}
		run := func() (*reconciler, cache.Indexer, result) {
			r, idx := newFuzzReconciler(t, fuzzHolder(), svc.DeepCopy())
			if d, err := r.decideLocked("default/holder"); err != nil || d != nil {
				t.Fatalf("the holder's own status is rewritten: %+v %v", d, err)
			}
			d, err := r.decideLocked("default/forger")
			if err != nil {
				t.Fatal(err)
			}
			if d == nil {
				return r, idx, result{}
			}
			apply(t, idx, d)
			return r, idx, result{ips: d.ips, pool: d.pool, allocated: d.allocated, written: true}
		}
		r, idx, got := run()
		if asg, ok := r.alloc.Get(allocator.Key{Namespace: "default", Name: "holder"}); !ok || len(asg.IPs) != 1 || asg.IPs[0] != netip.MustParseAddr("10.0.0.7") {
			t.Fatalf("the holder lost 10.0.0.7: %+v", asg)
		}
		now, _ := r.svcs.Services("default").Get("forger")
		asg, held := r.alloc.Get(allocator.Key{Namespace: "default", Name: "forger"})
		ingress := now.Status.LoadBalancer.Ingress
		if !held {
			if len(ingress) > 0 {
				t.Fatalf("status %v kept with no allocation behind it", ingress)
			}
		} else {
			if len(ingress) != len(asg.IPs) {
				t.Fatalf("status %v, allocator holds %v", ingress, asg.IPs)
			}
			for i, in := range ingress {
				if a, err := netip.ParseAddr(in.IP); err != nil || a != asg.IPs[i] {
					t.Fatalf("status %v, allocator holds %v", ingress, asg.IPs)
				}
			}
			p := r.config.ByName[asg.Pool]
			for _, a := range asg.IPs {
				if p == nil || !p.Contains(a) {
					t.Fatalf("%s kept outside its pool %q", a, asg.Pool)
				}
			}
			if now.Annotations[config.AnnotationAllocatedFromPool] != asg.Pool {
				t.Fatalf("annotation %q, allocated from %q", now.Annotations[config.AnnotationAllocatedFromPool], asg.Pool)
			}
		}
		// Idempotent: deciding again writes nothing and changes nothing.
		if d, err := r.decideLocked("default/forger"); err != nil || d != nil {
			t.Fatalf("second decision writes again: %+v %v (first %+v)", d, err, got)
		}
		if again, _ := r.alloc.Get(allocator.Key{Namespace: "default", Name: "forger"}); !slices.Equal(again.IPs, asg.IPs) {
			t.Fatalf("second decision moved the allocation from %v to %v", asg.IPs, again.IPs)
		}
		_ = idx
		// Deterministic.
		if _, _, got2 := run(); !slices.Equal(got.ips, got2.ips) || got.pool != got2.pool || got.allocated != got2.allocated || got.written != got2.written {
			t.Fatalf("two decisions: %+v and %+v", got, got2)
		}
	})
}
