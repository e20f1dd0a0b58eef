package chaos

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLBServices: only LoadBalancer Services are kept, with the fields the allocation and dataplane
// checks read, and an ingress IP that does not parse is skipped.
func TestLBServices(t *testing.T) {
	lb := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Annotations: map[string]string{
			"metallb.io/address-pool": "p", "metallb.io/allow-shared-ip": "k"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector: map[string]string{"b": "2", "a": "1"},
			Ports:    []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}, {Protocol: corev1.ProtocolUDP, Port: 53}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
			{IP: "10.0.0.1"}, {Hostname: "no-ip.example"}, {IP: "fd00::1"}}}},
	}
	plain := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	bare := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	got := lbServices([]corev1.Service{lb, plain, bare})
	want := []Svc{
		{Key: "ns/a", IPs: []netip.Addr{ip("10.0.0.1"), ip("fd00::1")}, Pool: "p", SharingKey: "k", Local: true, Selector: "a=1,b=2",
			Ports: []Port{{"TCP", 80}, {"UDP", 53}}},
		{Key: "ns/c"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("lbServices (-want +got):\n%s", diff)
	}
}
