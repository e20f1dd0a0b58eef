package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/internal/proxy/convert"
)

// TestKubeProxyMetrics scrapes kube-proxy's metric names off the proxy's registry, as a
// dashboard would: the proxy runs over a fake clientset and a knftables Fake; a Service with
// internalTrafficPolicy Local whose only endpoint is on another node is created after start, its
// EndpointSlice carrying the endpoints controller's last-change-trigger-time.
func TestKubeProxyMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, s := fakeNFT(t)
	reg := prometheus.NewRegistry()
	np, _ := convert.ParseNodePorts(nil)
	p, src, cs := newTestProxier(np, s, reg)
	defer src.shutdown()
	defer cancel()
	src.onEvents(p.serviceEvent, p.sliceEvent)
	src.onChange(p.pokeService, p.poke)
	if !src.start(ctx) {
		t.Fatal("informers did not sync")
	}
	done := make(chan error)
	go func() { done <- p.run(ctx) }()
	defer func() { cancel(); <-done }()

	metricsSrv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer metricsSrv.Close()
	scrape := func() string {
		resp, err := http.Get(metricsSrv.URL)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return sb.String()
	}
	has := func(re string) func() string {
		r := regexp.MustCompile("(?m)^" + re + "$")
		return func() string {
			if m := r.FindString(scrape()); m != "" {
				return "found"
			}
			return "missing"
		}
	}
	eventually(t, "first sync", has(`kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv4"\} [0-9.e+]+`), "found")

	trigger := time.Now().Add(time.Second).UTC() // after the proxy started, as the endpoints controller would stamp it
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "local"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.40", ClusterIPs: []string{"10.96.0.40"},
			InternalTrafficPolicy: ptrTo(corev1.ServiceInternalTrafficPolicyLocal),
			Ports:                 []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	if _, err := cs.CoreV1().Services("ns1").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	es := slice("local", "local-1", corev1.ProtocolTCP, 8080, [][2]string{{"10.244.2.40", "node-b"}})
	es.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)}
	if _, err := cs.DiscoveryV1().EndpointSlices("ns1").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`kubeproxy_sync_proxy_rules_no_local_endpoints_total\{ip_family="IPv4",traffic_policy="internal"\} 1`,
		`kubeproxy_sync_proxy_rules_no_local_endpoints_total\{ip_family="IPv4",traffic_policy="external"\} 0`,
		`kubeproxy_network_programming_duration_seconds_count\{ip_family="IPv4"\} 1`,
		`kubeproxy_network_programming_duration_seconds_bucket\{ip_family="IPv4",le="0"\} [01]`,
		`kubeproxy_network_programming_duration_seconds_bucket\{ip_family="IPv4",le="300"\} 1`,
		`kubeproxy_sync_proxy_rules_duration_seconds_bucket\{ip_family="IPv4",le="16.384"\} [1-9][0-9]*`,
		`kubeproxy_sync_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} [1-9][0-9]*`,
		`kubeproxy_sync_full_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} [1-9][0-9]*`,
		`kubeproxy_sync_partial_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} [1-9][0-9]*`,
		`kubeproxy_sync_proxy_rules_service_changes_total [1-9][0-9]*`,
		`kubeproxy_sync_proxy_rules_endpoint_changes_total [1-9][0-9]*`,
		`kubeproxy_sync_proxy_rules_service_changes_pending 0`,
		`kubeproxy_sync_proxy_rules_endpoint_changes_pending 0`,
		`kubeproxy_sync_proxy_rules_nftables_sync_failures_total\{ip_family="IPv4"\} 0`,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds\{ip_family="IPv4"\} [0-9.e+]+`,
		`# TYPE kubeproxy_network_programming_duration_seconds histogram`,
		`# TYPE kubeproxy_sync_proxy_rules_no_local_endpoints_total gauge`,
		`# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_total counter`,
		`ironlb_proxy_sync_duration_seconds_count\{kind="full"\} [1-9][0-9]*`, // ironlb's own, beside them
	} {
		eventually(t, want, has(want), "found")
	}
	// The counts: 3 Services and 3 EndpointSlices listed at start (ns1/other is another proxy's),
	// then one of each created.
	for _, want := range []string{
		`kubeproxy_sync_proxy_rules_service_changes_total 4`,
		`kubeproxy_sync_proxy_rules_endpoint_changes_total 4`,
	} {
		if has(want)() != "found" {
			t.Errorf("%s: not in\n%s", want, grep(scrape(), "kubeproxy_sync_proxy_rules_.*changes"))
		}
	}

	// kube-proxy's health endpoint counts.
	h := httptest.NewServer(p.m.kube.countCodes(p.health.Handler()))
	defer h.Close()
	for _, path := range []string{"/healthz", "/livez", "/livez"} {
		resp, err := http.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	eventually(t, "healthz counted", has(`kubeproxy_proxy_healthz_total\{code="200"\} 1`), "found")
	eventually(t, "livez counted", has(`kubeproxy_proxy_livez_total\{code="200"\} 2`), "found")
}

func ptrTo[T any](v T) *T { return &v }

func grep(text, re string) string {
	r := regexp.MustCompile(re)
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if r.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
