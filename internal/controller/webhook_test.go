package controller

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// The webhook's decisions on AdmissionReviews (its wiring to a real apiserver is covered by the lab's
// e2e test, which applies an overlapping pool through kubectl).
func TestWebhookDecisions(t *testing.T) {
	holder := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: "default",
		Annotations: map[string]string{"metallb.io/allow-shared-ip": "k"}},
		Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "10.0.0.7"}}}}}
	cs := fake.NewSimpleClientset(holder)
	inf := informers.NewSharedInformerFactory(cs, 0)
	svcInf := inf.Core().V1().Services().Informer()
	stop := make(chan struct{})
	defer close(stop)
	inf.Start(stop)
	cache.WaitForCacheSync(stop, svcInf.HasSynced)
	pools := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	existing := v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "my-ippool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"172.18.255.200-172.18.255.250"}}}
	u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&existing)
	_ = pools.GetStore().Add(&unstructured.Unstructured{Object: u})
	w := &webhook{cfg: Config{Namespace: ns}, log: slog.New(slog.DiscardHandler), pools: pools, svcs: inf.Core().V1().Services().Lister()}

	review := func(h http.HandlerFunc, obj any) *admissionv1.AdmissionResponse {
		raw, _ := json.Marshal(obj)
		body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != "u1" {
			t.Fatalf("bad review response %q: %v", rec.Body.String(), err)
		}
		return out.Response
	}
	p := func(name string, addrs ...string) v1beta1.IPAddressPool {
		return v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1beta1.IPAddressPoolSpec{Addresses: addrs}}
	}
	elsewhere := p("elsewhere", "172.18.253.0/24")
	elsewhere.Namespace = "default"
	peer := func(name string, asn uint32, hold string) *v1beta2.BGPPeer {
		pr := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1beta2.BGPPeerSpec{MyASN: 64513, ASN: asn, Address: "172.18.255.254"}}
		if hold != "" {
			d, _ := time.ParseDuration(hold)
			pr.Spec.HoldTime = &metav1.Duration{Duration: d}
		}
		return pr
	}
	peerElsewhere := peer("r2", 64512, "")
	peerElsewhere.Namespace = "default"
	for _, tt := range []struct {
		obj  any
		want string // "" = allowed
		h    http.HandlerFunc
	}{
		{p("ok", "172.18.254.0/24"), "", w.handle(w.validatePool)},
		{p("my-ippool", "172.18.255.200-172.18.255.240"), "", w.handle(w.validatePool)},
		{p("overlap", "172.18.255.240/28"), "overlaps 172.18.255.200-172.18.255.250 of ipaddresspool my-ippool", w.handle(w.validatePool)},
		{p("reversed", "172.18.1.9-172.18.1.1"), "ipaddresspool reversed", w.handle(w.validatePool)},
		{elsewhere, `ipaddresspool elsewhere: must be created in namespace metallb-system, the only one ironlb reads (not "default")`, w.handle(w.validatePool)},
		{peer("r1", 64512, ""), "", w.handle(w.validatePeer)},
		{peer("bad-hold", 64512, "2s"), "BGPPeer bad-hold: spec.holdTime: invalid timers", w.handle(w.validatePeer)},
		{peer("no-asn", 0, ""), "BGPPeer no-asn: spec.peerASN", w.handle(w.validatePeer)},
		{peerElsewhere, "bgppeer r2: must be created in namespace metallb-system", w.handle(w.validatePeer)},
		{svcWith(map[string]string{"metallb.io/allow-shared-ip": "k", "metallb.io/loadBalancerIPs": "10.0.0.7"}, 443), "", w.handle(w.validateService)},
		{svcWith(map[string]string{"metallb.io/allow-shared-ip": "k", "metallb.io/loadBalancerIPs": "10.0.0.7"}, 80), "already uses TCP/80", w.handle(w.validateService)},
		{svcWith(map[string]string{"metallb.io/loadBalancerIPs": "10.0.0.1,10.0.0.2"}, 80), "same family", w.handle(w.validateService)},
		// Another implementation's Service (--lb-class): not judged, whatever it asks for.
		{withClass(svcWith(map[string]string{"metallb.io/loadBalancerIPs": "10.0.0.1,10.0.0.2"}, 80), "other.example/lb"), "", w.handle(w.validateService)},
		{withClass(svcWith(map[string]string{"metallb.io/allow-shared-ip": "k", "metallb.io/loadBalancerIPs": "10.0.0.7"}, 80), "other.example/lb"), "", w.handle(w.validateService)},
	} {
		resp := review(tt.h, tt.obj)
		if tt.want == "" && !resp.Allowed {
			t.Errorf("%T refused: %s", tt.obj, resp.Result.Message)
		}
		if tt.want != "" && (resp.Allowed || !strings.Contains(resp.Result.Message, tt.want)) {
			t.Errorf("%T: allowed=%v message %q, want refusal containing %q", tt.obj, resp.Allowed, msg(resp), tt.want)
		}
	}
}

func msg(r *admissionv1.AdmissionResponse) string {
	if r.Result == nil {
		return ""
	}
	return r.Result.Message
}

func withClass(s *corev1.Service, class string) *corev1.Service {
	s.Spec.LoadBalancerClass = &class
	return s
}

func svcWith(ann map[string]string, port int32) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "default", Annotations: ann},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: port, Protocol: corev1.ProtocolTCP}}}}
}
