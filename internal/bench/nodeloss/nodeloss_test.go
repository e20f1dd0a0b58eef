package nodeloss

import (
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/bench/failover"
)

func TestAnalyze(t *testing.T) {
	cut := time.Unix(100, 0)
	req := func(ms int, ok bool) failover.Event {
		return failover.Event{At: cut.Add(time.Duration(ms) * time.Millisecond), Kind: "http", OK: ok}
	}
	got := Analyze([]failover.Event{req(-10, false), req(5, true), req(12, false), req(40, false), req(60, true), {Kind: "reply", At: cut.Add(time.Second)}}, cut)
	if got.Sent != 4 || got.Failed != 2 || got.Window != 40*time.Millisecond {
		t.Errorf("Analyze = %+v, want 2 of 4 failed, window 40ms", got)
	}
	if got := Analyze([]failover.Event{req(5, true)}, cut); got.Window != 0 || got.Failed != 0 {
		t.Errorf("no failure: %+v", got)
	}
}
