package e2e

import "testing"

// binomialLimit against values computed by hand: Binomial(40, 0.063) exceeds 7 with probability
// 0.0031 and 6 with 0.0117; Binomial(10, 0.5) exceeds 8 with 0.0107 and 9 with 0.001.
func TestBinomialLimit(t *testing.T) {
	for _, tc := range []struct {
		n        int
		p, alpha float64
		want     int
	}{{40, 0.063, 0.005, 7}, {40, 0.063, 0.02, 6}, {10, 0.5, 0.005, 9}, {10, 0.5, 0.02, 8}, {5, 0, 0.01, 0}} {
		if got := binomialLimit(tc.n, tc.p, tc.alpha); got != tc.want {
			t.Errorf("binomialLimit(%d, %v, %v) = %d, want %d", tc.n, tc.p, tc.alpha, got, tc.want)
		}
	}
}
