package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's Prometheus metrics (ironlb_proxy_*), and kube-proxy's (kube). The sync loop updates them,
// except deaths, counted by the liveness callback.
type metrics struct {
	syncDuration  *prometheus.HistogramVec // kind: full, partial
	syncErrors    *prometheus.CounterVec   // family
	lastSync      prometheus.Gauge
	operations    *prometheus.GaugeVec // family: operations in the last transaction
	changed       *prometheus.GaugeVec // family: Services rewritten by the last sync
	chains        *prometheus.GaugeVec // family: per-Service chains in the table
	staleChains   *prometheus.GaugeVec // family: flushed chains waiting to be deleted
	services      prometheus.Gauge
	skipped       prometheus.Gauge
	deadNodes     prometheus.Gauge
	deaths        prometheus.Counter
	ctDeleted     prometheus.Counter
	ctErrors      prometheus.Counter
	healthChecks  prometheus.Gauge
	serviceIssues *prometheus.CounterVec // reason
	dsrPorts      prometheus.Gauge
	kube          *kubeMetrics // kube-proxy's names
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ironlb_proxy_sync_duration_seconds",
			Help:    "Time to build the model and apply one sync to every family's table, by kind (full or partial).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 17), // 1 ms .. 65 s
		}, []string{"kind"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ironlb_proxy_sync_errors_total", Help: "Syncs whose transaction failed, by family (the next sync is a full one).",
		}, []string{"family"}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ironlb_proxy_last_sync_timestamp_seconds", Help: "When the last successful sync ended (Unix time).",
		}),
		operations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ironlb_proxy_sync_operations", Help: "nftables operations in the last sync's transaction, by family.",
		}, []string{"family"}),
		changed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ironlb_proxy_sync_changed_services", Help: "Services whose rules the last sync (re)wrote, by family.",
		}, []string{"family"}),
		chains: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ironlb_proxy_service_chains", Help: "Per-Service chains (service, local, external, firewall, endpoint) in the table, by family.",
		}, []string{"family"}),
		staleChains: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ironlb_proxy_stale_chains", Help: "Flushed chains waiting to be deleted, by family.",
		}, []string{"family"}),
		services: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ironlb_proxy_services", Help: "Services in the model (proxied Services).",
		}),
		dsrPorts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ironlb_proxy_dsr_service_ports", Help: "Service ports whose external traffic takes direct server return.",
		}),
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ironlb_proxy_invalid_services", Help: "Services the rule builder left out as invalid.",
		}),
		deadNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ironlb_proxy_dead_nodes", Help: "Nodes declared dead by the echo detector, whose endpoints are not used.",
		}),
		deaths: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ironlb_proxy_node_deaths_total", Help: "Nodes declared dead by the echo detector.",
		}),
		ctDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ironlb_proxy_conntrack_deleted_total", Help: "Stale UDP conntrack entries deleted.",
		}),
		ctErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ironlb_proxy_conntrack_errors_total", Help: "Failed conntrack deletions.",
		}),
		healthChecks: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ironlb_proxy_health_check_ports", Help: "Health-check node ports served (Services with externalTrafficPolicy Local).",
		}),
		serviceIssues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ironlb_proxy_service_warnings_total", Help: "Problems found in Services and worked around, by reason.",
		}, []string{"reason"}),
	}
	m.kube = newKubeMetrics(reg)
	reg.MustRegister(m.syncDuration, m.syncErrors, m.lastSync, m.operations, m.changed, m.chains, m.staleChains,
		m.services, m.skipped, m.deadNodes, m.deaths, m.ctDeleted, m.ctErrors, m.healthChecks, m.serviceIssues, m.dsrPorts)
	return m
}
