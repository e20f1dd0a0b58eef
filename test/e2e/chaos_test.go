package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// The probes' logs and, on a failure, the lab's logs are kept outside the lab (which the test takes
	// down) so that a failed run can be read afterwards.
	keep := fmt.Sprintf("/tmp/ironlb-chaos-%s", time.Now().UTC().Format("20060102-150405"))
	raw := filepath.Join(keep, "probes")
	b, err := exec.CommandContext(ctx, ironlb, "lab", "chaos", "--duration", "2m", "--every", "10s", "--seed", "9", "--raw-dir", raw).CombinedOutput()
	out := string(b)
	t.Logf("ironlb lab chaos:\n%s", out)
	failed := err != nil || !strings.Contains(out, "**violations, total** | **0**")
	if err != nil {
		t.Errorf("chaos run: %v", err)
	}
	if !strings.Contains(out, "**violations, total** | **0**") {
		t.Errorf("chaos run: want 0 violations in its table")
	}
	if !failed {
		_ = os.RemoveAll(keep)
		return
	}
	if cp, err := exec.Command("cp", "-a", filepath.Join(stateDir, "logs"), filepath.Join(keep, "lab-logs")).CombinedOutput(); err != nil {
		t.Logf("keeping the lab's logs: %v: %s", err, cp)
	}
	t.Logf("chaos run's probe logs and the lab's logs kept in %s", keep)
}
