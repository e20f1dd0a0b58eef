package connbench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/benchplot"
)

// Stalls is the picture of the runs: the distribution, over trials, of the longest stall of the
// flows that survived, one curve per configuration and event. Trials whose every flow broke have no
// survivor's stall and are left out (benchplot counts them in the legend).
func Stalls(runs []Run) benchplot.Distribution {
	d := benchplot.Distribution{Title: "Connections across a failover: longest stall of a surviving flow",
		XLabel: "longest time without an answer after the event (per trial)"}
	for i, r := range runs {
		var v []time.Duration
		for _, t := range r.Trials {
			v = append(v, t.Stall) // -1 (left out) when no flow survived
		}
		d.Series = append(d.Series, benchplot.Series{Name: r.Label + ", " + r.Event, Style: benchplot.Style{Color: i}, Values: v})
	}
	return d
}

// ResultsKind marks a file of runs, for `ironlb bench plot`.
const ResultsKind = "connections"

// Results is what --plot saves.
type Results struct {
	Kind string `json:"kind"` // ResultsKind
	Runs []Run  `json:"runs"`
}

// RenderFile draws the picture of a saved Results file into dir.
func RenderFile(dir, file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	svg, err := Stalls(r.Runs).SVG()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	name := filepath.Join(dir, "connections-stall.svg")
	return []string{name}, os.WriteFile(name, svg, 0o644)
}

// SavePlots writes the runs as JSON (connections.json) and their picture (connections-stall.svg)
// into dir and returns the files written.
func SavePlots(dir string, runs []Run) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	b, err := json.MarshalIndent(Results{Kind: ResultsKind, Runs: runs}, "", " ")
	if err != nil {
		return nil, err
	}
	name := filepath.Join(dir, "connections.json")
	if err := os.WriteFile(name, b, 0o644); err != nil {
		return nil, err
	}
	files = append(files, name)
	svg, err := Stalls(runs).SVG()
	if err != nil {
		return files, err
	}
	name = filepath.Join(dir, "connections-stall.svg")
	if err := os.WriteFile(name, svg, 0o644); err != nil {
		return files, err
	}
	return append(files, name), nil
}
