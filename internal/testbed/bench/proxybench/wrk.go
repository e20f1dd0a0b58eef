package proxybench

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Wrk is what one wrk run reports.
type Wrk struct {
	Requests int           // completed requests
	RPS      float64       // "Requests/sec"
	P50, P99 time.Duration // from --latency's distribution
	Errors   int           // socket errors (connect, read, write, timeout) plus non-2xx/3xx responses
}

// ParseWrk reads wrk's report (run with --latency). Requests/sec and the 50% and 99% latencies must
// be there; the error lines are optional.
func ParseWrk(r io.Reader) (Wrk, error) {
	w := Wrk{RPS: -1, P50: -1, P99: -1}
	sc := bufio.NewScanner(r)
	inDist := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case line == "Latency Distribution":
			inDist = true
		case inDist && len(f) == 2 && strings.HasSuffix(f[0], "%"):
			d, err := wrkDuration(f[1])
			if err != nil {
				return w, fmt.Errorf("wrk latency %q: %w", line, err)
			}
			switch f[0] {
			case "50%", "50.000%":
				w.P50 = d
			case "99%", "99.000%":
				w.P99 = d
			}
		case strings.HasPrefix(line, "Requests/sec:") && len(f) == 2:
			inDist = false
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return w, fmt.Errorf("wrk %q: %w", line, err)
			}
			w.RPS = v
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			inDist = false
			n, err := strconv.Atoi(f[0])
			if err != nil {
				return w, fmt.Errorf("wrk %q: %w", line, err)
			}
			w.Requests = n
		case strings.HasPrefix(line, "Socket errors:"):
			// Socket errors: connect 0, read 3, write 0, timeout 12
			for _, part := range strings.Split(strings.TrimPrefix(line, "Socket errors:"), ",") {
				kv := strings.Fields(part)
				if len(kv) != 2 {
					return w, fmt.Errorf("wrk %q: bad part %q", line, part)
				}
				n, err := strconv.Atoi(kv[1])
				if err != nil {
					return w, fmt.Errorf("wrk %q: %w", line, err)
				}
				w.Errors += n
			}
		case strings.HasPrefix(line, "Non-2xx or 3xx responses:"):
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Non-2xx or 3xx responses:")))
			if err != nil {
				return w, fmt.Errorf("wrk %q: %w", line, err)
			}
			w.Errors += n
		}
	}
	if err := sc.Err(); err != nil {
		return w, err
	}
	if w.RPS < 0 || w.P50 < 0 || w.P99 < 0 {
		return w, fmt.Errorf("wrk output without Requests/sec or the 50%%/99%% latencies (run with --latency)")
	}
	return w, nil
}

// wrkDuration parses wrk's durations: a number with us, ms, s, m or h.
func wrkDuration(s string) (time.Duration, error) {
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(f * float64(u.unit)), nil
		}
	}
	return 0, fmt.Errorf("no unit in %q", s)
}

// WrkSummary is the median of several runs against one target; values are -1 without runs.
type WrkSummary struct {
	Runs     int
	RPS      float64
	P50, P99 time.Duration
	Errors   int // summed
}

// SummarizeWrk takes the medians of runs.
func SummarizeWrk(runs []Wrk) WrkSummary {
	var rps []float64
	var p50, p99 []time.Duration
	s := WrkSummary{Runs: len(runs)}
	for _, r := range runs {
		rps = append(rps, r.RPS)
		p50 = append(p50, r.P50)
		p99 = append(p99, r.P99)
		s.Errors += r.Errors
	}
	s.RPS, s.P50, s.P99 = quantile(rps, 0.5), Median(p50), Median(p99)
	return s
}
