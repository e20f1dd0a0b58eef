package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Issue 9's chaos soak, the CI-sized run: 2 minutes of Service churn with a fault every ~10 s (a
// controller replica or a speaker SIGKILLed, a worker's power cut, a partition, 5% loss on a link, a
// kube-apiserver restart), in the ironlb-proxy lab. `ironlb lab chaos` exits non-zero when an
// invariant broke; its table is logged either way. The seed is fixed so that a failure can be replayed
// with the same choices (`ironlb lab chaos --seed 9 --duration 2m --every 10s`).
func chaosSuite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, ironlb, "lab", "chaos", "--duration", "2m", "--every", "10s", "--seed", "9").CombinedOutput()
	out := string(b)
	t.Logf("ironlb lab chaos:\n%s", out)
	if err != nil {
		t.Errorf("chaos run: %v", err)
	}
	if !strings.Contains(out, "**violations, total** | **0**") {
		t.Errorf("chaos run: want 0 violations in its table")
	}
}
