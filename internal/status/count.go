package status

import (
	"math"
	"math/big"
	"strconv"

	"github.com/ironlb/ironlb/internal/allocator"
)

// Count is a number of addresses, exact however large (an IPv6 /64 holds 2^64). The zero value is 0.
// It marshals to JSON as an exact integer; String gives the short form tables show.
type Count struct{ n *big.Int }

// CountOf returns n as a Count.
func CountOf(n int64) Count { return Count{big.NewInt(n)} }

func (c Count) int() *big.Int {
	if c.n == nil {
		return new(big.Int)
	}
	return c.n
}

// Add returns c + d.
func (c Count) Add(d Count) Count { return Count{new(big.Int).Add(c.int(), d.int())} }

// Sub returns c - d, or 0 when d is larger.
func (c Count) Sub(d Count) Count {
	r := new(big.Int).Sub(c.int(), d.int())
	if r.Sign() < 0 {
		r.SetInt64(0)
	}
	return Count{r}
}

// Cmp compares c and d as big.Int.Cmp does.
func (c Count) Cmp(d Count) int { return c.int().Cmp(d.int()) }

// Exact returns the decimal digits of c.
func (c Count) Exact() string { return c.int().String() }

// exactBelow is where String stops printing every digit.
var exactBelow = big.NewInt(1_000_000_000_000)

// String prints c exactly below 10^12; above, as a power of two, "2^64" when it is one and "~2^63.6"
// when it is not (the nearest tenth of the exponent), which is how prefix sizes are thought of.
func (c Count) String() string {
	n := c.int()
	if n.Cmp(exactBelow) < 0 {
		return n.String()
	}
	if bits := n.BitLen(); n.TrailingZeroBits() == uint(bits-1) {
		return "2^" + strconv.Itoa(bits-1)
	}
	f, _ := new(big.Float).SetInt(n).Float64()
	e := math.Round(math.Log2(f)*10) / 10
	return "~2^" + strconv.FormatFloat(e, 'f', -1, 64)
}

// MarshalJSON writes c as a JSON integer with every digit (JSON numbers have no size limit; readers
// that parse them as float64 round counts above 2^53).
func (c Count) MarshalJSON() ([]byte, error) { return []byte(c.Exact()), nil }

// UnmarshalJSON reads a JSON integer.
func (c *Count) UnmarshalJSON(b []byte) error {
	n, ok := new(big.Int).SetString(string(b), 10)
	if !ok {
		return &strconv.NumError{Func: "Count.UnmarshalJSON", Num: string(b), Err: strconv.ErrSyntax}
	}
	c.n = n
	return nil
}

// rangeSize counts the addresses of a range, without the IPv4 addresses ending in .0 or .255 when the
// pool avoids them.
func rangeSize(r allocator.Range, avoidBuggy bool) Count {
	first, last := new(big.Int).SetBytes(r.First.AsSlice()), new(big.Int).SetBytes(r.Last.AsSlice())
	n := new(big.Int).Sub(last, first)
	n.Add(n, big.NewInt(1))
	if avoidBuggy && r.First.Is4() {
		a, b := first.Int64(), last.Int64()
		// upTo(x, m) counts the y in [0, x] with y%256 == m.
		upTo := func(x, m int64) int64 {
			if x < m {
				return 0
			}
			return (x-m)/256 + 1
		}
		for _, m := range []int64{0, 255} {
			n.Sub(n, big.NewInt(upTo(b, m)-upTo(a-1, m)))
		}
	}
	return Count{n}
}
