package connbench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/connprobe"
)

// A raw trial file (--raw-dir) is the configuration, the event, the router's next hops per flow
// (BGP) and the client's report:
//
//	config <label>
//	event <name> <unix ns>
//	hop <proto> <port> <unix ns> <mac>      (Hops.String)
//	flow|host|gap|fail|end ...              (connprobe.Write)
//
// ParseRaw reads one back and accounts it again with today's Analyze, so a measure added after a
// run (the stall across the event) can be read from that run's files instead of a new run. The
// window's end for the router's moves is the client's end.
func ParseRaw(rd io.Reader) (label, event string, t Trial, err error) {
	var probe bytes.Buffer
	var hops Hops
	var at time.Time
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		word, rest, _ := strings.Cut(line, " ")
		bad := func(why string) error { return fmt.Errorf("line %d: %s: %q", n, why, line) }
		switch word {
		case "config":
			label = rest
		case "event":
			f := strings.Fields(rest)
			if len(f) != 2 {
				return "", "", Trial{}, bad("want event NAME NS")
			}
			ns, perr := strconv.ParseInt(f[1], 10, 64)
			if perr != nil {
				return "", "", Trial{}, bad("not nanoseconds")
			}
			event, at = f[0], time.Unix(0, ns)
		case "hop":
			f := strings.Fields(rest)
			if len(f) != 4 {
				return "", "", Trial{}, bad("want hop PROTO PORT NS MAC")
			}
			port, perr1 := strconv.Atoi(f[1])
			ns, perr2 := strconv.ParseInt(f[2], 10, 64)
			if perr1 != nil || perr2 != nil {
				return "", "", Trial{}, bad("not a number")
			}
			hops.Add(time.Unix(0, ns), Flow{Proto: f[0], Port: port}, f[3])
		default:
			probe.WriteString(line)
			probe.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", Trial{}, err
	}
	if label == "" || event == "" {
		return "", "", Trial{}, fmt.Errorf("no config or event line")
	}
	r, err := connprobe.Parse(&probe)
	if err != nil {
		return "", "", Trial{}, err
	}
	t = Analyze(r, at)
	if moved, compared := hops.Moved(at, r.End); compared > 0 {
		t.RouterMoved = moved
	}
	return label, event, t, nil
}

// Group collects trials into runs by configuration and event, in the order first seen.
func Group(runs []Run, label, event string, t Trial) []Run {
	for i := range runs {
		if runs[i].Label == label && runs[i].Event == event {
			runs[i].Trials = append(runs[i].Trials, t)
			return runs
		}
	}
	return append(runs, Run{Label: label, Event: event, Trials: []Trial{t}})
}
