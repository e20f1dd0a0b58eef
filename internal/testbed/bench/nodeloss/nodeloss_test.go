package nodeloss

import (
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
)

func TestAnalyze(t *testing.T) {
	cut := time.Unix(100, 0)
	req := func(ms int, ok bool) failover.Event {
		return failover.Event{At: cut.Add(time.Duration(ms) * time.Millisecond), Kind: "http", OK: ok}
	}
	got := Analyze([]failover.Event{req(-10, false), req(5, true), req(12, false), req(40, false), req(60, true), {Kind: "reply", At: cut.Add(time.Second)}}, cut)
	if got.Sent != 4 || got.Failed != 2 || got.Window != 40*time.Millisecond || got.Sustained != time.Second || got.FailedLate != 0 {
		t.Errorf("Analyze = %+v, want 2 of 4 failed, window 40ms, sustained 1s", got)
	}
	// Steady failures for 3 s, then one isolated timeout among many successes at 10 s.
	var reqs []failover.Event
	for ms := 0; ms < 12000; ms += 10 {
		reqs = append(reqs, req(ms, !(ms < 3000 && ms%30 == 0) && ms != 10000))
	}
	got = Analyze(reqs, cut)
	if got.Sustained != 3*time.Second || got.Window != 10*time.Second || got.FailedLate != 67 {
		t.Errorf("Analyze = %+v, want sustained 3s, last failure 10s, 67 failed after 1 s", got)
	}
	if got := Analyze([]failover.Event{req(5, true)}, cut); got.Window != 0 || got.Failed != 0 {
		t.Errorf("no failure: %+v", got)
	}
}
