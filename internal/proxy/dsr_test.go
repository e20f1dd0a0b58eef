package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/proxy/conntrack"
	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// fakeDSR records the plans applied.
type fakeDSR struct {
	plans []nftrules.DSRPlan
	slots map[string]int
}

func (f *fakeDSR) Apply(_ context.Context, plan *nftrules.DSRPlan) error {
	f.plans = append(f.plans, *plan)
	f.slots = plan.Slots
	return nil
}
func (f *fakeDSR) Slots() map[string]int { return f.slots }
func (f *fakeDSR) Warnings() []error     { return nil }

// fakeRecorder records events as "TYPE REASON ns/name: message".
type fakeRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *fakeRecorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := obj.(metav1.Object)
	r.events = append(r.events, fmt.Sprintf("%s %s %s/%s: %s", typ, reason, m.GetNamespace(), m.GetName(), fmt.Sprintf(format, args...)))
}

func dsrNode(name, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}

func dsrService(name, lbIP string, ann map[string]string, local bool) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name, Annotations: ann},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: lbIP}}}},
	}
	if local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns1", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.2.5"}, NodeName: ptr.To("node-b"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
	}
	return svc, es
}

// TestSyncDSR: after each sync the proxy applies the DSR plan of the Services in dsr mode (by
// annotation or by default); a Service whose DSR request is refused gets one Warning event, not
// one per sync.
func TestSyncDSR(t *testing.T) {
	web, webES := dsrService("web", "192.168.1.240", map[string]string{"ironlb.io/external-mode": "dsr"}, false)
	loc, locES := dsrService("loc", "192.168.1.241", map[string]string{"ironlb.io/external-mode": "dsr"}, true)
	plain, plainES := dsrService("plain", "192.168.1.242", nil, false)
	src := &staticSource{
		svcs:   []*corev1.Service{web, loc, plain},
		slices: []*discoveryv1.EndpointSlice{webES, locES, plainES},
		nodes:  []*corev1.Node{dsrNode("node-a", "192.168.0.10"), dsrNode("node-b", "192.168.0.11")},
	}
	p := testProxier(t, src, &recordingSyncer{}, loopConfig{})
	d := &fakeDSR{}
	rec := &fakeRecorder{}
	p.dsr, p.rec = d, rec
	ctx := context.Background()
	for range 2 {
		if err := p.sync(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.plans) != 2 {
		t.Fatalf("%d plans applied, want one per sync", len(d.plans))
	}
	plan := d.plans[1]
	if len(plan.Ports) != 1 || plan.Ports[0].Service.Name != "web" || plan.Ports[0].Addrs[0] != netip.MustParseAddr("192.168.1.240") {
		t.Errorf("ports %v, want ns1/web's only", plan.String())
	}
	if len(plan.Routes) != 1 || plan.Routes[0].Node != "node-b" || plan.Routes[0].IP != netip.MustParseAddr("192.168.0.11") {
		t.Errorf("routes %+v, want node-b via 192.168.0.11", plan.Routes)
	}
	want := []string{"Warning " + string(nftrules.RefuseLocalPolicy) + " ns1/loc: externalTrafficPolicy Local already keeps the client address and has no spread to keep; served as Local (snat mode)"}
	if fmt.Sprint(rec.events) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", rec.events, want)
	}

	// The proxy's default dsr takes in the Service without annotation.
	p.dsrDefault = nftrules.ExternalDSR
	if err := p.sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := d.plans[len(d.plans)-1].String(); len(d.plans[len(d.plans)-1].Ports) != 2 {
		t.Errorf("with --external-mode=dsr: ports\n%s want web and plain", got)
	}
}

// TestSyncDSRPeerMACs: the loop guard's peers are the MACs the other nodes' proxies published on
// their Nodes; a node whose annotation does not parse is left out (and logged), this node's own are
// not peers.
func TestSyncDSRPeerMACs(t *testing.T) {
	web, webES := dsrService("web", "192.168.1.240", map[string]string{"ironlb.io/external-mode": "dsr"}, false)
	a, b, c := dsrNode("node-a", "192.168.0.10"), dsrNode("node-b", "192.168.0.11"), dsrNode("node-c", "192.168.0.12")
	a.Annotations = map[string]string{convert.AnnotationDSRMACs: "02:00:00:00:00:0a"}
	b.Annotations = map[string]string{convert.AnnotationDSRMACs: "02:00:00:00:00:0b,02:00:00:00:00:bb"}
	c.Annotations = map[string]string{convert.AnnotationDSRMACs: "not a mac"}
	src := &staticSource{svcs: []*corev1.Service{web}, slices: []*discoveryv1.EndpointSlice{webES}, nodes: []*corev1.Node{a, b, c}}
	p := testProxier(t, src, &recordingSyncer{}, loopConfig{})
	d := &fakeDSR{}
	p.dsr = d
	if err := p.sync(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if got, want := d.plans[0].PeerMACs, []string{"02:00:00:00:00:0b", "02:00:00:00:00:bb"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("peer MACs %v, want %v", got, want)
	}
	if p.dsrBadMACs["node-c"] == "" {
		t.Errorf("node-c's bad annotation not recorded: %v", p.dsrBadMACs)
	}
}

// fakeNodes records status patches.
type fakeNodes struct {
	patches []string
	err     error
}

func (f *fakeNodes) PatchStatus(_ context.Context, name string, data []byte) (*corev1.Node, error) {
	f.patches = append(f.patches, name+" "+string(data))
	return nil, f.err
}

// TestMACPublisher: the proxy publishes the MACs of the interfaces that carry its Node's
// InternalIPs on its own Node, and patches only when they differ from the annotation.
func TestMACPublisher(t *testing.T) {
	mac := nftrules.EtherAddr{0x02, 0, 0, 0, 0, 0x0a}
	for _, tc := range []struct {
		name       string
		annotation string
		local      []nftrules.EtherAddr
		localErr   error
		want       []string
		wantErr    string
	}{
		{name: "none yet", local: []nftrules.EtherAddr{mac},
			want: []string{`node-a {"metadata":{"annotations":{"ironlb.io/dsr-macs":"02:00:00:00:00:0a"}}}`}},
		{name: "already published", annotation: "02:00:00:00:00:0A", local: []nftrules.EtherAddr{mac}},
		{name: "changed", annotation: "02:00:00:00:00:0b", local: []nftrules.EtherAddr{mac, {0x02, 0, 0, 0, 0, 0x0c}},
			want: []string{`node-a {"metadata":{"annotations":{"ironlb.io/dsr-macs":"02:00:00:00:00:0a,02:00:00:00:00:0c"}}}`}},
		{name: "a bad annotation is replaced", annotation: "junk", local: []nftrules.EtherAddr{mac},
			want: []string{`node-a {"metadata":{"annotations":{"ironlb.io/dsr-macs":"02:00:00:00:00:0a"}}}`}},
		{name: "no interface found: the annotation stays", annotation: "02:00:00:00:00:0b", wantErr: "no interface with an Ethernet address carries [192.168.0.10]"},
		{name: "interfaces not readable", localErr: fmt.Errorf("netlink: boom"), wantErr: "netlink: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := dsrNode("node-a", "192.168.0.10")
			if tc.annotation != "" {
				n.Annotations = map[string]string{convert.AnnotationDSRMACs: tc.annotation}
			}
			nodes := &fakeNodes{}
			var asked []netip.Addr
			pub := &macPublisher{node: "node-a", src: &staticSource{nodes: []*corev1.Node{n}}, nodes: nodes, log: slog.New(slog.DiscardHandler),
				local: func(ips []netip.Addr) ([]nftrules.EtherAddr, error) { asked = ips; return tc.local, tc.localErr }}
			err := pub.publish(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(asked) != "[192.168.0.10]" {
				t.Errorf("asked for the interfaces of %v, want the InternalIP 192.168.0.10", asked)
			}
			if fmt.Sprint(nodes.patches) != fmt.Sprint(tc.want) {
				t.Errorf("patches %q, want %q", nodes.patches, tc.want)
			}
		})
	}
}

// TestSyncDSRUDPMoved: after a DSR apply, the sync deletes this node's conntrack entries of UDP
// flows forwarded to an owner that left the port's owners (conntrack.DSRMoved): on the first plan
// the ones stuck on this node's own mark, after node-b's death those remembering node-b or this
// node, and nothing while the owners stay.
func TestSyncDSRUDPMoved(t *testing.T) {
	dns, es := dsrService("dns", "192.168.1.240", map[string]string{"ironlb.io/external-mode": "dsr"}, false)
	dns.Spec.Ports[0].Protocol = corev1.ProtocolUDP
	es.Ports[0].Protocol = ptr.To(corev1.ProtocolUDP)
	es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("node-a"),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	src := &staticSource{svcs: []*corev1.Service{dns}, slices: []*discoveryv1.EndpointSlice{es},
		nodes: []*corev1.Node{dsrNode("node-a", "192.168.0.10"), dsrNode("node-b", "192.168.0.11")}}
	p := testProxier(t, src, &recordingSyncer{}, loopConfig{})
	p.dsr = &fakeDSR{}
	ct := &conntrack.Fake{}
	p.ct = ct
	fe := &fakeEcho{up: map[string]bool{"node-b": true}}
	p.setEcho(fe)
	ctx := context.Background()
	// marked returns the filters with a mark (DSRMoved's) recorded since the last call.
	marked := func() string {
		var s []string
		for _, f := range ct.Filters() {
			if f.Mark != 0 {
				s = append(s, f.String())
			}
		}
		return strings.Join(s, ", ")
	}
	const (
		self  = "-p udp --orig-dst 192.168.1.240 --dport 80 --reply-src 192.168.1.240 --mark 3232235530" // 192.168.0.10
		nodeB = "-p udp --orig-dst 192.168.1.240 --dport 80 --reply-src 192.168.1.240 --mark 3232235531" // 192.168.0.11
	)
	for _, step := range []struct {
		what   string
		change func()
		want   string
	}{
		{"first plan", func() {}, self},
		{"no change", func() {}, ""},
		{"node-b dead", func() { fe.set("node-b", false); p.onEcho([]liveness.Down{{Peer: "node-b"}}) }, self + ", " + nodeB},
		{"node-b still dead", func() {}, ""},
	} {
		step.change()
		if err := p.sync(ctx, true); err != nil {
			t.Fatal(err)
		}
		if got := marked(); got != step.want {
			t.Errorf("%s: deleted %q, want %q", step.what, got, step.want)
		}
	}
}
