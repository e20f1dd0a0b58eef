// Package config turns MetalLB's custom resources, and the Services, EndpointSlices and Nodes they
// apply to, into ironlb's plain model once, validating them on the way. Everything here is pure (no
// client, no I/O) and deterministic, so it is table-tested and its errors name the object at fault.
//
// It takes typed objects: the roles' informers hand over Kubernetes objects, and the code that
// decodes them (unstructured custom resources) stays at those edges. Past this package, the
// allocator (Pools, Request), the election (BuildModel's Model, read by the speaker's layer-2 plan)
// and bgpconfig (fed from the same Model) never see a Kubernetes object.
//
// The speaker's model lives here, beside ParsePools, rather than in a package of its own, so that
// the controller and the speakers parse pools with one parser: an address the controller would not
// allocate from a pool is never announced from it either. BuildModel never fails: every object, or
// part of one, it leaves out is in Model.Dropped with a DropReason, for the speaker to report.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/allocator"
)

// Pool is an IPAddressPool in model form.
type Pool struct {
	allocator.Pool
	// Labels are the IPAddressPool's labels, which advertisements' ipAddressPoolSelectors match.
	Labels map[string]string
	// Priority from serviceAllocation; 0 means none (ranks after every set priority, as in MetalLB).
	Priority int
	// Pinned is true when serviceAllocation restricts the pool to some namespaces or Services.
	Pinned bool
	// Namespaces the pool serves (explicit names and those whose labels match a namespaceSelector); nil
	// means any namespace.
	Namespaces map[string]bool
	// ServiceSelectors restrict the pool to Services whose labels match one of them; empty means any.
	ServiceSelectors []labels.Selector
}

// Pools is the validated pool set.
type Pools struct {
	ByName  map[string]*Pool
	Names   []string         // sorted
	Invalid map[string]error // pools left out, with why
}

// ParsePools converts and validates pools. nsLabels maps every namespace to its labels (for
// namespaceSelectors). Invalid pools are left out and reported together in the error; the valid ones
// are still returned, so one bad object does not take addresses away from every Service.
func ParsePools(crs []v1beta1.IPAddressPool, nsLabels map[string]map[string]string) (*Pools, error) {
	out := &Pools{ByName: map[string]*Pool{}, Invalid: map[string]error{}}
	var errs []error
	sorted := append([]v1beta1.IPAddressPool(nil), crs...)
	// On overlap the older pool wins (then the name decides), so a new pool can never take addresses
	// away from one already in use.
	sort.Slice(sorted, func(i, j int) bool {
		ti, tj := sorted[i].CreationTimestamp, sorted[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return sorted[i].Name < sorted[j].Name
	})
	for i := range sorted {
		p, err := parsePool(&sorted[i], nsLabels)
		if err != nil {
			out.Invalid[sorted[i].Name] = err
			errs = append(errs, fmt.Errorf("ipaddresspool %s: %w", sorted[i].Name, err))
			continue
		}
		if other, r1, r2, ok := overlapsAny(out, p); ok {
			err := fmt.Errorf("range %s overlaps %s of ipaddresspool %s", fmtRange(r1), fmtRange(r2), other)
			out.Invalid[p.Name] = err
			errs = append(errs, fmt.Errorf("ipaddresspool %s: %w", p.Name, err))
			continue
		}
		out.ByName[p.Name] = p
		out.Names = append(out.Names, p.Name)
	}
	sort.Strings(out.Names)
	return out, errors.Join(errs...)
}

// ValidatePool checks one pool against the others (as the admission webhook does for a create or update):
// its own syntax, and no overlap with any other pool.
func ValidatePool(cr *v1beta1.IPAddressPool, others []v1beta1.IPAddressPool) error {
	p, err := parsePool(cr, nil)
	if err != nil {
		return err
	}
	existing := &Pools{ByName: map[string]*Pool{}, Invalid: map[string]error{}}
	for i := range others {
		if others[i].Name == cr.Name {
			continue
		}
		o, err := parsePool(&others[i], nil)
		if err != nil {
			continue // an invalid stored pool is reported on its own
		}
		existing.ByName[o.Name] = o
		existing.Names = append(existing.Names, o.Name)
	}
	if other, r1, r2, ok := overlapsAny(existing, p); ok {
		return fmt.Errorf("range %s overlaps %s of ipaddresspool %s", fmtRange(r1), fmtRange(r2), other)
	}
	return nil
}

func parsePool(cr *v1beta1.IPAddressPool, nsLabels map[string]map[string]string) (*Pool, error) {
	p := &Pool{Pool: allocator.Pool{Name: cr.Name, AvoidBuggyIPs: cr.Spec.AvoidBuggyIPs, AutoAssign: true}, Labels: cr.Labels}
	if cr.Spec.AutoAssign != nil {
		p.AutoAssign = *cr.Spec.AutoAssign
	}
	if len(cr.Spec.Addresses) == 0 {
		return nil, errors.New("addresses: at least one CIDR or range is required")
	}
	for _, a := range cr.Spec.Addresses {
		rs, err := allocator.ParseRange(a)
		if err != nil {
			return nil, fmt.Errorf("addresses: %w", err)
		}
		p.Ranges = append(p.Ranges, rs...)
	}
	// Overlap inside the pool itself.
	for i := range p.Ranges {
		for j := i + 1; j < len(p.Ranges); j++ {
			if rangesOverlap(p.Ranges[i], p.Ranges[j]) {
				return nil, fmt.Errorf("addresses: %s overlaps %s in the same pool", fmtRange(p.Ranges[i]), fmtRange(p.Ranges[j]))
			}
		}
	}
	if sa := cr.Spec.AllocateTo; sa != nil {
		p.Priority = sa.Priority
		if sa.Priority < 0 {
			return nil, fmt.Errorf("serviceAllocation.priority %d: must not be negative", sa.Priority)
		}
		// As MetalLB (validateLabelSelectorDuplicate): a selector that does not parse, or is listed
		// twice (values in any order), refuses the pool; found by the differential test against it.
		for _, l := range []struct {
			field string
			sels  []metav1.LabelSelector
		}{{"serviceAllocation.namespaceSelectors", sa.NamespaceSelectors}, {"serviceAllocation.serviceSelectors", sa.ServiceSelectors}} {
			if field, err := checkSelectors(l.field, l.sels); err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
		}
		if len(sa.Namespaces) > 0 || len(sa.NamespaceSelectors) > 0 {
			p.Namespaces = map[string]bool{}
			for _, ns := range sa.Namespaces {
				if p.Namespaces[ns] {
					return nil, fmt.Errorf("serviceAllocation.namespaces: %q is listed twice", ns)
				}
				p.Namespaces[ns] = true
			}
			for i, s := range sa.NamespaceSelectors {
				sel, err := metav1.LabelSelectorAsSelector(&s)
				if err != nil {
					return nil, fmt.Errorf("serviceAllocation.namespaceSelectors[%d]: %w", i, err)
				}
				for ns, l := range nsLabels {
					if sel.Matches(labels.Set(l)) {
						p.Namespaces[ns] = true
					}
				}
			}
		}
		for i, s := range sa.ServiceSelectors {
			sel, err := metav1.LabelSelectorAsSelector(&s)
			if err != nil {
				return nil, fmt.Errorf("serviceAllocation.serviceSelectors[%d]: %w", i, err)
			}
			p.ServiceSelectors = append(p.ServiceSelectors, sel)
		}
		p.Pinned = p.Namespaces != nil || len(p.ServiceSelectors) > 0
	}
	return p, nil
}

// Contains reports whether a lies in one of the pool's ranges.
func (p *Pool) Contains(a netip.Addr) bool {
	for _, r := range p.Ranges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// Serves reports whether the pool may serve a Service in namespace ns with labels lbls (MetalLB's
// isPoolCompatibleWithService: namespace and service conditions ANDed).
func (p *Pool) Serves(ns string, lbls map[string]string) bool {
	if p.Namespaces != nil && !p.Namespaces[ns] {
		return false
	}
	if len(p.ServiceSelectors) == 0 {
		return true
	}
	for _, s := range p.ServiceSelectors {
		if s.Matches(labels.Set(lbls)) {
			return true
		}
	}
	return false
}

// Candidates returns the pools a Service may be auto-assigned from, best first: pools pinned to it by
// serviceAllocation (by priority, 0 last, then name), then the auto-assign pools without
// serviceAllocation that are not pinned elsewhere (by priority, then name — MetalLB leaves this order to
// map iteration; ironlb makes it deterministic).
func (ps *Pools) Candidates(ns string, lbls map[string]string) []string {
	type cand struct {
		name   string
		prio   int
		pinned bool
	}
	var cs []cand
	for _, n := range ps.Names {
		p := ps.ByName[n]
		if !p.AutoAssign || !p.Serves(ns, lbls) {
			continue
		}
		cs = append(cs, cand{n, p.Priority, p.Pinned})
	}
	rank := func(p int) int {
		if p == 0 {
			return int(^uint(0) >> 1)
		}
		return p
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].pinned != cs[j].pinned {
			return cs[i].pinned
		}
		if rank(cs[i].prio) != rank(cs[j].prio) {
			return rank(cs[i].prio) < rank(cs[j].prio)
		}
		return cs[i].name < cs[j].name
	})
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return out
}

// Allocator returns the pools in the allocator's form.
func (ps *Pools) Allocator() []allocator.Pool {
	out := make([]allocator.Pool, 0, len(ps.Names))
	for _, n := range ps.Names {
		out = append(out, ps.ByName[n].Pool)
	}
	return out
}

func overlapsAny(ps *Pools, p *Pool) (string, allocator.Range, allocator.Range, bool) {
	for _, n := range ps.Names {
		for _, r1 := range p.Ranges {
			for _, r2 := range ps.ByName[n].Ranges {
				if rangesOverlap(r1, r2) {
					return n, r1, r2, true
				}
			}
		}
	}
	return "", allocator.Range{}, allocator.Range{}, false
}

func rangesOverlap(a, b allocator.Range) bool {
	if a.First.Is4() != b.First.Is4() {
		return false
	}
	return a.First.Compare(b.Last) <= 0 && b.First.Compare(a.Last) <= 0
}

func fmtRange(r allocator.Range) string {
	if r.First == r.Last {
		return r.First.String()
	}
	// Print as a CIDR when it is exactly one.
	for bits := 0; bits <= r.First.BitLen(); bits++ {
		p := netip.PrefixFrom(r.First, bits)
		if p.Masked().Addr() == r.First && lastOf(p) == r.Last {
			return p.String()
		}
	}
	return r.First.String() + "-" + r.Last.String()
}

func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// PoolWarnings returns what a pool says that is valid but has no effect, for the controller to warn
// about (MetalLB accepts these silently): avoidBuggyIPs on a pool without IPv4 ranges (it only skips
// IPv4 addresses ending in .0 and .255). A pool that does not parse gives none (ParsePools reports it).
func PoolWarnings(cr *v1beta1.IPAddressPool) []string {
	p, err := parsePool(cr, nil)
	if err != nil || !p.AvoidBuggyIPs {
		return nil
	}
	for _, r := range p.Ranges {
		if r.First.Is4() {
			return nil
		}
	}
	return []string{"avoidBuggyIPs has no effect: the pool has no IPv4 range (only IPv4 addresses ending in .0 and .255 are avoided)"}
}

// Infra is the cluster's own addresses, which a pool should not hand out: a Service given one would
// take traffic meant for a node, a pod or the Service network. MetalLB does not check this; ironlb
// warns (InfraOverlaps) and still uses the pool, so that MetalLB configurations keep working.
type Infra struct {
	// NodeAddrs maps each node's name to its InternalIP and ExternalIP addresses.
	NodeAddrs map[string][]netip.Addr
	// PodCIDRs maps each node's name to its spec.podCIDRs.
	PodCIDRs map[string][]netip.Prefix
	// ServiceCIDRs maps each networking.k8s.io ServiceCIDR object's name to its spec.cidrs: the
	// Service CIDR as a whole (clusters without that API have none; ServiceIPs then stand for it).
	ServiceCIDRs map[string][]netip.Prefix
	// ServiceIPs are addresses known to lie in the Service CIDR (the kubernetes Service's ClusterIPs,
	// which are also the apiserver's in-cluster address). Those within a ServiceCIDR are not reported
	// again.
	ServiceIPs []netip.Addr
	// APIServerAddrs are the apiserver's own addresses (the endpoints of the kubernetes Service).
	// Those that are also a node's address are reported as the node's only.
	APIServerAddrs []netip.Addr
}

// InfraOverlaps returns one warning for each of the cluster's addresses or pod CIDRs that the pool
// holds, in node-name order. A pool that does not parse gives none (ParsePools reports it).
func InfraOverlaps(cr *v1beta1.IPAddressPool, in Infra) []string {
	p, err := parsePool(cr, nil)
	if err != nil {
		return nil
	}
	overlaps := func(pr netip.Prefix) bool {
		r := allocator.Range{First: pr.Masked().Addr(), Last: lastOf(pr)}
		for _, pr := range p.Ranges {
			if rangesOverlap(r, pr) {
				return true
			}
		}
		return false
	}
	names := make([]string, 0, len(in.NodeAddrs)+len(in.PodCIDRs))
	for n := range in.NodeAddrs {
		names = append(names, n)
	}
	for n := range in.PodCIDRs {
		if _, ok := in.NodeAddrs[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		for _, a := range in.NodeAddrs[n] {
			if p.Contains(a.Unmap()) {
				out = append(out, fmt.Sprintf("the pool holds %s, an address of node %s", a.Unmap(), n))
			}
		}
		for _, c := range in.PodCIDRs[n] {
			if overlaps(c) {
				out = append(out, fmt.Sprintf("the pool overlaps %s, the pod CIDR of node %s", c, n))
			}
		}
	}
	cidrNames := make([]string, 0, len(in.ServiceCIDRs))
	for n := range in.ServiceCIDRs {
		cidrNames = append(cidrNames, n)
	}
	sort.Strings(cidrNames)
	inServiceCIDR := func(a netip.Addr) bool {
		for _, n := range cidrNames {
			for _, c := range in.ServiceCIDRs[n] {
				if c.Contains(a) {
					return true
				}
			}
		}
		return false
	}
	for _, n := range cidrNames {
		for _, c := range in.ServiceCIDRs[n] {
			if overlaps(c) {
				out = append(out, fmt.Sprintf("the pool overlaps %s, the Service CIDR (ServiceCIDR %s)", c, n))
			}
		}
	}
	for _, a := range in.ServiceIPs {
		if a := a.Unmap(); p.Contains(a) && !inServiceCIDR(a) {
			out = append(out, fmt.Sprintf("the pool holds %s, in the Service CIDR (the kubernetes Service, the apiserver's in-cluster address)", a))
		}
	}
	isNodeAddr := func(a netip.Addr) bool {
		for _, as := range in.NodeAddrs {
			for _, na := range as {
				if na.Unmap() == a {
					return true
				}
			}
		}
		return false
	}
	for _, a := range in.APIServerAddrs {
		if a := a.Unmap(); p.Contains(a) && !isNodeAddr(a) {
			out = append(out, fmt.Sprintf("the pool holds %s, an address of the apiserver (an endpoint of the kubernetes Service)", a))
		}
	}
	return out
}
