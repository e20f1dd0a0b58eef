package nftrules

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// DefaultMaglevTableSize is the number of buckets in a Maglev lookup table unless
// Config.MaglevTableSize says otherwise. It is prime, and large enough that up to ~25 endpoints
// get shares within a few percent of each other.
const DefaultMaglevTableSize = 251

// maglevSizes are the primes a table grows to when a Service has more endpoints than
// Config.MaglevTableSize allows for (at least maglevMinPerBackend buckets per endpoint).
var maglevSizes = []int{251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521}

const maglevMinPerBackend = 4

// MaglevTable fills a Maglev lookup table of size buckets (a prime) for backends, as in
// "Maglev: A Fast and Reliable Software Network Load Balancer" (NSDI 2016, section 3.4): each
// backend walks its own pseudo-random permutation of the buckets, keyed by a hash of its name,
// and the backends take turns claiming their next free bucket. Entry i of the result is the index
// in backends of bucket i's owner.
//
// Every backend owns size/len(backends) buckets, give or take one. The result depends only on
// the set of names, not their order, so every node computes the same table. Removing one of n
// backends reassigns its buckets and, measured, at most about 0.5*sqrt(n/size) of the others
// (maglev_test.go). It returns nil for no backends and panics if size is not a prime (a
// programming error).
//
// The paper derives each permutation from an offset and a skip (offset + j*skip mod size). In
// tables this small those arithmetic progressions correlate: with 251 buckets, two of three
// backends whose skips are related moved 70% of the buckets when the third went. A keyed Feistel
// permutation does not have that structure.
func MaglevTable(backends []string, size int) []int {
	if !isPrime(size) {
		panic(fmt.Sprintf("maglev table size %d is not prime", size))
	}
	n := len(backends)
	if n == 0 {
		return nil
	}
	// Walk in name order so the result is independent of the caller's order.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(backends[a], backends[b]) })
	perms := make([]permutation, n)
	for j, i := range order {
		h := sha256.Sum256([]byte(backends[i]))
		perms[j] = newPermutation(binary.BigEndian.Uint64(h[:8]), uint64(size))
	}
	next := make([]uint64, n)
	table := make([]int, size)
	for i := range table {
		table[i] = -1
	}
	filled := 0
	for {
		for j := range n {
			c := perms[j].at(next[j])
			for table[c] >= 0 {
				next[j]++
				c = perms[j].at(next[j])
			}
			table[c] = order[j]
			next[j]++
			filled++
			if filled == size {
				return table
			}
		}
	}
}

// permutation is a keyed pseudo-random permutation of [0, m): a 4-round Feistel network over the
// smallest even number of bits that covers m, cycle-walking values that fall outside.
type permutation struct {
	key  uint64
	half uint // bits per Feistel half
	m    uint64
}

func newPermutation(key, m uint64) permutation {
	half := uint(1)
	for uint64(1)<<(2*half) < m {
		half++
	}
	return permutation{key: key, half: half, m: m}
}

func (p permutation) at(k uint64) uint64 {
	x := p.encrypt(k)
	for x >= p.m {
		x = p.encrypt(x)
	}
	return x
}

func (p permutation) encrypt(x uint64) uint64 {
	mask := uint64(1)<<p.half - 1
	l, r := x>>p.half, x&mask
	for round := range uint64(4) {
		l, r = r, l^(splitmix(p.key^round<<56^r)&mask)
	}
	return l<<p.half | r
}

// splitmix is SplitMix64's finaliser, a fast 64-bit mixing function.
func splitmix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// maglevSize returns the table size for n backends: want (a prime) unless that leaves fewer than
// maglevMinPerBackend buckets per backend, then the next larger prime from maglevSizes.
func maglevSize(want, n int) int {
	if n*maglevMinPerBackend <= want {
		return want
	}
	for _, s := range maglevSizes {
		if s > want && n*maglevMinPerBackend <= s {
			return s
		}
	}
	return maglevSizes[len(maglevSizes)-1]
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
