package e2e

import (
	"os"
	"strings"
	"testing"
)

// After the lifecycle tests (no lab is up): `lab up` with a chart value that values.schema.json refuses
// fails with helm's error and leaves no release and no ironlb object; and with the lab's registry cut
// off, pushing the chart says so in one line.
func TestUpWithRefusedChartValue(t *testing.T) {
	run(t, ironlb, "lab", "down")
	t.Cleanup(func() {
		run(t, ironlb, "lab", "down")
		if left := leftovers(); len(left) > 0 {
			t.Errorf("after lab down: %s", strings.Join(left, "\n"))
		}
	})
	out, err := labUpErr("--keep-on-failure", "--chart-set", "controller.replicas=two")
	if err == nil {
		t.Fatalf("lab up --chart-set controller.replicas=two succeeded:\n%s", out)
	}
	if !strings.Contains(out, "values don't meet the specifications of the schema") || !strings.Contains(out, "/controller/replicas") {
		t.Errorf("lab up: want helm's schema error naming /controller/replicas:\n%s", out)
	}
	if list := run(t, ironlb, "lab", "helm", "list", "--all-namespaces", "--all", "--short"); strings.TrimSpace(list) != "" {
		t.Errorf("helm releases after the refused install: %q", list)
	}
	if objs, _ := runErr(ironlb, "lab", "kubectl", "get", "deploy,ds,crd", "-A", "-o", "name"); strings.Contains(objs, "ironlb") || strings.Contains(objs, "metallb.io") {
		t.Errorf("ironlb objects after the refused install:\n%s", objs)
	}

	// The registry cut off from the bridge: one line saying the registry does not answer.
	run(t, ironlb, "lab", "link", "myk8s-registry", "down")
	out, err = runErr(ironlb, "lab", "push", "--chart", os.Getenv("IRONLB_CHART"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err == nil || len(lines) != 1 || !strings.Contains(out, "registry at http://172.18.255.253:5000 does not answer") {
		t.Errorf("lab push --chart with the registry cut off: err %v, want one line saying the registry does not answer:\n%s", err, out)
	}
	run(t, ironlb, "lab", "link", "myk8s-registry", "up")
	if out, err := runErr(ironlb, "lab", "push", "--chart", os.Getenv("IRONLB_CHART")); err != nil || !strings.Contains(out, "pushed 172.18.255.253:5000/charts/ironlb:") {
		t.Errorf("lab push --chart with the registry back: err %v:\n%s", err, out)
	}
}
