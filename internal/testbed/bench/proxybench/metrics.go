package proxybench

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Sample is one line of Prometheus' text exposition format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseMetrics reads the text exposition format (comments skipped). A malformed line is an error
// with its number.
func ParseMetrics(r io.Reader) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n, line, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 || len(line) < eq+2 || line[eq+1] != '"' {
				return s, fmt.Errorf("bad label")
			}
			key := strings.TrimSpace(line[:eq])
			var val strings.Builder
			j := eq + 2
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					if line[j] == 'n' {
						val.WriteByte('\n')
						continue
					}
				}
				val.WriteByte(line[j])
			}
			if j >= len(line) {
				return s, fmt.Errorf("unterminated label value")
			}
			s.Labels[key] = val.String()
			line = line[j+1:]
		}
	}
	f := strings.Fields(line)
	if len(f) < 1 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

// Value returns the value of the sample with this name whose labels include want's, summed over
// the matching samples; ok is false when none matches.
func Value(ss []Sample, name string, want map[string]string) (v float64, ok bool) {
next:
	for _, s := range ss {
		if s.Name != name {
			continue
		}
		for k, w := range want {
			if s.Labels[k] != w {
				continue next
			}
		}
		v += s.Value
		ok = true
	}
	return v, ok
}

// Latest is the largest value of a metric over the series matching want: for timestamps, which must
// not be summed over the series of each IP family as Value does.
func Latest(ss []Sample, name string, want map[string]string) (v float64, ok bool) {
next:
	for _, s := range ss {
		if s.Name != name {
			continue
		}
		for k, w := range want {
			if s.Labels[k] != w {
				continue next
			}
		}
		if !ok || s.Value > v {
			v, ok = s.Value, true
		}
	}
	return v, ok
}

// Own are a proxy's own sync metrics: the sums and counts of its full- and partial-sync duration
// histograms (seconds) and the time of its last sync (Unix seconds). Missing values are -1.
type Own struct {
	FullSum, FullCount       float64
	PartialSum, PartialCount float64
	Last                     float64
}

// OwnMetrics picks a proxy's sync metrics out of its samples: kube-proxy's
// kubeproxy_sync_{full,partial}_proxy_rules_duration_seconds and
// kubeproxy_sync_proxy_rules_last_timestamp_seconds (registered in nftables mode, k8s
// pkg/proxy/metrics; the durations of its IPv4 syncs when the series are per IP family), or ironlb's ironlb_proxy_sync_duration_seconds{kind=full|partial} and
// ironlb_proxy_last_sync_timestamp_seconds (internal/proxy/metrics.go).
func OwnMetrics(proxy string, ss []Sample) Own {
	get := func(name string, labels map[string]string) float64 {
		if v, ok := Value(ss, name, labels); ok {
			return v
		}
		return -1
	}
	latest := func(name string) float64 {
		if v, ok := Latest(ss, name, nil); ok {
			return v
		}
		return -1
	}
	if proxy == IronLB {
		const h = "ironlb_proxy_sync_duration_seconds"
		full, part := map[string]string{"kind": "full"}, map[string]string{"kind": "partial"}
		return Own{
			FullSum: get(h+"_sum", full), FullCount: get(h+"_count", full),
			PartialSum: get(h+"_sum", part), PartialCount: get(h+"_count", part),
			Last: latest("ironlb_proxy_last_sync_timestamp_seconds"),
		}
	}
	const full, part = "kubeproxy_sync_full_proxy_rules_duration_seconds", "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	// kube-proxy syncs each IP family on its own and labels the series ip_family: the benchmark's
	// Services are IPv4, and the IPv6 syncs of an empty table would halve the mean.
	var fam map[string]string
	for _, s := range ss {
		if s.Name == full+"_count" && s.Labels["ip_family"] != "" {
			fam = map[string]string{"ip_family": "IPv4"}
		}
	}
	return Own{
		FullSum: get(full+"_sum", fam), FullCount: get(full+"_count", fam),
		PartialSum: get(part+"_sum", fam), PartialCount: get(part+"_count", fam),
		Last: latest("kubeproxy_sync_proxy_rules_last_timestamp_seconds"),
	}
}

// PartialSince is the duration of the partial syncs between two readings (their mean if more
// than one ran), in seconds; -1 if none ran or a reading lacks the histogram.
func PartialSince(before, after Own) float64 {
	n := after.PartialCount - before.PartialCount
	if before.PartialCount < 0 || after.PartialCount < 0 || n <= 0 {
		return -1
	}
	return (after.PartialSum - before.PartialSum) / n
}
