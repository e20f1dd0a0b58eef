package chaos

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Every window of len(kinds) draws aligned on a round holds every kind exactly once; the order
// changes between rounds and seeds.
func TestRounds(t *testing.T) {
	for seed := range uint64(20) {
		r := NewRounds(AllFaults, rand.New(rand.NewPCG(seed, seed)))
		var rounds [][]string
		for range 5 {
			var round []string
			for range AllFaults {
				round = append(round, r.Next())
			}
			got := slices.Sorted(slices.Values(round))
			if want := slices.Sorted(slices.Values(AllFaults)); !slices.Equal(got, want) {
				t.Fatalf("seed %d: a round drew %v, want every kind once", seed, round)
			}
			rounds = append(rounds, round)
		}
		same := true
		for _, rd := range rounds[1:] {
			same = same && slices.Equal(rd, rounds[0])
		}
		if same {
			t.Errorf("seed %d: five rounds in the same order", seed)
		}
	}
	if k := NewRounds(nil, rand.New(rand.NewPCG(1, 1))).Next(); k != "" {
		t.Errorf("no kinds: Next() = %q, want \"\"", k)
	}
	one := NewRounds([]string{FaultLoss}, rand.New(rand.NewPCG(1, 1)))
	for range 3 {
		if k := one.Next(); k != FaultLoss {
			t.Fatalf("one kind: Next() = %q", k)
		}
	}
}

func TestNextFitting(t *testing.T) {
	r := NewRounds([]string{FaultStopNode, FaultKillSpeaker, FaultLoss}, rand.New(rand.NewPCG(3, 3)))
	short := func(k string) bool { return FaultTime(k) < 5*time.Second }
	if k := r.NextFitting(short); k != FaultKillSpeaker {
		t.Fatalf("NextFitting(short) = %q, want the only short kind", k)
	}
	if k := r.NextFitting(short); k != "" {
		t.Fatalf("NextFitting(short) again = %q, want none", k)
	}
	rest := []string{r.Next(), r.Next()}
	if got := slices.Sorted(slices.Values(rest)); !slices.Equal(got, []string{FaultLoss, FaultStopNode}) {
		t.Errorf("the round's rest %v, want loss and stop-node", rest)
	}
}

func TestRetry(t *testing.T) {
	r := NewRounds([]string{FaultStopNode, FaultKillSpeaker}, rand.New(rand.NewPCG(5, 5)))
	first := r.Next()
	r.Retry(first)
	second := r.Next()
	if second == first {
		t.Fatalf("retried %s came before the round's other kind", first)
	}
	if again := r.Next(); again != first {
		t.Errorf("after the round's other kind: %q, want the retried %q", again, first)
	}
}

func TestFaultTimes(t *testing.T) {
	for _, k := range AllFaults {
		if _, ok := faultTime[k]; !ok {
			t.Errorf("no faultTime for %s", k)
		}
	}
	// CI's soak (test/e2e/chaos_test.go) must fit every kind: 3 minutes with faults every 2 s.
	if d := MinDuration(AllFaults, 2*time.Second); d > 3*time.Minute-20*time.Second {
		t.Errorf("every kind once takes %s with faults every 2 s: CI's 3-minute soak would miss some", d)
	}
}
