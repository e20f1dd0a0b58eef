package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"

	"github.com/ironlb/ironlb/internal/liveness"
	"github.com/ironlb/ironlb/internal/proxy/conntrack"
	"github.com/ironlb/ironlb/internal/proxy/convert"
	"github.com/ironlb/ironlb/internal/proxy/healthcheck"
	"github.com/ironlb/ironlb/internal/proxy/nftapply"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/trace"
)

// The objects of the end-to-end test: this node node-a, node-b, and
//
//	ns1/web   ClusterIP 10.96.0.10 tcp/80 -> 10.244.1.5 (node-a), 10.244.2.5 (node-b); bad algorithm annotation
//	ns1/dns   ClusterIP 10.96.0.53 udp/53 -> 10.244.1.53 (node-a), 10.244.2.53 (node-b)
//	ns1/shop  LoadBalancer 192.168.1.240, ETP Local, health check 32000 -> 10.244.1.7 (node-a)
//	ns1/other labelled for another proxy
//
// and the ServiceCIDR "kubernetes", 10.96.0.0/16.
func e2eObjects() []kruntime.Object {
	svc := func(name, ip string, mut func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80}}}}
		if mut != nil {
			mut(s)
		}
		return s
	}
	return []kruntime.Object{
		testNode("node-a", "192.168.0.10"), testNode("node-b", "192.168.0.11"),
		&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}},
		svc("web", "10.96.0.10", func(s *corev1.Service) {
			s.Annotations = map[string]string{convert.AnnotationAlgorithm: "fastest"}
		}),
		slice("web", "web-1", corev1.ProtocolTCP, 8080, [][2]string{{"10.244.1.5", "node-a"}, {"10.244.2.5", "node-b"}}),
		svc("dns", "10.96.0.53", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolUDP, Port: 53}}
		}),
		slice("dns", "dns-1", corev1.ProtocolUDP, 5353, [][2]string{{"10.244.1.53", "node-a"}, {"10.244.2.53", "node-b"}}),
		svc("shop", "10.96.0.20", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 32000
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.1.240"}}
		}),
		slice("shop", "shop-1", corev1.ProtocolTCP, 8443, [][2]string{{"10.244.1.7", "node-a"}}),
		svc("other", "10.96.0.30", func(s *corev1.Service) {
			s.Labels = map[string]string{convert.LabelServiceProxyName: "someone-else"}
		}),
	}
}

func slice(svc, name string, proto corev1.Protocol, port int32, eps [][2]string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns1", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("p"), Protocol: ptr.To(proto), Port: ptr.To(port)}},
	}
	for _, e := range eps {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{e[0]}, NodeName: ptr.To(e[1]),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return es
}

// loopbackListen opens health-check listeners on free loopback ports.
type loopbackListen struct {
	mu   sync.Mutex
	real map[string]string
}

func (l *loopbackListen) listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.real[addr] = ln.Addr().String()
	return ln, nil
}

func (l *loopbackListen) addr(requested string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.real[requested]
}

// fakeNFT is an IPv4 syncer applying the rule builder's transactions to a knftables Fake, which it
// returns for the test to read and trace.
func fakeNFT(t *testing.T) (*knftables.Fake, syncer) {
	t.Helper()
	nft := knftables.NewFake(knftables.IPv4Family, nftrules.TableName)
	b, err := nftrules.New(nftrules.Config{Family: knftables.IPv4Family})
	if err != nil {
		t.Fatal(err)
	}
	return nft, nftapply.New(nft, b, nil)
}

// newTestProxier is the proxier of node-a, wired as Run wires it, over informers on a fake
// clientset holding e2eObjects: IPv4 synced through s, the metrics registered in reg. The informers
// are neither hooked to the proxier nor started: the caller chooses the handlers, starts the
// informers and shuts them down.
func newTestProxier(nodePorts convert.NodePorts, s syncer, reg *prometheus.Registry) (*proxier, *informerSource, *fake.Clientset) {
	cs := fake.NewClientset(e2eObjects()...)
	src := newInformerSource(cs, "node-a", true, true)
	p := newProxier(loopConfig{node: convert.NodeConfig{Name: "node-a", NodePorts: nodePorts}, syncPeriod: time.Hour, retryMax: time.Second},
		slog.New(slog.DiscardHandler), src, []family{{knftables.IPv4Family, s}}, newMetrics(reg))
	return p, src, cs
}

// TestProxierEndToEnd drives the whole loop: informers over a fake clientset (which only stores
// and lists objects), the rule builder applied to a knftables Fake through nftapply, conntrack and
// health checks with fakes. Packets are traced through the resulting rules.
func TestProxierEndToEnd(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	nft, s := fakeNFT(t)
	np, _ := convert.ParseNodePorts([]string{"all"}) // health checks on every address
	p, src, cs := newTestProxier(np, s, prometheus.NewRegistry())
	ct := &conntrack.Fake{}
	p.ct = ct
	ll := &loopbackListen{real: map[string]string{}}
	p.hc = healthcheck.NewServices(ll.listen, p.health.Healthy, nil)
	rec := record.NewFakeRecorder(10)
	p.rec = rec
	fe := &fakeEcho{up: map[string]bool{"node-b": true}}
	p.setEcho(fe)
	src.onSlice(p.sliceSeen)
	src.onChange(p.pokeService, p.poke)
	if !src.start(ctx) {
		t.Fatal("informers did not sync")
	}
	done := make(chan error)
	go func() { done <- p.run(ctx) }()

	host := trace.Host{LocalAddrs: []netip.Addr{netip.MustParseAddr("192.168.0.10")}}
	tr := func(dst string, proto string) string {
		rs, err := trace.FromFake(knftables.IPv4Family, nft)
		if err != nil {
			return err.Error()
		}
		d := netip.MustParseAddrPort(dst)
		res, err := rs.Trace(trace.Packet{Src: netip.MustParseAddr("10.244.1.9"), Dst: d.Addr(), DPort: d.Port(), Protocol: proto}, host)
		if err != nil {
			return err.Error()
		}
		return res.Summary()
	}
	eventually(t, "ClusterIP balanced over both endpoints", func() string { return tr("10.96.0.10:80", "tcp") },
		"DNAT 10.244.1.5:8080 | DNAT 10.244.2.5:8080")
	if got := tr("10.96.0.30:80", "tcp"); got != "drop" {
		t.Errorf("another proxy's Service: %s, want no rules of its own, so dropped as unallocated", got)
	}
	// Service networks from the ServiceCIDR API: an unallocated address in them is dropped, one
	// outside passes; a ServiceCIDR added later extends them.
	if got := tr("10.96.7.7:80", "tcp"); got != "drop" {
		t.Errorf("unallocated ClusterIP: %s, want drop", got)
	}
	if got := tr("10.201.0.7:80", "tcp"); got != "accept" {
		t.Errorf("outside the service CIDRs: %s, want accept", got)
	}
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, "InvalidLoadBalancingAlgorithm") || !strings.Contains(ev, `"fastest"`) {
			t.Errorf("event %q", ev)
		}
	case <-time.After(5 * time.Second):
		t.Error("no event for the invalid algorithm annotation")
	}
	if got := testutil.ToFloat64(p.m.serviceIssues.WithLabelValues(string(convert.BadAlgorithm))); got != 1 {
		t.Errorf("warnings counted %v times, want once", got)
	}
	if _, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.201.0.0/16"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "address in a ServiceCIDR added later dropped", func() string { return tr("10.201.0.7:80", "tcp") }, "drop")

	// Topology: a Service with trafficDistribution PreferClose, whose EndpointSlice the controller
	// hinted per zone; this node is in zone-a, so only the zone-a endpoint serves it, once the node
	// has its zone label.
	near := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "near"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.60", ClusterIPs: []string{"10.96.0.60"},
			TrafficDistribution: ptr.To(corev1.ServiceTrafficDistributionPreferClose),
			Ports:               []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	if _, err := cs.CoreV1().Services("ns1").Create(ctx, near, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nearSlice := slice("near", "near-1", corev1.ProtocolTCP, 8080, [][2]string{{"10.244.3.60", "node-c"}, {"10.244.4.60", "node-d"}})
	nearSlice.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}
	nearSlice.Endpoints[1].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-b"}}}
	if _, err := cs.DiscoveryV1().EndpointSlices("ns1").Create(ctx, nearSlice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "zone hints ignored while the node has no zone", func() string { return tr("10.96.0.60:80", "tcp") },
		"DNAT 10.244.3.60:8080 | DNAT 10.244.4.60:8080")
	self := testNode("node-a", "192.168.0.10")
	self.Labels = map[string]string{corev1.LabelTopologyZone: "zone-a"}
	if _, err := cs.CoreV1().Nodes().Update(ctx, self, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "only the endpoint hinted for this node's zone", func() string { return tr("10.96.0.60:80", "tcp") }, "DNAT 10.244.3.60:8080")

	// Health check of the Local Service on this node.
	eventually(t, "health-check node port", func() string { return ll.addr(":32000") }, "")
	checkHealth(t, ll.addr(":32000"), 200, `"localEndpoints": 1`)

	// node-b stops answering echoes: its endpoints go, UDP flows to them are flushed.
	fe.set("node-b", false)
	p.onEcho([]liveness.Down{{Peer: "node-b", Silence: 30 * time.Millisecond}})
	eventually(t, "dead node's endpoint left out", func() string { return tr("10.96.0.10:80", "tcp") }, "DNAT 10.244.1.5:8080")
	eventually(t, "UDP conntrack flushed for the dead node's endpoint", func() string { return filters(ct) },
		"-p udp --orig-dst 10.96.0.53 --dport 53 --reply-src 10.244.2.53")
	// It answers again, more than a second later (a power cut and a boot): its endpoints stay out
	// until its kubelet reports them again (here: its pods go not ready and ready again in their
	// slices).
	time.Sleep(1200 * time.Millisecond)
	fe.set("node-b", true)
	p.onEcho(nil)
	stillOut := func(what string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond)
		if got := tr("10.96.0.10:80", "tcp"); got != "DNAT 10.244.1.5:8080" {
			t.Errorf("node-b answers again, %s: %s, want its endpoint still out", what, got)
		}
	}
	reportAgain := func(es *discoveryv1.EndpointSlice) {
		t.Helper()
		for _, ready := range []bool{false, true} {
			c := es.DeepCopy()
			for i := range c.Endpoints {
				if *c.Endpoints[i].NodeName == "node-b" {
					c.Endpoints[i].Conditions.Ready = ptr.To(ready)
				}
			}
			if _, err := cs.DiscoveryV1().EndpointSlices("ns1").Update(ctx, c, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stillOut("its slices unchanged")
	reportAgain(slice("web", "web-1", corev1.ProtocolTCP, 8080, [][2]string{{"10.244.1.5", "node-a"}, {"10.244.2.5", "node-b"}}))
	// node-b also has an endpoint in dns-1, still as it was: its endpoints stay out until that one
	// is reported again too.
	stillOut("one of its two pods reported again")
	reportAgain(slice("dns", "dns-1", corev1.ProtocolUDP, 5353, [][2]string{{"10.244.1.53", "node-a"}, {"10.244.2.53", "node-b"}}))
	eventually(t, "node back", func() string { return tr("10.96.0.10:80", "tcp") }, "DNAT 10.244.1.5:8080 | DNAT 10.244.2.5:8080")

	// The local shop endpoint goes: the health check fails, traffic to the UDP endpoint too.
	_, err := cs.DiscoveryV1().EndpointSlices("ns1").Update(ctx, slice("shop", "shop-1", corev1.ProtocolTCP, 8443, nil), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "health check without local endpoints", func() string {
		code, _ := getHealth(ll.addr(":32000"))
		return fmt.Sprint(code)
	}, "503")
	if err := cs.CoreV1().Services("ns1").Delete(ctx, "dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deleted UDP Service's flows flushed", func() string { return filters(ct) },
		"-p udp --orig-dst 10.96.0.53 --dport 53 --reply-src 10.244.1.53, -p udp --orig-dst 10.96.0.53 --dport 53 --reply-src 10.244.2.53")
	eventually(t, "deleted Service's address unallocated, so dropped", func() string { return tr("10.96.0.53:53", "udp") }, "drop")

	if v := testutil.ToFloat64(p.m.lastSync); v == 0 {
		t.Error("last sync timestamp not set")
	}
	if n := testutil.CollectAndCount(p.m.syncDuration); n != 2 {
		t.Errorf("sync duration has %d series, want full and partial", n)
	}
	if v := testutil.ToFloat64(p.m.chains.WithLabelValues("ip")); v < 1 {
		t.Errorf("service chains gauge %v", v)
	}

	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	p.hc.Close()
	src.shutdown()
	waitGoroutines(t, before)
}

// filters returns the conntrack filters recorded since the last call, joined.
func filters(ct *conntrack.Fake) string {
	var s []string
	for _, f := range ct.Filters() {
		s = append(s, f.String())
	}
	return strings.Join(s, ", ")
}

func getHealth(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func checkHealth(t *testing.T, addr string, code int, body string) {
	t.Helper()
	c, b := getHealth(addr)
	if c != code || !strings.Contains(b, body) {
		t.Errorf("health check: %d %s, want %d with %s", c, b, code, body)
	}
}

// eventually polls got until it returns want (a non-empty want; for an empty want, any non-empty
// result), failing after 10 s.
func eventually(t *testing.T, what string, got func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		last = got()
		if last == want && want != "" || want == "" && last != "" {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: got %q, want %q", what, last, want)
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left, want %d:\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
		}
		http.DefaultClient.CloseIdleConnections()
		time.Sleep(20 * time.Millisecond)
	}
}
