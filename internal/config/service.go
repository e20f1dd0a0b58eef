package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ironlb/ironlb/internal/allocator"
)

// Service annotations (MetalLB's; the metallb.universe.tf/ forms are deprecated but still read).
const (
	AnnotationAddressPool       = "metallb.io/address-pool"
	AnnotationLoadBalancerIPs   = "metallb.io/loadBalancerIPs"
	AnnotationAllowSharedIP     = "metallb.io/allow-shared-ip"
	AnnotationAllocatedFromPool = "metallb.io/ip-allocated-from-pool"
	legacyPrefix                = "metallb.universe.tf/"
)

// annotation returns the value of a metallb.io annotation, falling back to its deprecated
// metallb.universe.tf form; deprecated reports the legacy key when only it was used.
func annotation(svc *corev1.Service, key string) (val string, deprecated string) {
	if v, ok := svc.Annotations[key]; ok {
		return v, ""
	}
	legacy := legacyPrefix + strings.TrimPrefix(key, "metallb.io/")
	if v, ok := svc.Annotations[legacy]; ok {
		return v, legacy
	}
	return "", ""
}

// ErrBadService marks a Service whose own spec or annotations can never be satisfied.
var ErrBadService = errors.New("invalid service")

// Request turns a LoadBalancer Service into an allocation request. It returns the deprecated annotation
// keys it read (for a warning event) and an error wrapping ErrBadService when the Service's own fields
// contradict each other.
func Request(svc *corev1.Service, pools *Pools) (allocator.Request, []string, error) {
	req := allocator.Request{Key: allocator.Key{Namespace: svc.Namespace, Name: svc.Name}}
	var deprecated []string
	note := func(d string) {
		if d != "" {
			deprecated = append(deprecated, d)
		}
	}
	for _, f := range svc.Spec.IPFamilies {
		if f == corev1.IPv6Protocol {
			req.Families = append(req.Families, allocator.IPv6)
		} else {
			req.Families = append(req.Families, allocator.IPv4)
		}
	}
	if len(req.Families) == 0 {
		req.Families = []allocator.Family{allocator.IPv4}
	}
	req.Policy = allocator.SingleStack
	if p := svc.Spec.IPFamilyPolicy; p != nil {
		switch *p {
		case corev1.IPFamilyPolicyPreferDualStack:
			req.Policy = allocator.PreferDualStack
		case corev1.IPFamilyPolicyRequireDualStack:
			req.Policy = allocator.RequireDualStack
		}
	}
	pool, d := annotation(svc, AnnotationAddressPool)
	note(d)
	req.Pool = strings.TrimSpace(pool)
	key, d := annotation(svc, AnnotationAllowSharedIP)
	note(d)
	req.SharingKey = key
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		req.BackendKey = labels.SelectorFromSet(svc.Spec.Selector).String()
		if req.BackendKey == "" {
			req.BackendKey = "<no selector>/" + svc.Namespace + "/" + svc.Name // endpoints managed by hand: never the same pods
		}
	}
	for _, p := range svc.Spec.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = string(corev1.ProtocolTCP)
		}
		req.Ports = append(req.Ports, allocator.Port{Protocol: proto, Port: p.Port})
	}
	ips, d := annotation(svc, AnnotationLoadBalancerIPs)
	note(d)
	switch {
	case ips != "" && svc.Spec.LoadBalancerIP != "":
		return req, deprecated, fmt.Errorf("%w: spec.loadBalancerIP and the %s annotation are both set; use one", ErrBadService, AnnotationLoadBalancerIPs)
	case ips != "":
		seen := map[bool]bool{}
		for _, s := range strings.Split(ips, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return req, deprecated, fmt.Errorf("%w: %s: %q is not an IP address", ErrBadService, AnnotationLoadBalancerIPs, strings.TrimSpace(s))
			}
			if seen[a.Is4()] {
				return req, deprecated, fmt.Errorf("%w: %s: more than one address of the same family (%s)", ErrBadService, AnnotationLoadBalancerIPs, ips)
			}
			seen[a.Is4()] = true
			req.Requested = append(req.Requested, a.Unmap())
		}
	case svc.Spec.LoadBalancerIP != "":
		a, err := netip.ParseAddr(svc.Spec.LoadBalancerIP)
		if err != nil {
			return req, deprecated, fmt.Errorf("%w: spec.loadBalancerIP %q is not an IP address", ErrBadService, svc.Spec.LoadBalancerIP)
		}
		req.Requested = []netip.Addr{a.Unmap()}
	}
	for _, a := range req.Requested {
		fam := allocator.IPv4
		if a.Is6() {
			fam = allocator.IPv6
		}
		ok := false
		for _, f := range req.Families {
			ok = ok || f == fam
		}
		if !ok && req.Policy == allocator.SingleStack {
			return req, deprecated, fmt.Errorf("%w: requested address %s is not of the Service's IP family %v", ErrBadService, a, svc.Spec.IPFamilies)
		}
	}
	if pools != nil {
		req.Candidates = pools.Candidates(svc.Namespace, svc.Labels)
		for _, n := range pools.Names { // serviceAllocation also binds explicit requests, as in MetalLB
			if !pools.ByName[n].Serves(svc.Namespace, svc.Labels) {
				req.Excluded = append(req.Excluded, n)
			}
		}
	}
	return req, deprecated, nil
}

// Serving says whether ironlb serves a Service and, when not, why (Serves).
type Serving string

const (
	// Served: a LoadBalancer Service of ironlb's class.
	Served Serving = "Served"
	// NotLoadBalancer: the Service is not of type LoadBalancer. What ironlb gave it, it takes back
	// (MetalLB clears a Service that stops being a LoadBalancer).
	NotLoadBalancer Serving = "NotLoadBalancer"
	// OtherClass: a LoadBalancer Service of another implementation's class (or of none, when ironlb
	// runs with --lb-class). ironlb never touches it: another implementation writes its status.
	OtherClass Serving = "OtherLoadBalancerClass"
)

// Serves decides whether ironlb, started with --lb-class=class, serves a Service. It is MetalLB's
// rule (filterByLoadBalancerClass in internal/k8s/controllers, shared by its controller and
// speakers): without a class ironlb serves only the Services without spec.loadBalancerClass; with
// one, only the Services of exactly that class. Serving both would let two implementations write
// the status of a Service that has no class.
func Serves(svc *corev1.Service, class string) Serving {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return NotLoadBalancer
	}
	if svc.Spec.LoadBalancerClass == nil {
		if class == "" {
			return Served
		}
		return OtherClass
	}
	if *svc.Spec.LoadBalancerClass != class {
		return OtherClass
	}
	return Served
}

// Ours reports whether ironlb serves a Service: Serves(svc, class) == Served.
func Ours(svc *corev1.Service, class string) bool { return Serves(svc, class) == Served }

// NotServedMessage says, for a LoadBalancer Service of another class, why ironlb (started with
// --lb-class=class) leaves it alone and what would make ironlb serve it.
func NotServedMessage(svc *corev1.Service, class string) string {
	if svc.Spec.LoadBalancerClass == nil {
		return fmt.Sprintf("the Service has no spec.loadBalancerClass and ironlb serves only class %q (start the controller and speakers without --lb-class to serve Services without a class)", class)
	}
	c := *svc.Spec.LoadBalancerClass
	if class == "" {
		return fmt.Sprintf("spec.loadBalancerClass %q is not served by ironlb (start the controller and speakers with --lb-class=%s to serve it)", c, c)
	}
	return fmt.Sprintf("spec.loadBalancerClass %q is not served by ironlb, which serves class %q (start the controller and speakers with --lb-class=%s to serve it)", c, class, c)
}

// IngressAddrs returns the addresses in a Service's status.loadBalancer.ingress, unmapped, in
// order; entries without an IP (hostname only) or whose IP does not parse are skipped.
func IngressAddrs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}
