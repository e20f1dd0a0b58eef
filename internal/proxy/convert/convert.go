// Package convert turns Kubernetes objects (Services, EndpointSlices, this node's Node) into the
// nftrules.Model that `ironlb proxy` and `ironlb trace` build rules from, once, the way
// kube-proxy's ServiceChangeTracker and EndpointSliceCache read them.
//
// It is pure: it reads API types and returns plain values, so its decisions are table-tested
// without an apiserver. Anything wrong with a Service that can be worked around (an unknown
// balancing algorithm, an unparsable source range) comes back as a typed Warning for the caller
// to log and turn into an event; Services that get no rules at all come back with a SkipReason.
package convert

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// AnnotationAlgorithm selects a Service's balancing algorithm: random (the default), round-robin
// or maglev (consistent source hashing). An unknown value falls back to random with a Warning.
const AnnotationAlgorithm = "ironlb.io/load-balancing"

// Labels that take a Service (and its EndpointSlices) away from the default proxy, as in
// kube-proxy: the proxy's informers select `!LabelServiceProxyName,!LabelHeadless`.
const (
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	LabelHeadless         = "service.kubernetes.io/headless"
)

// InformerSelector is the label selector kube-proxy puts on its Service and EndpointSlice
// informers.
const InformerSelector = "!" + LabelServiceProxyName + ",!" + LabelHeadless

// SkipReason says why a Service gets no rules. The zero value means it does.
type SkipReason uint8

const (
	// NotSkipped: the Service is proxied.
	NotSkipped SkipReason = iota
	// SkipExternalName: type ExternalName is a DNS alias, not proxied.
	SkipExternalName
	// SkipHeadless: clusterIP None (or the headless label).
	SkipHeadless
	// SkipNoClusterIP: no valid ClusterIP (not allocated yet).
	SkipNoClusterIP
	// SkipOtherProxy: labelled service.kubernetes.io/service-proxy-name, served by another proxy.
	SkipOtherProxy
)

func (r SkipReason) String() string {
	switch r {
	case NotSkipped:
		return "proxied"
	case SkipExternalName:
		return "external-name"
	case SkipHeadless:
		return "headless"
	case SkipNoClusterIP:
		return "no-cluster-ip"
	case SkipOtherProxy:
		return "other-proxy"
	}
	return "unknown"
}

// AnnotationExternalMode selects how a Service's load-balancer and external-IP traffic reaches
// its pods: "snat" (as kube-proxy) or "dsr" (direct server return; see nftrules.PlanDSR). Absent:
// the proxy's --external-mode. An unknown value falls back to that default with a Warning.
const AnnotationExternalMode = "ironlb.io/external-mode"

// WarningReason classifies a Warning (event reasons and test expectations).
type WarningReason string

const (
	// BadAlgorithm: the AnnotationAlgorithm value is unknown; random is used.
	BadAlgorithm WarningReason = "InvalidLoadBalancingAlgorithm"
	// BadExternalMode: the AnnotationExternalMode value is unknown; the proxy's default is used.
	BadExternalMode WarningReason = "InvalidExternalMode"
	// BadAddress: a clusterIP, externalIP or load-balancer ingress IP does not parse; it is ignored.
	BadAddress WarningReason = "InvalidAddress"
	// BadSourceRange: a loadBalancerSourceRanges entry does not parse; it is ignored.
	BadSourceRange WarningReason = "InvalidSourceRange"
	// BadProtocol: a port's protocol is not TCP, UDP or SCTP; the port is ignored.
	BadProtocol WarningReason = "UnsupportedProtocol"
)

// Warning is something wrong with a Service that the proxy works around.
type Warning struct {
	Reason  WarningReason
	Message string
}

func (w Warning) String() string { return string(w.Reason) + ": " + w.Message }

// Service converts svc and the EndpointSlices labelled with its name (in its namespace) into the
// dataplane's view of it, for node (endpoints with that nodeName are Local). A skipped Service
// returns nil and the reason.
//
// Endpoints are matched to Service ports by port name and protocol, as kube-proxy does, so a
// named targetPort resolves per EndpointSlice (pods may number a named port differently). The
// first address of each endpoint is used. Conditions follow the API: ready unset means ready,
// serving unset means as ready, terminating unset means not terminating.
func Service(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, node string) (*nftrules.Service, SkipReason, []Warning) {
	if svc.Labels[LabelServiceProxyName] != "" {
		return nil, SkipOtherProxy, nil
	}
	if _, ok := svc.Labels[LabelHeadless]; ok {
		return nil, SkipHeadless, nil
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, SkipExternalName, nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	if len(ips) > 0 && ips[0] == corev1.ClusterIPNone {
		return nil, SkipHeadless, nil
	}
	var warns []Warning
	warn := func(r WarningReason, format string, args ...any) {
		warns = append(warns, Warning{r, fmt.Sprintf(format, args...)})
	}
	out := &nftrules.Service{Namespace: svc.Namespace, Name: svc.Name}
	out.ClusterIPs = parseAddrs(ips, func(s string) { warn(BadAddress, "clusterIP %q", s) })
	if len(out.ClusterIPs) == 0 {
		return nil, SkipNoClusterIP, warns
	}
	out.ExternalIPs = parseAddrs(svc.Spec.ExternalIPs, func(s string) { warn(BadAddress, "externalIP %q", s) })
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == "" || in.IPMode != nil && *in.IPMode == corev1.LoadBalancerIPModeProxy {
			continue // a hostname, or a proxying load balancer that delivers to the node itself
		}
		out.LoadBalancerIPs = append(out.LoadBalancerIPs,
			parseAddrs([]string{in.IP}, func(s string) { warn(BadAddress, "load-balancer ingress IP %q", s) })...)
	}
	out.ExternalTrafficPolicyLocal = svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	out.InternalTrafficPolicyLocal = svc.Spec.InternalTrafficPolicy != nil &&
		*svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	if out.ExternalTrafficPolicyLocal && svc.Spec.HealthCheckNodePort > 0 && svc.Spec.HealthCheckNodePort <= 65535 {
		out.HealthCheckNodePort = uint16(svc.Spec.HealthCheckNodePort)
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		out.SessionAffinityClientIP = true
		out.SessionAffinityTimeout = nftrules.DefaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			out.SessionAffinityTimeout = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	for _, r := range svc.Spec.LoadBalancerSourceRanges {
		r = strings.TrimSpace(r)
		if p, ok := parsePrefix(r); ok {
			out.LoadBalancerSourceRanges = append(out.LoadBalancerSourceRanges, p)
		} else {
			warn(BadSourceRange, "loadBalancerSourceRanges entry %q", r)
		}
	}
	if v, ok := svc.Annotations[AnnotationAlgorithm]; ok {
		alg, err := nftrules.ParseAlgorithm(strings.TrimSpace(v))
		if err != nil {
			warn(BadAlgorithm, "annotation %s: %v; using random", AnnotationAlgorithm, err)
		}
		out.Algorithm = alg
	}
	if v, ok := svc.Annotations[AnnotationExternalMode]; ok {
		mode, err := nftrules.ParseExternalMode(strings.TrimSpace(v))
		if err != nil {
			warn(BadExternalMode, "annotation %s: %v; using the proxy's --external-mode", AnnotationExternalMode, err)
		}
		out.ExternalMode = mode
	}
	for _, sp := range svc.Spec.Ports {
		proto, ok := protocol(sp.Protocol)
		if !ok {
			warn(BadProtocol, "port %q protocol %q", sp.Name, sp.Protocol)
			continue
		}
		if sp.Port <= 0 || sp.Port > 65535 {
			continue // the API rejects it
		}
		p := nftrules.Port{Name: sp.Name, Protocol: proto, Port: uint16(sp.Port)}
		if sp.NodePort > 0 && sp.NodePort <= 65535 {
			p.NodePort = uint16(sp.NodePort)
		}
		p.Endpoints = endpoints(sp.Name, sp.Protocol, eps, node)
		out.Ports = append(out.Ports, p)
	}
	return out, NotSkipped, warns
}

// endpoints collects the endpoints of the Service port named name with protocol proto from eps.
func endpoints(name string, proto corev1.Protocol, eps []*discoveryv1.EndpointSlice, node string) []nftrules.Endpoint {
	var out []nftrules.Endpoint
	for _, es := range eps {
		if es.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		var target uint16
		for _, p := range es.Ports {
			pn, pp := "", corev1.ProtocolTCP
			if p.Name != nil {
				pn = *p.Name
			}
			if p.Protocol != nil {
				pp = *p.Protocol
			}
			if pn == name && pp == proto && p.Port != nil && *p.Port > 0 && *p.Port <= 65535 {
				target = uint16(*p.Port)
				break
			}
		}
		if target == 0 {
			continue
		}
		for _, e := range es.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			a, err := netip.ParseAddr(e.Addresses[0])
			if err != nil {
				continue
			}
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			ep := nftrules.Endpoint{
				Addr: a.Unmap(), Port: target,
				Ready:       ready,
				Serving:     ready,
				Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
			}
			if e.Conditions.Serving != nil {
				ep.Serving = *e.Conditions.Serving
			}
			if e.NodeName != nil {
				ep.Node = *e.NodeName
			}
			ep.Local = ep.Node != "" && ep.Node == node
			if h := e.Hints; h != nil { // topology hints (trafficDistribution), nftrules.TopologyMode
				for _, z := range h.ForZones {
					ep.ZoneHints = append(ep.ZoneHints, z.Name)
				}
				for _, n := range h.ForNodes {
					ep.NodeHints = append(ep.NodeHints, n.Name)
				}
			}
			out = append(out, ep)
		}
	}
	// One order whatever the slices' order (Incremental compares Services deeply): a total one, as
	// an endpoint listed in two slices (while the EndpointSlice controller moves it) may carry
	// different conditions in each.
	slices.SortFunc(out, func(a, b nftrules.Endpoint) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Port, b.Port); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		for _, f := range [][2]bool{{a.Ready, b.Ready}, {a.Serving, b.Serving}, {a.Terminating, b.Terminating}} {
			if f[0] != f[1] {
				if f[0] {
					return 1
				}
				return -1
			}
		}
		if c := slices.Compare(a.ZoneHints, b.ZoneHints); c != 0 {
			return c
		}
		return slices.Compare(a.NodeHints, b.NodeHints)
	})
	return out
}

func protocol(p corev1.Protocol) (nftrules.Protocol, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return nftrules.TCP, true
	case corev1.ProtocolUDP:
		return nftrules.UDP, true
	case corev1.ProtocolSCTP:
		return nftrules.SCTP, true
	}
	return "", false
}

// parseAddrs parses addresses, reporting (and dropping) the invalid ones.
func parseAddrs(in []string, bad func(string)) []netip.Addr {
	var out []netip.Addr
	for _, s := range in {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			bad(s)
			continue
		}
		out = append(out, a.Unmap())
	}
	return out
}

// parsePrefix parses a CIDR, or a bare address as a host prefix.
func parsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}
