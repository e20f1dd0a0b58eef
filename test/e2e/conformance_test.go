package e2e

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// conformanceFocus is the [Conformance] tests of the upstream [sig-network] Services and Networking
// (Granular Checks: Pods) that `make test` runs on the ironlb-proxy lab (19 in v1.37.2); the whole
// scope, on both proxies side by side, is `make conformance` (docs/conformance.md).
const conformanceFocus = `\[sig-network\] (Services |Networking ).*\[Conformance\]`

var closingRE = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed$`)

// conformanceSuite runs Kubernetes' own e2e tests for the selection above against the lab that is up
// (`ironlb lab conformance`, e2e.test from the lab's client namespace) and fails on any failure, on a
// test that did not run, or on a selection that ran nothing. It needs e2e.test and agnhost
// (hack/e2e-binaries.sh, a prerequisite of `make test`).
func conformanceSuite(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, ironlb, "lab", "conformance", "--focus", conformanceFocus,
		"--timeout", "20m", "--report-dir", dir)
	out, err := cmd.CombinedOutput()
	t.Logf("lab conformance --focus %q: %s\n%s", conformanceFocus, time.Since(t0).Round(time.Second), out)
	if err != nil {
		if log, rerr := os.ReadFile(dir + "/e2e-ironlb.log"); rerr == nil {
			t.Logf("the suite's output (last 8000 bytes):\n%s", tail(string(log), 8000))
		}
		t.Fatalf("lab conformance: %v", err)
	}
	m := closingRE.FindStringSubmatch(string(out))
	if m == nil || m[1] == "0" || m[2] != "0" || strings.Contains(string(out), "did not run") {
		t.Fatalf("lab conformance: want every selected test passed; closing line %q", m)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
