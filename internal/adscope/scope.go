// Package adscope decides what a MetalLB advertisement (L2Advertisement or BGPAdvertisement) covers:
// which IPAddressPools (spec.ipAddressPools, spec.ipAddressPoolSelectors) and which Services
// (spec.serviceSelectors). The speakers' models (package config for layer 2, package bgpconfig for
// BGP) and `ironlb status` all decide with Scope, so that what status reports is what the speakers
// do. It follows MetalLB v0.16.1: an advertisement that names and selects no pool covers every
// pool (internal/config.go, l2AdvertisementFromCR and bgpAdvertisementFromCR), and one without
// serviceSelectors covers every Service, else the Services one of them matches (speaker's
// l2AdsForService and bgpAdsForService).
//
// Parsing the selectors is the caller's: a selector that does not parse makes the whole
// advertisement select nothing (fail closed), which each caller reports in its own way.
package adscope

import (
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// Scope is what an advertisement covers. The zero Scope covers every pool and every Service.
type Scope struct {
	// Pools are the pools it names (spec.ipAddressPools).
	Pools []string
	// PoolSelectors are its spec.ipAddressPoolSelectors.
	PoolSelectors []labels.Selector
	// ServiceSelectors are its spec.serviceSelectors.
	ServiceSelectors []labels.Selector
}

// SelectsPool reports whether the advertisement covers the pool named name with labels lbls: it
// names it, one of its pool selectors matches it, or it names and selects no pool at all.
func (s *Scope) SelectsPool(name string, lbls map[string]string) bool {
	if len(s.Pools) == 0 && len(s.PoolSelectors) == 0 || slices.Contains(s.Pools, name) {
		return true
	}
	return matches(s.PoolSelectors, lbls)
}

// SelectsService reports whether the advertisement covers a Service with labels lbls: it has no
// serviceSelectors, or one of them matches.
func (s *Scope) SelectsService(lbls map[string]string) bool {
	return len(s.ServiceSelectors) == 0 || matches(s.ServiceSelectors, lbls)
}

// Covers reports whether the advertisement covers an address of pool (with poolLabels) held by a
// Service with svcLabels: SelectsPool and SelectsService.
func (s *Scope) Covers(pool string, poolLabels, svcLabels map[string]string) bool {
	return s.SelectsPool(pool, poolLabels) && s.SelectsService(svcLabels)
}

func matches(sels []labels.Selector, lbls map[string]string) bool {
	for _, sel := range sels {
		if sel.Matches(labels.Set(lbls)) {
			return true
		}
	}
	return false
}
