// Package allocator keeps the address pools of LoadBalancer Services and chooses their addresses. It is
// pure and deterministic: it imports nothing from Kubernetes, does no I/O, starts no goroutines, and the
// same sequence of calls always gives the same answers. The controller turns Services and
// IPAddressPools into Requests and Pools (internal/config) and owns one Allocator.
//
// # Data structure
//
// Per pool and per family the allocator keeps:
//
//   - the free space as sorted, disjoint intervals in a treap (freeSet). Allocating or releasing one
//     address splits, shrinks, extends or joins intervals in O(log n), n being the number of intervals,
//     which is bounded by the number of addresses in use plus one, not by the size of the pool: an IPv6
//     /64 is one interval, never a list of addresses. The lowest free address is the start of the first
//     interval; with AvoidBuggyIPs it is at most two addresses further (a .255 then a .0), because no
//     interval is ever made only of such addresses;
//   - an index from (sharing key, backend key) to the sorted addresses in use under that key, so the
//     lowest address a Service may share is found by looking only at addresses with its own keys;
//   - counters of addresses in use, and the capacity computed once per SetPools, for Stats.
//
// Globally it keeps each Service's assignment and, per address in use, its holders, its sharing and
// backend keys and the (protocol, port) pairs in use on it. Addresses are netip.Addr everywhere, map keys
// included. The chosen address in a pool is min(lowest free, lowest shareable), which is what MetalLB's
// linear scan from the first address returns, at O(log n) instead of O(pool size) per call.
//
// # MetalLB rules followed
//
// From MetalLB's internal/allocator and controller/service.go (v0.16):
//   - lowest address first, no randomisation; AvoidBuggyIPs skips IPv4 .0 and .255, also for requested
//     addresses (they count as outside the pool);
//   - order of choice: requested addresses, then the address-pool annotation, then the candidate pools;
//     an existing assignment that still fits is kept (re-checking pool, families and sharing);
//   - families: SingleStack takes the primary family; RequireDualStack needs one pool with both;
//     PreferDualStack takes the first pool with both, else the first with the primary family, else the
//     first with the secondary; a PreferDualStack Service holding one family gets the other added from
//     the same pool when it becomes available;
//   - sharing: an address in use may be shared only by Services with the same non-empty sharing key, the
//     same backend key (externalTrafficPolicy Local selector) and no common (protocol, port) pair, so
//     TCP/53 and UDP/53 may share; the sole holder of an address may change its own keys and ports;
//   - pool counters: shared addresses count once; available = capacity - assigned, capacity excluding
//     buggy addresses when avoided.
//
// # Where we differ, deliberately
//
//   - Candidate order is the caller's, deterministic (serviceAllocation priority, then the rest in a
//     stable order), where MetalLB iterates a Go map for pools without serviceAllocation.
//   - Pools without AutoAssign are skipped even when listed as candidates.
//   - SetPools never fails: it releases and returns the Services whose addresses left their pool,
//     including when the address now belongs to another pool (MetalLB relabels it), because the new pool
//     may not be one the Service may use. Overlapping pools, which configuration rejects, are resolved
//     by giving an address to the first pool listed.
//   - PreferDualStack with one requested address is honoured as is (MetalLB requires the requested
//     families to equal the Service's).
//   - Counts are exact up to math.MaxInt64 (MetalLB saturates any IPv6 CIDR with 62 or more host bits).
//   - Every error is an *Error carrying a Reason (errors.Is(err, ErrInUse) etc.), and a failed call
//     changes nothing.
//   - ParseRange rejects IPv4-mapped IPv6 addresses and zones; like MetalLB's config.ParseCIDR it accepts
//     and masks a CIDR with host bits set.
package allocator
