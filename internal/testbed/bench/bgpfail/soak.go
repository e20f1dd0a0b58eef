package bgpfail

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// SoakResult is what a flap run counted: with no failure injected, every BFD session that went down,
// every BGP session dropped and every change of the router's route is a false alarm.
type SoakResult struct {
	Label         string
	Duration      time.Duration
	Load          bool
	BFDDown       int // BFD sessions down, counted by the router's bfdd
	BGPDropped    int // BGP sessions dropped, counted by the router's bgpd
	RouteChanges  int // changes of the router's route to the service address
	Sent, Failed  int // client requests
	BFDSessionsUp int // BFD sessions up at the end (want one per node)
}

// routerCounters reads the router's BFD down events and BGP dropped connections, summed over peers.
func routerCounters(ctx context.Context, l *lab.Lab) (bfdDown, bgpDropped, bfdUp int, err error) {
	out, err := l.Vtysh(ctx, "show bfd peers counters json")
	if err != nil {
		return 0, 0, 0, err
	}
	var bfd []struct {
		Down int `json:"session-down"`
	}
	if err := json.Unmarshal([]byte(out), &bfd); err != nil {
		return 0, 0, 0, fmt.Errorf("show bfd peers counters: %w: %s", err, out)
	}
	for _, p := range bfd {
		bfdDown += p.Down
	}
	out, err = l.Vtysh(ctx, "show bfd peers json")
	if err != nil {
		return 0, 0, 0, err
	}
	var peers []struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &peers); err != nil {
		return 0, 0, 0, fmt.Errorf("show bfd peers: %w: %s", err, out)
	}
	for _, p := range peers {
		if p.Status == "up" {
			bfdUp++
		}
	}
	out, err = l.Vtysh(ctx, "show bgp neighbors json")
	if err != nil {
		return 0, 0, 0, err
	}
	var nbrs map[string]struct {
		Dropped int `json:"connectionsDropped"`
	}
	if err := json.Unmarshal([]byte(out), &nbrs); err != nil {
		return 0, 0, 0, fmt.Errorf("show bgp neighbors: %w", err)
	}
	for _, n := range nbrs {
		bgpDropped += n.Dropped
	}
	return bfdDown, bgpDropped, bfdUp, nil
}

// Soak runs the speakers for d with no failure (and both cores saturated by stress-ng when load),
// probing from mypc2 every 100 ms, and counts what went down.
func Soak(ctx context.Context, l *lab.Lab, o Options, d time.Duration, load bool) (SoakResult, error) {
	res := SoakResult{Label: o.Label(), Duration: d, Load: load}
	applied, err := Setup(ctx, l, o)
	if err != nil {
		return res, err
	}
	mon, err := Watch(l, VIP)
	if err != nil {
		return res, err
	}
	defer mon.Close()
	if err := Ready(ctx, l, o, mon, applied, 120*time.Second); err != nil {
		return res, err
	}
	if o.BFD > 0 { // BFD comes up a moment after BGP
		time.Sleep(3 * time.Second)
	}
	bfd0, bgp0, _, err := routerCounters(ctx, l)
	if err != nil {
		return res, err
	}
	if load {
		stress := exec.CommandContext(ctx, "stress-ng", "--cpu", "4", "--vm", "2", "--vm-bytes", "128M",
			"--timeout", fmt.Sprintf("%ds", int(d.Seconds())+5), "--quiet")
		if err := stress.Start(); err != nil {
			return res, fmt.Errorf("stress-ng (apt-get install stress-ng): %w", err)
		}
		defer func() { _ = stress.Process.Kill(); _ = stress.Wait() }()
	}
	start := time.Now()
	o.Log("bgp soak: %s for %s, load %v", res.Label, d, load)
	probe := exec.CommandContext(ctx, o.Self, "lab", "exec", lab.Client2Name, "--", o.Self, "probe",
		"--url", "http://"+VIP.String()+"/", "--every", "100ms", "--for", d.String(), "--timeout", "2s")
	var out bytes.Buffer
	probe.Stdout = &out
	if err := probe.Run(); err != nil {
		return res, fmt.Errorf("probe: %w", err)
	}
	bfd1, bgp1, up, err := routerCounters(ctx, l)
	if err != nil {
		return res, err
	}
	res.BFDDown, res.BGPDropped, res.BFDSessionsUp = bfd1-bfd0, bgp1-bgp0, up
	res.RouteChanges = len(mon.Since(start))
	reqs, err := failover.Parse(&out)
	if err != nil {
		return res, err
	}
	for _, r := range reqs {
		res.Sent++
		if !r.OK {
			res.Failed++
		}
	}
	return res, nil
}

// SoakTable prints flap runs.
func SoakTable(w io.Writer, rs []SoakResult) {
	fmt.Fprintf(w, "\n%-50s %-9s %-6s %-9s %-12s %-14s %-14s %s\n", "configuration", "duration", "load", "BFD down", "BGP dropped", "route changes", "failed/sent", "BFD up at end")
	for _, r := range rs {
		fmt.Fprintf(w, "%-50s %-9s %-6v %-9d %-12d %-14d %-14s %d\n", r.Label, r.Duration, r.Load, r.BFDDown, r.BGPDropped, r.RouteChanges, fmt.Sprintf("%d/%d", r.Failed, r.Sent), r.BFDSessionsUp)
	}
}
