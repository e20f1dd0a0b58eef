package controller

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/metallbmetrics"
)

// metrics of the controller: ironlb's own, and those MetalLB's controller exports, under MetalLB's
// names and labels (package metallbmetrics), so that MetalLB's dashboards and alerts keep working.
type metrics struct {
	allocations *prometheus.CounterVec
	failures    *prometheus.CounterVec
	pools       *metallbmetrics.Allocator
	k8s         *metallbmetrics.K8sClient
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
		pools: metallbmetrics.NewAllocator(reg),
		k8s:   metallbmetrics.NewK8sClient(reg),
		configValid: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_controller_config_valid",
			Help: "1 when every IPAddressPool loaded without error."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ironlb_controller_leader",
			Help: "1 on the replica that holds the leader lease (the one whose other metrics count)."}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ironlb_controller_service_sync_seconds",
			Help: "Time to reconcile one Service.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
	}
	reg.MustRegister(m.allocations, m.failures, m.configValid, m.leader, m.syncSeconds)
	return m
}

// setPoolGauges sets MetalLB's pool gauges from a pool's counters. Saturated counts (large IPv6
// ranges) stay at math.MaxInt64, as in the pool's status.
func (r *reconciler) setPoolGauges(name string, st allocator.PoolStats) {
	p := r.m.pools
	v4Total, v6Total := satAdd(st.AvailableV4, st.AssignedV4), satAdd(st.AvailableV6, st.AssignedV6)
	p.InUse.WithLabelValues(name).Set(float64(st.AssignedV4 + st.AssignedV6))
	p.IPv4InUse.WithLabelValues(name).Set(float64(st.AssignedV4))
	p.IPv6InUse.WithLabelValues(name).Set(float64(st.AssignedV6))
	p.AddressesTotal.WithLabelValues(name).Set(float64(satAdd(v4Total, v6Total)))
	p.IPv4AddressesTotal.WithLabelValues(name).Set(float64(v4Total))
	p.IPv6AddressesTotal.WithLabelValues(name).Set(float64(v6Total))
	p.ServicesAllocated.WithLabelValues(name).Set(float64(st.Services))
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
