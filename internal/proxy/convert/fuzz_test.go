package convert

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// FuzzService feeds arbitrary addresses, ports, protocols, policies and endpoint fields into a
// Service and its EndpointSlice (the rule builder's input, as the apiserver may hand it over, with
// what its validation would refuse too): Service never panics; a Service it converts has a valid
// ClusterIP, only valid addresses and source ranges, ports within 1–65535, and endpoints with valid
// addresses; a skipped one says why.
func FuzzService(f *testing.F) {
	f.Add("10.96.0.10", "172.18.255.200", "192.0.2.0/24", int32(80), int32(30080), "TCP", "http", "10.10.1.5", "node-a", "Local", int32(10800), int32(8080), true)
	f.Add("None", "", "", int32(0), int32(0), "SCTP", "", "", "", "", int32(0), int32(0), false)
	f.Add("fd00::10", "::ffff:1.2.3.4", "fd00::/200", int32(70000), int32(-1), "udp", "dns", "fd00:10:10::5", "", "Cluster", int32(-5), int32(0), false)
	f.Fuzz(func(t *testing.T, clusterIP, lbIP, srcRange string, port, nodePort int32, proto, targetName, epAddr, epNode, etp string,
		affinity, epPort int32, ready bool) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
				ExternalIPs: []string{lbIP}, LoadBalancerSourceRanges: []string{srcRange},
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicy(etp), SessionAffinity: corev1.ServiceAffinityClientIP,
				SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &affinity}},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.Protocol(proto), Port: port, NodePort: nodePort,
					TargetPort: intstr.FromString(targetName)}}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: lbIP}}}}}
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.Protocol(proto)), Port: ptr.To(epPort)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{epAddr}, NodeName: ptr.To(epNode),
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
		out, skip, warns := Service(svc, []*discoveryv1.EndpointSlice{es}, thisNode)
		for _, w := range warns {
			if w.Reason == "" || w.Message == "" {
				t.Fatalf("warning without reason or message: %+v", w)
			}
		}
		if out == nil {
			if skip == NotSkipped {
				t.Fatal("skipped without a reason")
			}
			return
		}
		if len(out.ClusterIPs) == 0 {
			t.Fatal("converted without a ClusterIP")
		}
		for _, set := range [][]netip.Addr{out.ClusterIPs, out.ExternalIPs, out.LoadBalancerIPs} {
			for _, a := range set {
				if !a.IsValid() {
					t.Fatalf("invalid address in %+v", out)
				}
			}
		}
		for _, p := range out.LoadBalancerSourceRanges {
			if !p.IsValid() {
				t.Fatalf("invalid source range in %+v", out)
			}
		}
		for _, p := range out.Ports {
			if p.Port == 0 {
				t.Fatalf("port 0 in %+v", out)
			}
			for _, e := range p.Endpoints {
				if !e.Addr.IsValid() || e.Port == 0 {
					t.Fatalf("invalid endpoint %+v", e)
				}
			}
		}
		if out.SessionAffinityTimeout < 0 || out.SessionAffinityTimeout > 24*time.Hour {
			t.Fatalf("affinity timeout %v", out.SessionAffinityTimeout)
		}
	})
}

// FuzzParseMACs: any annotation value either parses into addresses that FormatMACs writes back to a
// value parsing to the same list, or is refused; never a panic.
func FuzzParseMACs(f *testing.F) {
	for _, s := range []string{"02:42:ac:12:00:03", "02:42:AC:12:00:04, 02:42:ac:12:00:03", "", ",", "zz:zz:zz:zz:zz:zz", "02:42:ac:12:00:03:00:01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		macs, err := ParseMACs(s)
		if err != nil {
			return
		}
		if len(macs) == 0 {
			t.Fatalf("%q parsed into no address without an error", s)
		}
		back, err := ParseMACs(FormatMACs(macs))
		if err != nil || len(back) != len(macs) {
			t.Fatalf("%q: %v does not round-trip: %v, %v", s, macs, back, err)
		}
		for i := range back {
			if back[i] != macs[i] {
				t.Fatalf("%q: %v does not round-trip: %v", s, macs, back)
			}
		}
	})
}
