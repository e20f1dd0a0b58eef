package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the controller. MetalLB's names are kept for the pool gauges so existing dashboards work.
type metrics struct {
	allocations *prometheus.CounterVec
	failures    *prometheus.CounterVec
	inUse       *prometheus.GaugeVec
	total       *prometheus.GaugeVec
	configValid prometheus.Gauge
	leader      prometheus.Gauge
	syncSeconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_allocator_allocations_total",
			Help: "Addresses handed to Services, by pool."}, []string{"pool"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ironlb_allocator_failures_total",
			Help: "Allocations that failed, by reason."}, []string{"reason"}),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "metallb_allocator_addresses_in_use_total",
			Help: "Addresses in use, by pool and family (MetalLB's name)."}, []string{"pool", "family"}),
		total: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "metallb_allocator_addresses_total",
			Help: "Addresses a pool holds (buggy IPs excluded when avoided), by pool and family (MetalLB's name)."}, []string{"pool", "family"}),
		configValid: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_controller_config_valid",
			Help: "1 when every IPAddressPool loaded without error."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_controller_leader",
			Help: "1 on the replica that holds the leader lease (the one whose other metrics count)."}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ironlb_controller_service_sync_seconds",
			Help: "Time to reconcile one Service.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
	}
	reg.MustRegister(m.allocations, m.failures, m.inUse, m.total, m.configValid, m.leader, m.syncSeconds)
	return m
}
