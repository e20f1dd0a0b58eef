package proxy

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/knftables"
)

// kubeMetrics are kube-proxy's own metrics (k8s.io/kubernetes pkg/proxy/metrics), the ones its
// nftables mode exports, with the same names, types, help, buckets and labels, so that dashboards
// and alerts written for kube-proxy keep working. ip_family is "IPv4" or "IPv6" (v1.IPFamily).
type kubeMetrics struct {
	syncDuration        *prometheus.HistogramVec // ip_family
	syncFullDuration    *prometheus.HistogramVec // ip_family
	syncPartialDuration *prometheus.HistogramVec // ip_family
	lastSync            *prometheus.GaugeVec     // ip_family
	networkProgramming  *prometheus.HistogramVec // ip_family
	endpointPending     prometheus.Gauge
	endpointTotal       prometheus.Counter
	servicePending      prometheus.Gauge
	serviceTotal        prometheus.Counter
	nftSyncFailures     *prometheus.CounterVec // ip_family
	noLocalEndpoints    *prometheus.GaugeVec   // traffic_policy, ip_family
	healthz, livez      *prometheus.CounterVec // code
	queued              *queuedCollector
}

// kube-proxy's buckets: sync durations metrics.ExponentialBuckets(0.001, 2, 15); network programming
// metrics.MergeBuckets, which starts with a 0 bucket, of 0.25 s steps to 0.5 s, 1 s steps to 59 s,
// 5 s steps to 115 s, 30 s steps to 5 min.
var (
	kubeSyncBuckets    = prometheus.ExponentialBuckets(0.001, 2, 15)
	kubeNetProgBuckets = func() []float64 {
		out := []float64{0}
		for _, b := range [][]float64{prometheus.LinearBuckets(0.25, 0.25, 2), prometheus.LinearBuckets(1, 1, 59),
			prometheus.LinearBuckets(60, 5, 12), prometheus.LinearBuckets(120, 30, 7)} {
			out = append(out, b...)
		}
		return out
	}()
)

func newKubeMetrics(reg prometheus.Registerer) *kubeMetrics {
	const sub = "kubeproxy"
	fam := []string{"ip_family"}
	m := &kubeMetrics{
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: "sync_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds", Buckets: kubeSyncBuckets}, fam),
		syncFullDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: "sync_full_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for full resyncs", Buckets: kubeSyncBuckets}, fam),
		syncPartialDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: "sync_partial_proxy_rules_duration_seconds",
			Help: "SyncProxyRules latency in seconds for partial resyncs", Buckets: kubeSyncBuckets}, fam),
		lastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: "sync_proxy_rules_last_timestamp_seconds",
			Help: "The last time proxy rules were successfully synced"}, fam),
		networkProgramming: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: "network_programming_duration_seconds",
			Help: "In Cluster Network Programming Latency in seconds", Buckets: kubeNetProgBuckets}, fam),
		endpointPending: prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: sub, Name: "sync_proxy_rules_endpoint_changes_pending",
			Help: "Pending proxy rules Endpoint changes"}),
		endpointTotal: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: sub, Name: "sync_proxy_rules_endpoint_changes_total",
			Help: "Cumulative proxy rules Endpoint changes"}),
		servicePending: prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: sub, Name: "sync_proxy_rules_service_changes_pending",
			Help: "Pending proxy rules Service changes"}),
		serviceTotal: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: sub, Name: "sync_proxy_rules_service_changes_total",
			Help: "Cumulative proxy rules Service changes"}),
		nftSyncFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: sub, Name: "sync_proxy_rules_nftables_sync_failures_total",
			Help: "Cumulative proxy nftables sync failures"}, fam),
		noLocalEndpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: "sync_proxy_rules_no_local_endpoints_total",
			Help: "Number of services with a Local traffic policy and no endpoints"}, []string{"traffic_policy", "ip_family"}),
		healthz: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: sub, Name: "proxy_healthz_total",
			Help: "Cumulative proxy healthz HTTP status"}, []string{"code"}),
		livez: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: sub, Name: "proxy_livez_total",
			Help: "Cumulative proxy livez HTTP status"}, []string{"code"}),
		queued: &queuedCollector{desc: prometheus.NewDesc(sub+"_sync_proxy_rules_last_queued_timestamp_seconds",
			"The last time a sync of proxy rules was queued", fam, nil)},
	}
	reg.MustRegister(m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.lastSync, m.networkProgramming,
		m.endpointPending, m.endpointTotal, m.servicePending, m.serviceTotal, m.nftSyncFailures, m.noLocalEndpoints,
		m.healthz, m.livez, m.queued)
	return m
}

// ipFamily is kube-proxy's ip_family label of an nftables family.
func ipFamily(f knftables.Family) string {
	if f == knftables.IPv6Family {
		return "IPv6"
	}
	return "IPv4"
}

// addFamily makes the family's series exist from the start, at 0.
func (m *kubeMetrics) addFamily(f knftables.Family) {
	l := ipFamily(f)
	m.nftSyncFailures.WithLabelValues(l)
	m.noLocalEndpoints.WithLabelValues("internal", l)
	m.noLocalEndpoints.WithLabelValues("external", l)
	m.queued.addFamily(l)
}

// queuedCollector is kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds: the last time a
// sync was asked for, set by the informer handlers (which may run before the families are known)
// and read at scrape time, so that it moves even while the sync loop is stuck.
type queuedCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	fams []string
	at   time.Time
}

func (c *queuedCollector) addFamily(f string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fams = append(c.fams, f)
}

func (c *queuedCollector) queued(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = t
}

func (c *queuedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *queuedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return
	}
	for _, f := range c.fams {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.at.UnixNano())/1e9, f)
	}
}

// countCodes counts the status codes of h's /healthz and /livez answers (kube-proxy's
// proxy_healthz_total and proxy_livez_total).
func (m *kubeMetrics) countCodes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &codeWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rw, r)
		switch r.URL.Path {
		case "/healthz":
			m.healthz.WithLabelValues(strconv.Itoa(rw.code)).Inc()
		case "/livez":
			m.livez.WithLabelValues(strconv.Itoa(rw.code)).Inc()
		}
	})
}

type codeWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (w *codeWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}
