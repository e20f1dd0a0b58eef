package cli

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/bench/proxybench"
)

func TestBenchPlot(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	cut := time.Unix(1000, 0)
	ms := func(n int) time.Time { return cut.Add(time.Duration(n) * time.Millisecond) }
	rec := failover.Record{Trial: failover.Trial{ARP: 30 * time.Millisecond, HTTPGap: 40 * time.Millisecond}, Cut: cut, Back: ms(2000), End: ms(3000), CutMAC: "a",
		Events: []failover.Event{{At: ms(-20), Kind: "reply", MAC: "a"}, {At: ms(-20), End: ms(-18), Kind: "http", OK: true},
			{At: ms(0), End: ms(250), Kind: "http"}, {At: ms(30), Kind: "garp", MAC: "b"}, {At: ms(40), End: ms(42), Kind: "http", OK: true}}}
	if _, err := failover.SavePlots(in, failover.Results{Speaker: "ironlb", Nodes: map[string]string{"a": "w3", "b": "w1"}, Records: []failover.Record{rec}}); err != nil {
		t.Fatal(err)
	}
	r := proxybench.Result{Sync: map[string][]proxybench.SyncTrial{proxybench.IronLB: {{Services: 1000, Sync: time.Second, OwnFull: -1}}}}
	if _, err := proxybench.SavePlots(in, proxybench.Saved{Name: "proxy-lab", Where: "in the lab", Result: r}); err != nil {
		t.Fatal(err)
	}
	cmd := benchPlotCmd()
	cmd.SetArgs([]string{"--out", out, filepath.Join(in, "failover-ironlb.json"), filepath.Join(in, "proxy-lab.json")})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"failover-outage.svg", "failover-timeline-ironlb.svg", "proxy-lab.svg"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	bad := filepath.Join(in, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"kind":"chaos"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = benchPlotCmd()
	cmd.SetArgs([]string{"--out", out, bad})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err == nil {
		t.Error("results of an unknown kind drawn")
	}
}
