// Package failover is the layer-2 failover benchmark: in the lab, a client probes a service address
// by ARP and HTTP every 20 ms (internal/testbed/probe) while the node announcing it loses power and comes
// back; this package turns the probe's log into the figures of one trial and the trials into a table.
// Analysis is pure (parse, Analyze, Summarize); run.go drives the lab.
package failover

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Event is one line of the probe's log.
type Event struct {
	At   time.Time `json:"at"`            // ARP: when seen; HTTP: when the request started
	End  time.Time `json:"end,omitzero"`  // HTTP: when it ended
	Kind string    `json:"kind"`          // "reply", "garp" (ARP) or "http"
	MAC  string    `json:"mac,omitempty"` // ARP sender
	OK   bool      `json:"ok,omitempty"`  // HTTP success
	// HTTP: the answering host, or why the request failed (probe's detail; "" in older logs)
	Detail string `json:"detail,omitempty"`
}

// Parse reads the probe's log; malformed lines are an error with their number.
func Parse(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		bad := fmt.Errorf("probe log line %d: %q", n, sc.Text())
		if len(f) != 4 && !(len(f) == 5 && f[0] == "http") {
			return nil, bad
		}
		a, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, bad
		}
		switch f[0] {
		case "arp":
			out = append(out, Event{At: time.Unix(0, a), Kind: f[2], MAC: f[3]})
		case "http":
			b, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return nil, bad
			}
			e := Event{At: time.Unix(0, a), End: time.Unix(0, b), Kind: "http", OK: f[3] == "ok"}
			if len(f) == 5 {
				e.Detail = f[4]
			}
			out = append(out, e)
		default:
			return nil, bad
		}
	}
	slices.SortStableFunc(out, func(x, y Event) int { return x.At.Compare(y.At) })
	return out, sc.Err()
}

// Trial is the outcome of one power cut and return. Durations are -1 when the event never came.
type Trial struct {
	ARP        time.Duration // cut -> first ARP packet (answer or gratuitous) from another MAC
	GARP       time.Duration // cut -> first gratuitous ARP from another MAC
	HTTPGap    time.Duration // longest time between the starts of successful requests, across the cut
	HTTPFailed int           // failed requests after the cut, until the node's return
	BackGap    time.Duration // after the return: longest time between the starts of successful requests
	BackFailed int           // failed requests after the return
	BackARPGap time.Duration // after the return: longest time without an ARP answer from anyone
	TakeBack   time.Duration // return -> first ARP packet from the returning node's MAC (-1: it never took the address back)
	Answerers  int           // distinct MACs answering in the last second of the trial (want 1)
}

// Analyze computes a trial from the probe's events: cut is the power cut, back the node's power-on,
// cutMAC the MAC of the node that was cut, and end the end of the probing.
func Analyze(ev []Event, cut, back, end time.Time, cutMAC string) Trial {
	t := Trial{ARP: -1, GARP: -1, TakeBack: -1}
	var lastOK time.Time
	var lastARP time.Time
	lastSeen := map[string]time.Time{}
	for _, e := range ev {
		switch e.Kind {
		case "reply", "garp":
			if e.At.After(cut) && e.At.Before(back) && e.MAC != cutMAC {
				if t.ARP < 0 {
					t.ARP = e.At.Sub(cut)
				}
				if e.Kind == "garp" && t.GARP < 0 {
					t.GARP = e.At.Sub(cut)
				}
			}
			if e.At.After(back) {
				if !lastARP.IsZero() && lastARP.After(back) {
					t.BackARPGap = max(t.BackARPGap, e.At.Sub(lastARP))
				}
				if e.MAC == cutMAC && t.TakeBack < 0 {
					t.TakeBack = e.At.Sub(back)
				}
			}
			lastARP = e.At
			lastSeen[e.MAC] = e.At
		case "http":
			if !e.OK {
				switch {
				case e.At.After(back):
					t.BackFailed++
				case e.At.After(cut):
					t.HTTPFailed++
				}
				continue
			}
			if !lastOK.IsZero() {
				gap := e.At.Sub(lastOK)
				switch {
				case e.At.After(back) && lastOK.After(back.Add(-time.Second)):
					t.BackGap = max(t.BackGap, gap)
				case e.At.After(cut) && !e.At.After(back):
					t.HTTPGap = max(t.HTTPGap, gap)
				}
			}
			lastOK = e.At
		}
	}
	// An outage still running when probing stops counts up to the last event.
	last := end
	if n := len(ev); n > 0 && ev[n-1].At.Before(end) {
		last = ev[n-1].At
	}
	if !lastOK.IsZero() && lastOK.After(back) && last.Sub(lastOK) > t.BackGap {
		t.BackGap = last.Sub(lastOK)
	}
	if !lastARP.IsZero() && lastARP.After(back) && last.Sub(lastARP) > t.BackARPGap {
		t.BackARPGap = last.Sub(lastARP)
	}
	for _, at := range lastSeen {
		if at.After(end.Add(-time.Second)) {
			t.Answerers++
		}
	}
	return t
}

// Stats are order statistics of one column over the trials (missing values left out).
type Stats struct {
	N                          int
	Median, P90, P99, Max, Min time.Duration
}

// Summarize computes Stats; p-quantiles by the nearest-rank method.
func Summarize(ds []time.Duration) Stats {
	var v []time.Duration
	for _, d := range ds {
		if d >= 0 {
			v = append(v, d)
		}
	}
	if len(v) == 0 {
		return Stats{}
	}
	slices.Sort(v)
	q := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return v[max(0, min(i, len(v)-1))]
	}
	return Stats{N: len(v), Median: q(0.5), P90: q(0.9), P99: q(0.99), Max: v[len(v)-1], Min: v[0]}
}
