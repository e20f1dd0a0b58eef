// Package metallbmetrics defines the metrics MetalLB v0.16.1 exports, with MetalLB's names, types,
// help texts and labels, so that MetalLB's dashboards and alerting rules (its chart's
// prometheusrules.yaml, shipped in config/prometheus) keep working after a migration. The roles
// register the ones MetalLB's same component has, beside their own ironlb_* metrics, and move them
// with their own state; docs/install.md lists each with the MetalLB file it comes from.
//
// MetalLB's speaker runs in one of two modes whose BGP metrics differ: native mode (its chart's
// default) sets metallb_bgp_session_up, _updates_total, _announced_prefixes_total and
// _pending_prefixes_total with the label peer ("address:port"); FRR mode's exporter reads those and
// more from FRR, with the labels peer and vrf. ironlb keeps native mode's four as they are, and adds
// FRR mode's other BGP counters and its BFD metrics (BFD exists in FRR mode only) with FRR mode's
// labels; vrf is always "default", as ironlb has no VRFs.
//
// Nothing here does I/O: constructors build and register collectors.
package metallbmetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultVRF is the vrf label of FRR mode's metrics: FRR's name for the default VRF.
const DefaultVRF = "default"

// K8sClient is MetalLB's metallb_k8s_client_* (internal/k8s/controllers/stats.go), which MetalLB's
// controller and speaker both export.
type K8sClient struct {
	// Updates counts the Kubernetes object changes processed; UpdateErrors those whose processing
	// failed.
	Updates, UpdateErrors prometheus.Counter
	// The two gauges have no labels; a vector lets Hide remove their series.
	configLoaded, configStale *prometheus.GaugeVec

	mu            sync.Mutex // guards the following fields
	loaded, stale bool
	shown         bool
}

// NewK8sClient builds MetalLB's client metrics and registers them with reg. The gauges are hidden
// (no series) until Show or Config: a standby controller replica, which reads no configuration,
// must not report "not loaded".
func NewK8sClient(reg prometheus.Registerer) *K8sClient {
	k := &K8sClient{
		Updates: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "metallb", Subsystem: "k8s_client",
			Name: "updates_total", Help: "Number of k8s object updates that have been processed."}),
		UpdateErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "metallb", Subsystem: "k8s_client",
			Name: "update_errors_total", Help: "Number of k8s object updates that failed for some reason."}),
		configLoaded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "k8s_client",
			Name: "config_loaded_bool", Help: "1 if the MetalLB configuration was successfully loaded at least once."}, nil),
		configStale: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "k8s_client",
			Name: "config_stale_bool", Help: "1 if running on a stale configuration, because the latest config failed to load."}, nil),
	}
	reg.MustRegister(k.Updates, k.UpdateErrors, k.configLoaded, k.configStale)
	return k
}

// Config records the outcome of reading the configuration, and shows the gauges. MetalLB loads its
// configuration as a whole and keeps the last good one when a change fails to load; ironlb keeps
// each invalid object at its last valid version instead, so "the latest config failed to load" is
// "some object's current version is invalid". valid (no invalid object) sets config_loaded_bool to 1
// for good and config_stale_bool to 0; invalid sets config_stale_bool to 1 and leaves
// config_loaded_bool as it was, so a component that never saw a valid configuration reports 0
// (MetalLBConfigNotLoaded fires) and one whose configuration turned invalid reports stale
// (MetalLBStaleConfig fires).
func (k *K8sClient) Config(valid bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if valid {
		k.loaded = true
	}
	k.stale = !valid
	k.shown = true
	k.setLocked()
}

// Show shows the gauges with their current values (0 and 0 before any Config): a component that
// reads the configuration from now on.
func (k *K8sClient) Show() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.shown = true
	k.setLocked()
}

// Hide removes the gauges' series and forgets what was loaded: a controller replica that stopped
// leading reads no configuration (its next term starts afresh).
func (k *K8sClient) Hide() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.shown, k.loaded, k.stale = false, false, false
	k.configLoaded.Reset()
	k.configStale.Reset()
}

func (k *K8sClient) setLocked() {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	k.configLoaded.WithLabelValues().Set(b2f(k.loaded))
	k.configStale.WithLabelValues().Set(b2f(k.stale))
}

// NewSpeakerAnnounced builds MetalLB's metallb_speaker_announced (speaker/main.go) and registers it
// with reg: 1 per (service, protocol, node, ip) the node announces, protocol "layer2" or "bgp"; the
// series is deleted when the node stops announcing.
func NewSpeakerAnnounced(reg prometheus.Registerer) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "speaker", Name: "announced",
		Help: "Services being announced from this node. This is desired state, it does not guarantee that the routing protocols have converged."},
		[]string{"service", "protocol", "node", "ip"})
	reg.MustRegister(v)
	return v
}

// Layer2 is MetalLB's metallb_layer2_* (internal/layer2/stats.go), counted per announced address.
type Layer2 struct {
	Requests, Responses, Gratuitous *prometheus.CounterVec
}

// NewLayer2 builds MetalLB's layer-2 counters and registers them with reg.
func NewLayer2(reg prometheus.Registerer) *Layer2 {
	l := &Layer2{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "metallb", Subsystem: "layer2", Name: "requests_received",
			Help: "Number of layer2 requests received for owned IPs"}, []string{"ip"}),
		Responses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "metallb", Subsystem: "layer2", Name: "responses_sent",
			Help: "Number of layer2 responses sent for owned IPs in response to requests"}, []string{"ip"}),
		Gratuitous: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "metallb", Subsystem: "layer2", Name: "gratuitous_sent",
			Help: "Number of gratuitous layer2 packets sent for owned IPs as a result of failovers"}, []string{"ip"}),
	}
	reg.MustRegister(l.Requests, l.Responses, l.Gratuitous)
	return l
}

// BGP is the part of MetalLB's native-mode BGP metrics (internal/bgp/native/stats.go, names and help
// from internal/bgp/metrics/metrics.go) that follows the sessions' state; the label peer is
// "address:port". Native mode's metallb_bgp_updates_total and metallb_bgp_announced_prefixes_total,
// and FRR mode's counters, are read from GoBGP at scrape time (BGPUpdatesDesc, BGPCounterDescs).
type BGP struct {
	SessionUp       *prometheus.GaugeVec
	PendingPrefixes *prometheus.GaugeVec
}

// NewBGP builds the session gauges and registers them with reg.
func NewBGP(reg prometheus.Registerer) *BGP {
	b := &BGP{
		SessionUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "bgp", Name: "session_up",
			Help: "BGP session state (1 is up, 0 is down)"}, []string{"peer"}),
		PendingPrefixes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "bgp", Name: "pending_prefixes_total",
			Help: "Number of prefixes that should be advertised on the BGP session"}, []string{"peer"}),
	}
	reg.MustRegister(b.SessionUp, b.PendingPrefixes)
	return b
}

// Native mode's GoBGP-read metrics, label peer ("address:port").
var (
	BGPUpdatesDesc  = prometheus.NewDesc("metallb_bgp_updates_total", "Number of BGP UPDATE messages sent", []string{"peer"}, nil)
	BGPPrefixesDesc = prometheus.NewDesc("metallb_bgp_announced_prefixes_total",
		"Number of prefixes currently being advertised on the BGP session", []string{"peer"}, nil)
)

// BGPCounter names one of FRR mode's BGP message counters (frr-tools/metrics/collector/bgp.go).
type BGPCounter int

// FRR mode's BGP message counters that native mode lacks.
const (
	OpensSent BGPCounter = iota
	OpensReceived
	NotificationsSent
	UpdatesReceived
	KeepalivesSent
	KeepalivesReceived
	RouteRefreshSent
	TotalSent
	TotalReceived
	numBGPCounters
)

// BGPCounterDescs are FRR mode's BGP message counters, by BGPCounter, labels peer ("address:port")
// and vrf. Names are literal so that config/'s tests find them in the source.
var BGPCounterDescs = [numBGPCounters]*prometheus.Desc{
	OpensSent:          prometheus.NewDesc("metallb_bgp_opens_sent", "Number of BGP open messages sent", frrLabels, nil),
	OpensReceived:      prometheus.NewDesc("metallb_bgp_opens_received", "Number of BGP open messages received", frrLabels, nil),
	NotificationsSent:  prometheus.NewDesc("metallb_bgp_notifications_sent", "Number of BGP notification messages sent", frrLabels, nil),
	UpdatesReceived:    prometheus.NewDesc("metallb_bgp_updates_total_received", "Number of BGP UPDATE messages received", frrLabels, nil),
	KeepalivesSent:     prometheus.NewDesc("metallb_bgp_keepalives_sent", "Number of BGP keepalive messages sent", frrLabels, nil),
	KeepalivesReceived: prometheus.NewDesc("metallb_bgp_keepalives_received", "Number of BGP keepalive messages received", frrLabels, nil),
	RouteRefreshSent:   prometheus.NewDesc("metallb_bgp_route_refresh_sent", "Number of BGP route refresh messages sent", frrLabels, nil),
	TotalSent:          prometheus.NewDesc("metallb_bgp_total_sent", "Number of total BGP messages sent", frrLabels, nil),
	TotalReceived:      prometheus.NewDesc("metallb_bgp_total_received", "Number of total BGP messages received", frrLabels, nil),
}

// frrLabels are the labels of FRR mode's metrics.
var frrLabels = []string{"peer", "vrf"}

// BFD is FRR mode's metallb_bfd_* that follow the sessions' state (frr-tools/metrics/collector/bfd.go),
// labels peer (the address alone, as FRR names BFD peers) and vrf.
type BFD struct {
	SessionUp                          *prometheus.GaugeVec
	SessionUpEvents, SessionDownEvents *prometheus.CounterVec
}

// NewBFD builds the BFD metrics and registers them with reg.
func NewBFD(reg prometheus.Registerer) *BFD {
	labels := frrLabels
	b := &BFD{
		SessionUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "bfd", Name: "session_up",
			Help: "BFD session state (1 is up, 0 is down)"}, labels),
		SessionUpEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "metallb", Subsystem: "bfd", Name: "session_up_events",
			Help: "Number of BFD session up events"}, labels),
		SessionDownEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "metallb", Subsystem: "bfd", Name: "session_down_events",
			Help: "Number of BFD session down events"}, labels),
	}
	reg.MustRegister(b.SessionUp, b.SessionUpEvents, b.SessionDownEvents)
	return b
}

// Allocator is MetalLB's metallb_allocator_* (internal/allocator/stats.go), label pool; the
// controller exports it.
type Allocator struct {
	AddressesTotal, IPv4AddressesTotal, IPv6AddressesTotal *prometheus.GaugeVec
	InUse, IPv4InUse, IPv6InUse                            *prometheus.GaugeVec
	ServicesAllocated                                      *prometheus.GaugeVec
}

// NewAllocator builds the pool gauges and registers them with reg.
func NewAllocator(reg prometheus.Registerer) *Allocator {
	pool := []string{"pool"}
	a := &Allocator{
		AddressesTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "allocator",
			Name: "addresses_total", Help: "Number of usable IP addresses, per pool"}, pool),
		IPv4AddressesTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "allocator",
			Name: "ipv4_addresses_total", Help: "Number of usable IPV4 addresses, per pool"}, pool),
		IPv6AddressesTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "allocator",
			Name: "ipv6_addresses_total", Help: "Number of usable IPV6 addresses, per pool"}, pool),
		InUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "allocator",
			Name: "addresses_in_use_total", Help: "Number of IP addresses in use, per pool"}, pool),
		IPv4InUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "allocator",
			Name: "ipv4_addresses_in_use_total", Help: "Number of IPV4 addresses in use, per pool"}, pool),
		IPv6InUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "allocator",
			Name: "ipv6_addresses_in_use_total", Help: "Number of IPV6 addresses in use, per pool"}, pool),
		ServicesAllocated: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "metallb", Subsystem: "allocator",
			Name: "services_allocated_total", Help: "Number of services allocated, per pool"}, pool),
	}
	reg.MustRegister(a.AddressesTotal, a.IPv4AddressesTotal, a.IPv6AddressesTotal, a.InUse, a.IPv4InUse, a.IPv6InUse, a.ServicesAllocated)
	return a
}

// Reset removes every pool's series: a controller replica that stopped leading.
func (a *Allocator) Reset() {
	for _, v := range []*prometheus.GaugeVec{a.AddressesTotal, a.IPv4AddressesTotal, a.IPv6AddressesTotal, a.InUse, a.IPv4InUse, a.IPv6InUse, a.ServicesAllocated} {
		v.Reset()
	}
}

// Delete removes a pool's series (the pool is gone).
func (a *Allocator) Delete(pool string) {
	for _, v := range []*prometheus.GaugeVec{a.AddressesTotal, a.IPv4AddressesTotal, a.IPv6AddressesTotal, a.InUse, a.IPv4InUse, a.IPv6InUse, a.ServicesAllocated} {
		v.DeleteLabelValues(pool)
	}
}
