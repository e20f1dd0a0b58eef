// Package kubenode reads the facts about a Node object that more than one role needs (its InternalIP,
// whether it may announce). It imports the API types only, no client-go, so that pure converters
// (internal/config, internal/proxy/convert) share it.
package kubenode

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// InternalIP returns the node's first InternalIP of the family (v4 true: IPv4), unmapped and without
// a zone. A nil node, or one without an InternalIP of the family that parses, gives false.
func InternalIP(node *corev1.Node, v4 bool) (netip.Addr, bool) {
	if node == nil {
		return netip.Addr{}, false
	}
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		// A zoned address (fe80::1%eth0) names no node: only a link knows it.
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Zone() == "" && ip.Unmap().Is4() == v4 {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// PrimaryInternalIP returns the address a node's speaker works from: its first IPv4 InternalIP, or on
// an IPv6-only node its first IPv6 one. A nil node, or one without an InternalIP that parses, gives
// false.
func PrimaryInternalIP(node *corev1.Node) (netip.Addr, bool) {
	if ip, ok := InternalIP(node, true); ok {
		return ip, true
	}
	return InternalIP(node, false)
}

// NetworkUnavailable reports whether the node's NetworkUnavailable condition is True. A nil node
// gives false.
func NetworkUnavailable(node *corev1.Node) bool {
	if node == nil {
		return false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
