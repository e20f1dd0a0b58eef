package proxybench

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/testbed/bench/benchplot"
)

func TestSyncPlot(t *testing.T) {
	s := time.Second
	r := Result{Sync: map[string][]SyncTrial{
		KubeProxy: {{Services: 1000, Sync: s, OwnFull: s / 2}, {Services: 10000, Sync: 30 * s, OwnFull: 28 * s}, {Services: 10000, Sync: 35 * s, OwnFull: -1}},
		IronLB:    {{Services: 1000, Sync: s / 3, OwnFull: s / 10}, {Services: 10000, Sync: 2 * s, OwnFull: s}},
	}}
	got := SyncPlot(Saved{Where: "in the lab", Result: r})
	want := benchplot.Scaling{
		Title:  "Full sync against the number of Services, in the lab",
		XLabel: "Services (2 endpoints each; log scale)",
		YLabel: "time (log scale)",
		Curves: []benchplot.Curve{
			{Name: "kube-proxy nftables: start -> rules in the kernel", Style: benchplot.Style{Color: 1},
				Points: []benchplot.Point{{N: 1000, Values: []time.Duration{s}}, {N: 10000, Values: []time.Duration{30 * s, 35 * s}}}},
			{Name: "kube-proxy nftables: own full-sync metric", Style: benchplot.Style{Color: 1, Dashed: true},
				Points: []benchplot.Point{{N: 1000, Values: []time.Duration{s / 2}}, {N: 10000, Values: []time.Duration{28 * s, -1}}}},
			{Name: "ironlb proxy: start -> rules in the kernel", Style: benchplot.Style{Color: 0},
				Points: []benchplot.Point{{N: 1000, Values: []time.Duration{s / 3}}, {N: 10000, Values: []time.Duration{2 * s}}}},
			{Name: "ironlb proxy: own full-sync metric", Style: benchplot.Style{Color: 0, Dashed: true},
				Points: []benchplot.Point{{N: 1000, Values: []time.Duration{s / 10}}, {N: 10000, Values: []time.Duration{s}}}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SyncPlot (-want +got):\n%s", diff)
	}

	dir := t.TempDir()
	files, err := SavePlots(dir, Saved{Name: "proxy-scale", Where: "without the lab", Result: r})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(dir, "proxy-scale.json"), filepath.Join(dir, "proxy-scale.svg")}, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	first, _ := os.ReadFile(files[1])
	again := t.TempDir()
	svgs, err := RenderFile(again, files[0])
	if err != nil || len(svgs) != 1 {
		t.Fatalf("drawn again: %v, %v", svgs, err)
	}
	second, _ := os.ReadFile(svgs[0])
	if len(first) == 0 || !bytes.Equal(first, second) {
		t.Errorf("drawn again from the saved file: %d bytes against %d", len(second), len(first))
	}
	if !bytes.Contains(first, []byte("ironlb proxy: start -&gt; rules in the kernel")) {
		t.Error("no ironlb curve in the picture")
	}
	if err := os.WriteFile(filepath.Join(dir, "other.json"), []byte(`{"kind":"failover"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RenderFile(dir, filepath.Join(dir, "other.json")); err == nil {
		t.Error("a failover file drawn as a proxy sync")
	}
}

func TestChangePlot(t *testing.T) {
	ms := time.Millisecond
	r := Result{ChangeAt: 10000, Changes: map[string][]ChangeTrial{
		KubeProxy: {{Ruleset: 300 * ms, Own: 280 * ms}, {Ruleset: 350 * ms, Own: -1}},
		IronLB:    {{Ruleset: 6 * ms, Own: 3 * ms}, {Ruleset: 8 * ms, Own: 4 * ms}},
	}}
	d, ok := ChangePlot(Saved{Where: "without the lab", Result: r})
	if !ok || d.Title != "One endpoint change at 10,000 Services, without the lab" || len(d.Series) != 4 {
		t.Fatalf("ChangePlot = %+v, %v", d, ok)
	}
	want := benchplot.Series{Name: "ironlb proxy: update -> rules in the kernel", Style: benchplot.Style{Color: 0}, Values: []time.Duration{6 * ms, 8 * ms}}
	if diff := cmp.Diff(want, d.Series[2]); diff != "" {
		t.Errorf("ironlb's series (-want +got):\n%s", diff)
	}
	if _, ok := ChangePlot(Saved{}); ok {
		t.Error("a run without changes drawn")
	}
	// A run with changes only (bench-proxy --skip-sync) draws the changes alone.
	dir := t.TempDir()
	files, err := SavePlots(dir, Saved{Name: "proxy-lab", Where: "in the lab", Result: r})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(dir, "proxy-lab.json"), filepath.Join(dir, "proxy-lab-change.svg")}, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if _, err := SavePlots(dir, Saved{Name: "empty"}); err == nil {
		t.Error("nothing drawn and no error")
	}
}
