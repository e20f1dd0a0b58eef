package nftrules

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func backends(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.244.%d.%d:8080", i/200, i%200+1)
	}
	return out
}

// TestMaglevEqualShare: every backend owns size/n buckets, give or take one.
func TestMaglevEqualShare(t *testing.T) {
	for _, size := range []int{13, 251, 65521} {
		for _, n := range []int{1, 2, 3, 7, 10, 25, 62} {
			if n > size {
				continue
			}
			table := MaglevTable(backends(n), size)
			count := make([]int, n)
			for _, b := range table {
				count[b]++
			}
			lo, hi := slices.Min(count), slices.Max(count)
			if hi-lo > 1 {
				t.Errorf("size %d, %d backends: shares from %d to %d buckets", size, n, lo, hi)
			}
		}
	}
}

// TestMaglevOrderIndependent: every node computes the same table whatever order its endpoints
// arrive in.
func TestMaglevOrderIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	names := backends(9)
	want := owners(names, MaglevTable(names, 251))
	for range 20 {
		shuffled := slices.Clone(names)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := owners(shuffled, MaglevTable(shuffled, 251)); !slices.Equal(got, want) {
			t.Fatalf("table depends on backend order")
		}
	}
}

func owners(names []string, table []int) []string {
	out := make([]string, len(table))
	for i, b := range table {
		out[i] = names[b]
	}
	return out
}

// TestMaglevMinimalDisruption: removing one of n backends moves its own buckets and few others,
// at most 1/n + epsilon of all buckets with epsilon = 0.5*sqrt(n/size) (0.055 for 3 of 251),
// over many backend sets. (Adding one back is the same change reversed.)
func TestMaglevMinimalDisruption(t *testing.T) {
	sizes := []int{13, 251, 1021}
	if !testing.Short() {
		sizes = append(sizes, 65521)
	}
	for _, size := range sizes {
		for _, n := range []int{2, 3, 5, 10, 20, 40} {
			if n*maglevMinPerBackend > size {
				continue
			}
			epsilon := 0.5 * math.Sqrt(float64(n)/float64(size))
			sets := 20
			if size > 10000 {
				sets = 2
			}
			worst := 0.0
			for set := range sets {
				names := make([]string, n)
				for i := range names {
					names[i] = fmt.Sprintf("10.%d.%d.%d:%d", set, i/200, i%200+1, 8080+set)
				}
				before := owners(names, MaglevTable(names, size))
				for gone := range n {
					rest := slices.Delete(slices.Clone(names), gone, gone+1)
					after := owners(rest, MaglevTable(rest, size))
					moved := 0
					for i := range before {
						if before[i] != after[i] {
							moved++
						}
					}
					worst = max(worst, float64(moved)/float64(size))
				}
			}
			if limit := 1/float64(n) + epsilon; worst > limit {
				t.Errorf("size %d, %d backends: removing one moved %.3f of buckets, want <= %.3f", size, n, worst, limit)
			}
			t.Logf("size %d, %d backends: worst removal moved %.3f of buckets (1/n = %.3f, epsilon %.3f)", size, n, worst, 1/float64(n), epsilon)
		}
	}
}

// TestPermutation: every permutation is a bijection of [0, m).
func TestPermutation(t *testing.T) {
	for _, m := range []uint64{2, 13, 251, 1021} {
		for key := range uint64(5) {
			p := newPermutation(key*0x9e3779b97f4a7c15, m)
			seen := make([]bool, m)
			for k := range m {
				v := p.at(k)
				if v >= m || seen[v] {
					t.Fatalf("m %d key %d: %d -> %d repeats or escapes", m, key, k, v)
				}
				seen[v] = true
			}
		}
	}
}

func TestMaglevSize(t *testing.T) {
	for _, tc := range []struct{ want, n, got int }{
		{251, 2, 251}, {251, 62, 251}, {251, 63, 509}, {13, 3, 13}, {13, 4, 251}, {65521, 20000, 65521},
	} {
		if got := maglevSize(tc.want, tc.n); got != tc.got {
			t.Errorf("maglevSize(%d, %d) = %d, want %d", tc.want, tc.n, got, tc.got)
		}
	}
}
