package e2e

import (
	"strings"
	"testing"
)

// The suite's lab installed ironlb as a user would: `helm upgrade --install ironlb
// oci://REGISTRY/charts/ironlb` from the lab's registry, with the image from the registry's mirror of
// ghcr.io/ironlb/ironlb at the chart's appVersion.
func TestChartInstalled(t *testing.T) {
	list := run(t, ironlb, "lab", "helm", "list", "--namespace", "metallb-system", "--output", "json")
	if !strings.Contains(list, `"name":"ironlb"`) || !strings.Contains(list, `"status":"deployed"`) {
		t.Fatalf("helm list: want the release ironlb deployed:\n%s", list)
	}
	chart := run(t, ironlb, "lab", "helm", "show", "chart", "oci://172.18.255.253:5000/charts/ironlb", "--plain-http")
	var app string
	for _, l := range strings.Split(chart, "\n") {
		if v, ok := strings.CutPrefix(l, "appVersion: "); ok {
			app = strings.TrimSpace(v)
		}
	}
	if app == "" {
		t.Fatalf("helm show chart from the lab's registry: no appVersion:\n%s", chart)
	}
	want := "172.18.255.253:5000/ghcr.io/ironlb/ironlb:" + app
	images := kubectl(t, "-n", "metallb-system", "get", "pods", "-o", "jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image} {.status.phase}{\"\\n\"}{end}")
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(images), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || !strings.HasPrefix(f[0], "ironlb-") {
			continue
		}
		n++
		if f[1] != want || f[2] != "Running" {
			t.Errorf("pod %s: image %s, %s; want %s, Running", f[0], f[1], f[2], want)
		}
	}
	if n < 6 { // 2 controllers, a speaker on each of the 4 nodes
		t.Errorf("%d ironlb pods, want at least 6:\n%s", n, images)
	}
}

// A value the chart's values.schema.json refuses: helm's own error through lab up's, the same through
// `lab helm upgrade` on the running release, and nothing of it is installed or changed.
func TestChartValueRefused(t *testing.T) {
	before := run(t, ironlb, "lab", "helm", "history", "ironlb", "--namespace", "metallb-system", "--max", "1", "--output", "json")
	out, err := runErr(ironlb, "lab", "helm", "upgrade", "ironlb", "oci://172.18.255.253:5000/charts/ironlb", "--plain-http",
		"--namespace", "metallb-system", "--reuse-values", "--set", "controller.replicas=two")
	if err == nil || !strings.Contains(out, "values don't meet the specifications of the schema") || !strings.Contains(out, "/controller/replicas") {
		t.Fatalf("helm upgrade --set controller.replicas=two: err %v, want helm's schema error naming /controller/replicas:\n%s", err, out)
	}
	if after := run(t, ironlb, "lab", "helm", "history", "ironlb", "--namespace", "metallb-system", "--max", "1", "--output", "json"); after != before {
		t.Errorf("the release changed after a refused upgrade:\n%s\n->\n%s", before, after)
	}
	// A release that never existed: nothing is created, not even its namespace.
	out, err = runErr(ironlb, "lab", "helm", "install", "ironlb-bad", "oci://172.18.255.253:5000/charts/ironlb", "--plain-http",
		"--namespace", "bad-system", "--create-namespace", "--set", "speaker.logLevel=loud")
	if err == nil || !strings.Contains(out, "values don't meet the specifications of the schema") {
		t.Fatalf("helm install --set speaker.logLevel=loud: err %v, want helm's schema error:\n%s", err, out)
	}
	if list := run(t, ironlb, "lab", "helm", "list", "--all-namespaces", "--all", "--short"); strings.Contains(list, "ironlb-bad") {
		t.Errorf("helm list after a refused install: %s", list)
	}
	if ns, _ := runErr(ironlb, "lab", "kubectl", "get", "namespace", "bad-system"); !strings.Contains(ns, "NotFound") {
		t.Errorf("namespace bad-system after a refused install: %s", ns)
	}
}
