package allocator

import (
	"fmt"
	"net/netip"
)

// Family is an IP address family. The zero value is invalid.
type Family int

const (
	IPv4 Family = iota + 1
	IPv6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// FamilyOf returns the family of ip (IPv4 for IPv4-mapped IPv6 addresses, as net.ParseIP would), or 0
// for the zero Addr.
func FamilyOf(ip netip.Addr) Family {
	switch {
	case !ip.IsValid():
		return 0
	case ip.Unmap().Is4():
		return IPv4
	}
	return IPv6
}

// idx maps a valid family to 0 (IPv4) or 1 (IPv6) for per-family arrays.
func (f Family) idx() int {
	if f == IPv6 {
		return 1
	}
	return 0
}

// Policy is a Service's spec.ipFamilyPolicy. The zero value is SingleStack, the Kubernetes default.
type Policy int

const (
	SingleStack Policy = iota
	PreferDualStack
	RequireDualStack
)

func (p Policy) String() string {
	switch p {
	case SingleStack:
		return "SingleStack"
	case PreferDualStack:
		return "PreferDualStack"
	case RequireDualStack:
		return "RequireDualStack"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Key names a Service.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Port is one (protocol, port) pair a Service listens on. Two Services sharing an address must not both
// use the same pair; TCP/53 and UDP/53 are different pairs. Protocols compare exactly ("TCP", "UDP",
// "SCTP" as in Kubernetes).
type Port struct {
	Protocol string
	Port     int32
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

// Pool is an address pool (an IPAddressPool in model form).
//
// Ranges may be in any order, overlap each other and mix families; SetPools normalises them. Ranges
// whose ends are invalid, zoned, of different families or reversed are ignored: build them with
// ParseRange.
type Pool struct {
	Name          string
	Ranges        []Range
	AvoidBuggyIPs bool // never hand out IPv4 addresses ending in .0 or .255
	AutoAssign    bool // may be used for Services that name neither an address nor a pool
}

// Request describes what a LoadBalancer Service asks for. The zero value of every field but Key is a
// sensible default: IPv4 single-stack, no sharing, any pool.
type Request struct {
	Key Key
	// Families is spec.ipFamilies, primary first. Empty means [IPv4].
	Families []Family
	Policy   Policy
	// SharingKey is the allow-shared-ip annotation ("" = the Service never shares an address).
	SharingKey string
	// BackendKey is "" for externalTrafficPolicy Cluster and, for Local, a canonical selector string:
	// Services sharing an address must have the same one.
	BackendKey string
	Ports      []Port
	// Requested is spec.loadBalancerIP or the loadBalancerIPs annotation: at most one address per
	// family. When set, the Service gets exactly these addresses or an error.
	Requested []netip.Addr
	// Pool is the address-pool annotation ("" = any).
	Pool string
	// Candidates are the pools this Service may be auto-assigned from, in preference order, as computed
	// by the caller from serviceAllocation (priority, namespaces, selectors). Used only when Requested
	// and Pool are empty; unknown pools and pools with AutoAssign false are skipped.
	Candidates []string
	// Excluded are pools whose serviceAllocation does not admit this Service (MetalLB's
	// isPoolCompatibleWithService). No address of theirs is ever assigned to it, not even a requested
	// one (ErrPoolNotAllowed). Empty means no restriction.
	Excluded []string
}

// Assignment is what a Service holds: one address per family, primary family first, all from Pool.
type Assignment struct {
	IPs  []netip.Addr
	Pool string
}

// PoolStats are a pool's counters, as in IPAddressPool status and MetalLB's metrics. Assigned counts
// addresses in use (an address shared by several Services counts once); Available counts addresses that
// could still be handed out, so with AvoidBuggyIPs it excludes IPv4 .0 and .255. Counts that do not fit
// (large IPv6 ranges) saturate at math.MaxInt64.
type PoolStats struct {
	AssignedV4, AssignedV6, AvailableV4, AvailableV6 int64
	// Services counts the Services holding addresses of the pool (MetalLB's
	// metallb_allocator_services_allocated_total).
	Services int64
}
