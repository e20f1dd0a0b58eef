package nftrules

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The shared DNAT map.
//
// A Service port balanced at random without session affinity picks its endpoint with one rule
// that stays the same while its endpoints change:
//
//	meta l4proto tcp dnat ip to numgen random mod 65536 offset K map @dnat-endpoints-tcp-N
//
// The DNAT maps are interval maps, `typeof numgen random mod 65536 : ip daddr . tcp dport`, that
// map a key to an endpoint's address and port. Each of the port's endpoint sets (service- or
// local- chain) owns a window of WindowSize keys starting at K = id·WindowSize, and endpoint i of
// n owns keys [K + i·WindowSize/n, K + (i+1)·WindowSize/n - 1]. Map N of a protocol holds the
// windows N·WindowsPerMap to (N+1)·WindowsPerMap - 1. An endpoint change rewrites map elements
// only: no rule and no chain, so the kernel does not validate the table's jump graph at commit
// (tens of milliseconds at 10,000 Services), and the number of sets stays a fraction of the
// number of Services (the kernel finds a set by walking them all: a map per Service made loading
// 10,000 Services three times slower).
//
// Hairpin traffic (an endpoint reaching itself through its Service) is masqueraded in
// postrouting through one set of `ip saddr . ip daddr` pairs, one per endpoint address used
// through the map, instead of a rule in an endpoint chain. Several Services can share an
// endpoint address: State counts them.

// WindowsPerMap is the number of windows in one DNAT map. The kernel checks every element
// added to a map against every rule that looks it up (nft_add_set_elem walks the set's
// bindings), so one map for all Services made a full sync at 10,000 Services quadratic; maps of
// 64 windows keep the check short and the number of sets small.
const WindowsPerMap = 64

// WindowSize is the number of dnat-endpoints keys each endpoint set owns, and the modulus of its
// numgen: an endpoint of n gets WindowSize/n of them (±1).
const WindowSize = 1 << 16

// maxWindowID is the highest window ID: the last key of a window must stay below 2^32 (nft
// writes the end of an interval as its last key + 1). ID 0 is never used, so that no interval
// starts at key 0 (nft then always adds the same interval-end element at 0).
const maxWindowID = 1<<32/WindowSize - 2

// State is what a Builder carries from one sync of a table to the next: the window each endpoint
// set owns in dnat-endpoints, and how many Services use each endpoint address through it (one
// hairpin pair each). Full rebuilds it, keeping the windows that are still in use; Incremental
// updates it. If a transaction fails, keep the State and do a Full sync next (what Incremental
// changed is then rebuilt). The zero value is empty; a State is not safe for concurrent use.
type State struct {
	windows map[string]uint32 // by endpoint-set (service or local chain) name
	next    uint32            // IDs from next up were never handed out
	free    []uint32          // IDs below next not in use
	hairpin map[netip.Addr]int
	// dnatMaps counts the Services that use each DNAT map the table holds.
	dnatMaps map[string]int
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := &State{next: s.next, free: slices.Clone(s.free), windows: make(map[string]uint32, len(s.windows)),
		hairpin: make(map[netip.Addr]int, len(s.hairpin))}
	for k, v := range s.windows {
		c.windows[k] = v
	}
	for k, v := range s.hairpin {
		c.hairpin[k] = v
	}
	c.dnatMaps = maps.Clone(s.dnatMaps)
	return c
}

// Windows returns the number of windows in use.
func (s *State) Windows() int { return len(s.windows) }

func (s *State) init() {
	if s.windows == nil {
		s.windows = map[string]uint32{}
	}
	if s.hairpin == nil {
		s.hairpin = map[netip.Addr]int{}
	}
	if s.dnatMaps == nil {
		s.dnatMaps = map[string]int{}
	}
	if s.next == 0 {
		s.next = 1
	}
}

// alloc returns an unused window ID, the lowest freed one first; false if none is left.
func (s *State) alloc() (uint32, bool) {
	if n := len(s.free); n > 0 {
		id := s.free[n-1]
		s.free = s.free[:n-1]
		return id, true
	}
	if s.next > maxWindowID {
		return 0, false
	}
	s.next++
	return s.next - 1, true
}

func (s *State) release(name string) {
	if id, ok := s.windows[name]; ok {
		delete(s.windows, name)
		s.free = append(s.free, id)
	}
}

// windowFunc returns the window ID of an endpoint set; false means it has none (none left to
// hand out, or none known), and the set picks its endpoint through endpoint chains.
type windowFunc func(name string) (uint32, bool)

// lookupWindows returns the windows of s as they are, allocating none.
func (s *State) lookupWindows(name string) (uint32, bool) {
	id, ok := s.windows[name]
	return id, ok
}

// allocWindows returns s's window of an endpoint set, allocating one for a new set and
// recording its name in added.
func (s *State) allocWindows(added map[string]bool) windowFunc {
	return func(name string) (uint32, bool) {
		if id, ok := s.windows[name]; ok {
			return id, true
		}
		id, ok := s.alloc()
		if !ok {
			return 0, false
		}
		s.windows[name] = id
		added[name] = true
		return id, true
	}
}

// rebuild is the State of a Full sync from prev: windows still in use keep their IDs, new ones
// get IDs prev did not use, lowest first.
type rebuild struct {
	prev, next *State
	prevIDs    map[uint32]bool
	cursor     uint32
}

func newRebuild(prev *State) *rebuild {
	r := &rebuild{prev: prev, next: &State{}, prevIDs: map[uint32]bool{}, cursor: 1}
	r.next.init()
	if prev != nil {
		for _, id := range prev.windows {
			r.prevIDs[id] = true
		}
	}
	return r
}

func (r *rebuild) window(name string) (uint32, bool) {
	if id, ok := r.next.windows[name]; ok {
		return id, true
	}
	if r.prev != nil {
		if id, ok := r.prev.windows[name]; ok {
			r.next.windows[name] = id
			return id, true
		}
	}
	for ; r.cursor <= maxWindowID; r.cursor++ {
		if !r.prevIDs[r.cursor] {
			id := r.cursor
			r.cursor++
			r.next.windows[name] = id
			return id, true
		}
	}
	return 0, false
}

// finish drops the windows that no object refers to and fills in the free list.
func (r *rebuild) finish(used map[string]bool) *State {
	s := r.next
	var high uint32
	for name, id := range s.windows {
		if !used[name] {
			delete(s.windows, name)
			continue
		}
		high = max(high, id)
	}
	inUse := make(map[uint32]bool, len(s.windows))
	for _, id := range s.windows {
		inUse[id] = true
	}
	s.next = high + 1
	for id := high; id >= 1; id-- { // highest first: alloc pops the lowest
		if !inUse[id] {
			s.free = append(s.free, id)
		}
	}
	return s
}

// set copies s into dst.
func (s *State) set(dst *State) {
	if dst != nil {
		*dst = *s
	}
}

// dnatShard returns the shard number of DNAT map mp.
func dnatShard(mp string) uint32 {
	_, n, _ := strings.Cut(strings.TrimPrefix(mp, prefixDNATMap), "-")
	v, _ := strconv.ParseUint(n, 10, 32)
	return uint32(v)
}

// windowRange returns the keys endpoint i of n owns in window id, as an nft interval "lo-hi".
func windowRange(id uint32, i, n int) string {
	base := uint64(id) * WindowSize
	lo := base + uint64(i)*WindowSize/uint64(n)
	hi := base + uint64(i+1)*WindowSize/uint64(n) - 1
	return strconv.FormatUint(lo, 10) + "-" + strconv.FormatUint(hi, 10)
}
