package failover

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	oldMAC = "02:42:ac:12:00:05"
	newMAC = "02:42:ac:12:00:02"
)

var nodes = map[string]string{oldMAC: "myk8s-worker3", newMAC: "myk8s-worker"}

// record makes a trial whose new node answers outage after the cut (never when outage < 0): the
// client asks and requests every 20 ms from 1 s before the cut to 2 s after it; requests fail
// (250 ms timeout) until the takeover.
func record(outage time.Duration) Record {
	cut := time.Unix(1000, 0)
	back, end := cut.Add(2*time.Second), cut.Add(2*time.Second)
	var ev []Event
	taken := func(at time.Time) bool { return outage >= 0 && !at.Before(cut.Add(outage)) }
	if outage >= 0 {
		ev = append(ev, Event{At: cut.Add(outage), Kind: "garp", MAC: newMAC})
	}
	for at := cut.Add(-time.Second); at.Before(end); at = at.Add(20 * time.Millisecond) {
		switch {
		case at.Before(cut):
			ev = append(ev, Event{At: at.Add(time.Millisecond), Kind: "reply", MAC: oldMAC})
			ev = append(ev, Event{At: at, End: at.Add(2 * time.Millisecond), Kind: "http", OK: true, Detail: "webpod1"})
		case taken(at):
			ev = append(ev, Event{At: at.Add(time.Millisecond), Kind: "reply", MAC: newMAC})
			ev = append(ev, Event{At: at, End: at.Add(2 * time.Millisecond), Kind: "http", OK: true, Detail: "webpod2"})
		default:
			ev = append(ev, Event{At: at, End: at.Add(250 * time.Millisecond), Kind: "http", Detail: "timeout"})
		}
	}
	return Record{Trial: Analyze(ev, cut, back, end, oldMAC), Cut: cut, Back: back, End: end, CutMAC: oldMAC, Events: ev}
}

func TestMedianTrial(t *testing.T) {
	recs := []Record{record(30 * time.Millisecond), record(50 * time.Millisecond), record(40 * time.Millisecond), record(-1)}
	if got := MedianTrial(recs); got != 2 {
		t.Errorf("MedianTrial = %d, want 2 (40 ms of 30, 40, 50 and never)", got)
	}
	if got := MedianTrial(nil); got != -1 {
		t.Errorf("MedianTrial(nil) = %d, want -1", got)
	}
}

func TestTimeline(t *testing.T) {
	r := Results{Speaker: "ironlb", Nodes: map[string]string{oldMAC: "myk8s-worker3"}, Records: []Record{record(35 * time.Millisecond)}}
	tl, err := Timeline(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := r.Records[0]
	if rec.ARP != 35*time.Millisecond || rec.HTTPGap != 60*time.Millisecond {
		t.Fatalf("fixture: ARP %s, HTTP gap %s", rec.ARP, rec.HTTPGap)
	}
	if tl.From != -200*time.Millisecond || tl.To != 400*time.Millisecond {
		t.Errorf("window %s..%s, want -200ms..400ms (the HTTP gap + 300 ms, at least 400 ms)", tl.From, tl.To)
	}
	slow := Results{Records: []Record{record(150 * time.Millisecond)}}
	if tl, _ := Timeline(slow, 0); tl.To != slow.Records[0].HTTPGap+300*time.Millisecond || tl.To <= 400*time.Millisecond {
		t.Errorf("150 ms outage: window to %s, want the HTTP gap %s + 300 ms", tl.To, slow.Records[0].HTTPGap)
	}
	if diff := cmp.Diff([]string{"myk8s-worker3"}, tl.Senders); diff != "" {
		t.Errorf("senders (-want +got):\n%s", diff)
	}
	// A MAC that is no node's is shown as it is.
	senders := map[string]bool{}
	for _, a := range tl.ARP {
		senders[a.Sender] = true
	}
	if diff := cmp.Diff(map[string]bool{"myk8s-worker3": true, newMAC: true}, senders); diff != "" {
		t.Errorf("ARP senders (-want +got):\n%s", diff)
	}
	if len(tl.HTTP) != 150 || tl.HTTP[50].Start != 0 || tl.HTTP[50].OK || tl.HTTP[50].End != 250*time.Millisecond {
		t.Errorf("requests: %d, the first after the cut %+v", len(tl.HTTP), tl.HTTP[50])
	}
	if len(tl.Marks) != 2 || tl.Marks[1].At != 2*time.Second {
		t.Errorf("marks %+v", tl.Marks)
	}
	if !strings.Contains(tl.Title, "trial 1 of 1") || !strings.Contains(tl.Title, "myk8s-worker3") {
		t.Errorf("title %q", tl.Title)
	}
	if _, err := Timeline(r, 1); err == nil {
		t.Error("trial 2 of 1 drawn")
	}
	// The new node never answered: the window runs to the return.
	never := Results{Records: []Record{record(-1)}}
	if tl, _ := Timeline(never, 0); tl.To != 2*time.Second {
		t.Errorf("never answered: window to %s, want 2s", tl.To)
	}
}

func TestSavePlots(t *testing.T) {
	dir := t.TempDir()
	il := Results{Label: "ironlb", Speaker: "ironlb", Nodes: nodes,
		Records: []Record{record(30 * time.Millisecond), record(28 * time.Millisecond), record(35 * time.Millisecond)}}
	ml := Results{Label: "MetalLB v0.16.1 speaker, memberlist tuned", Speaker: "metallb", Memberlist: "tuned", Nodes: nodes,
		Records: []Record{record(131 * time.Millisecond), record(-1), record(197 * time.Millisecond)}}
	if _, err := SavePlots(dir, il); err != nil {
		t.Fatal(err)
	}
	files, err := SavePlots(dir, ml)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"failover-metallb-tuned.json", "failover-outage.svg", "failover-timeline-ironlb.svg", "failover-timeline-metallb-tuned.svg"}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files written (-want +got):\n%s", diff)
	}
	back, err := LoadResults(filepath.Join(dir, "failover-metallb-tuned.json"))
	if err != nil {
		t.Fatal(err)
	}
	ml.Kind = ResultsKind
	if diff := cmp.Diff(ml, back); diff != "" {
		t.Errorf("saved and loaded (-want +got):\n%s", diff)
	}
	outage, err := os.ReadFile(filepath.Join(dir, "failover-outage.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ironlb: cut -&gt; first ARP from the new node (3)", "MetalLB tuned: cut -&gt; first ARP from the new node (2; 1 never)"} {
		if !bytes.Contains(outage, []byte(s)) {
			t.Errorf("no %q in failover-outage.svg", s)
		}
	}
	// Drawn again from the files: the same bytes; --trial picks another trial.
	again := t.TempDir()
	if _, err := RenderFiles(again, []string{filepath.Join(dir, "failover-metallb-tuned.json"), filepath.Join(dir, "failover-ironlb.json")}, 0); err != nil {
		t.Fatal(err)
	}
	for _, f := range want[1:] {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, _ := os.ReadFile(filepath.Join(again, f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: drawn again, %d bytes against %d", f, len(b), len(a))
		}
	}
	if _, err := RenderFiles(again, []string{filepath.Join(dir, "failover-ironlb.json")}, 3); err != nil {
		t.Fatal(err)
	}
	tl, _ := os.ReadFile(filepath.Join(again, "failover-timeline-ironlb.svg"))
	if !bytes.Contains(tl, []byte("trial 3 of 3")) {
		t.Error("--trial 3 not drawn")
	}
	if _, err := RenderFiles(again, []string{filepath.Join(dir, "failover-ironlb.json")}, 4); err == nil {
		t.Error("trial 4 of 3 drawn")
	}
}
