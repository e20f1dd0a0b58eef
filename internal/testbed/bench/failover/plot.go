package failover

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/benchplot"
)

// Record is one trial: its figures and what they were computed from, the probe's events and the
// instants of the cut, the return and the end of probing.
type Record struct {
	Trial
	Cut, Back, End time.Time
	CutMAC         string
	Events         []Event
}

// Trials returns the figures of records.
func Trials(recs []Record) []Trial {
	out := make([]Trial, len(recs))
	for i, r := range recs {
		out[i] = r.Trial
	}
	return out
}

// ResultsKind marks a file of Results, for `ironlb bench plot`.
const ResultsKind = "failover"

// Results is a run as `bench-failover --plot` saves it and `ironlb bench plot` reads it back.
type Results struct {
	Kind       string            `json:"kind"` // ResultsKind
	Label      string            `json:"label"`
	Speaker    string            `json:"speaker"`
	Memberlist string            `json:"memberlist,omitempty"`
	Nodes      map[string]string `json:"nodes"` // MAC -> node name, to name the timeline's rows
	Records    []Record          `json:"records"`
}

// Name is the run's short name in file names: ironlb, metallb-tuned, metallb-default.
func (r Results) Name() string {
	if r.Speaker == "metallb" {
		return "metallb-" + cmp.Or(r.Memberlist, "default")
	}
	return cmp.Or(r.Speaker, "ironlb")
}

// ShortLabel is the run's name in pictures.
func (r Results) ShortLabel() string {
	if r.Speaker == "metallb" {
		return "MetalLB " + cmp.Or(r.Memberlist, "default")
	}
	return cmp.Or(r.Speaker, "ironlb")
}

// Outage is the distribution plot of runs side by side: for each, the time from the cut to the
// first ARP packet from the new node (solid), and the longest gap between successful HTTP requests
// across the cut (dashed).
func Outage(runs []Results) benchplot.Distribution {
	d := benchplot.Distribution{
		Title:  "Failover on a power cut: outage seen by the client, per trial",
		XLabel: "time (log scale)",
	}
	for i, r := range runs {
		var arp, gap []time.Duration
		for _, rec := range r.Records {
			arp = append(arp, rec.ARP)
			gap = append(gap, rec.HTTPGap)
		}
		d.Series = append(d.Series,
			benchplot.Series{Name: r.ShortLabel() + ": cut -> first ARP from the new node", Style: benchplot.Style{Color: i}, Values: arp},
			benchplot.Series{Name: r.ShortLabel() + ": longest gap between successful HTTP requests", Style: benchplot.Style{Color: i, Dashed: true}, Values: gap})
	}
	return d
}

// MedianTrial is the index of the trial whose cut -> ARP time is the median (nearest rank), the
// one a timeline shows by default; -1 without records.
func MedianTrial(recs []Record) int {
	if len(recs) == 0 {
		return -1
	}
	idx := make([]int, len(recs))
	for i := range idx {
		idx[i] = i
	}
	// Trials where the new node never answered count as the longest.
	key := func(i int) time.Duration {
		if recs[i].ARP < 0 {
			return time.Duration(1<<63 - 1)
		}
		return recs[i].ARP
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(key(a), key(b)) })
	return idx[(len(idx)+1)/2-1]
}

// Timeline is the timeline plot of trial i (0-based) of r: from 200 ms before the cut to 300 ms
// after the later of the ARP takeover and the end of the HTTP gap (at least 400 ms), or to the
// return when the new node never answered.
func Timeline(r Results, i int) (benchplot.Timeline, error) {
	if i < 0 || i >= len(r.Records) {
		return benchplot.Timeline{}, fmt.Errorf("trial %d: the run has %d trials", i+1, len(r.Records))
	}
	rec := r.Records[i]
	name := func(mac string) string {
		if n, ok := r.Nodes[mac]; ok {
			return n
		}
		return mac
	}
	back := rec.Back.Sub(rec.Cut)
	to := max(rec.ARP, rec.HTTPGap) + 300*time.Millisecond
	if rec.ARP < 0 {
		to = back
	}
	to = max(to, 400*time.Millisecond)
	t := benchplot.Timeline{
		Title:   fmt.Sprintf("%s: trial %d of %d, a power cut of %s seen from the client", r.ShortLabel(), i+1, len(r.Records), name(rec.CutMAC)),
		From:    -200 * time.Millisecond,
		To:      to,
		Senders: []string{name(rec.CutMAC)},
		Marks:   []benchplot.Mark{{At: 0, Label: "power cut"}, {At: back, Label: "power back"}},
	}
	for _, e := range rec.Events {
		at := e.At.Sub(rec.Cut)
		switch e.Kind {
		case "reply", "garp":
			t.ARP = append(t.ARP, benchplot.ARPPacket{At: at, Sender: name(e.MAC), Gratuitous: e.Kind == "garp"})
		case "http":
			t.HTTP = append(t.HTTP, benchplot.Request{Start: at, End: e.End.Sub(rec.Cut), OK: e.OK})
		}
	}
	return t, nil
}

// resultsFile is where SavePlots keeps r in dir.
func resultsFile(dir string, r Results) string {
	return filepath.Join(dir, "failover-"+r.Name()+".json")
}

// SavePlots writes r to dir as failover-NAME.json, then draws from it failover-timeline-NAME.svg
// (the median trial) and, from every failover-*.json in dir (so runs of both speakers into one
// dir stand side by side), failover-outage.svg. It returns the files written.
func SavePlots(dir string, r Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r.Kind = ResultsKind
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	f := resultsFile(dir, r)
	if err := os.WriteFile(f, b, 0o644); err != nil {
		return nil, err
	}
	written := []string{f}
	files, err := filepath.Glob(filepath.Join(dir, "failover-*.json"))
	if err != nil {
		return written, err
	}
	svgs, err := RenderFiles(dir, files, -1)
	return append(written, svgs...), err
}

// LoadResults reads a file of Results.
func LoadResults(file string) (Results, error) {
	var r Results
	b, err := os.ReadFile(file)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", file, err)
	}
	if r.Kind != ResultsKind {
		return r, fmt.Errorf("%s: kind %q, want %q", file, r.Kind, ResultsKind)
	}
	return r, nil
}

// RenderFiles draws the runs saved in files into dir: failover-outage.svg of them all (in the order
// ironlb, MetalLB tuned, MetalLB default, then by name) and failover-timeline-NAME.svg of each,
// showing trial (1-based; the median trial when trial < 1). It returns the files written.
func RenderFiles(dir string, files []string, trial int) ([]string, error) {
	var runs []Results
	from := map[string]string{} // run name -> its file, for errors
	for _, f := range files {
		r, err := LoadResults(f)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
		from[r.Name()] = f
	}
	order := map[string]int{"ironlb": 0, "metallb-tuned": 1, "metallb-default": 2}
	rank := func(r Results) int {
		if o, ok := order[r.Name()]; ok {
			return o
		}
		return len(order)
	}
	slices.SortStableFunc(runs, func(a, b Results) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Name(), b.Name()))
	})
	var written []string
	var errs []error
	write := func(name string, svg func() ([]byte, error)) {
		b, err := svg()
		if err == nil {
			f := filepath.Join(dir, name)
			if err = os.WriteFile(f, b, 0o644); err == nil {
				written = append(written, f)
				return
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	if len(runs) > 0 {
		write("failover-outage.svg", Outage(runs).SVG)
	}
	for _, r := range runs {
		i := trial - 1
		if trial < 1 {
			i = MedianTrial(r.Records)
		}
		tl, err := Timeline(r, i)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", from[r.Name()], err))
			continue
		}
		write("failover-timeline-"+r.Name()+".svg", tl.SVG)
	}
	return written, errors.Join(errs...)
}
