package chaos

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
)

// TestBucketMACs: the one bucketing of probe events that AnalyzeProbe, Failovers and Disturbances
// share: ARP replies and gratuitous ARPs by bucket, MACs in lower case, HTTP and what falls outside
// [start, end) left out, a partial last bucket dropped.
func TestBucketMACs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const b = 100 * time.Millisecond
	for _, tc := range []struct {
		name string
		ev   []failover.Event
		end  time.Time
		want []map[string]bool
	}{
		{name: "no whole bucket", ev: []failover.Event{{At: at(10), Kind: "reply", MAC: "aa"}}, end: at(99), want: nil},
		{name: "empty buckets stay nil", end: at(300), want: []map[string]bool{nil, nil, nil}},
		{name: "replies and gratuitous ARPs, lower case", end: at(200),
			ev:   []failover.Event{{At: at(0), Kind: "reply", MAC: "AA"}, {At: at(50), Kind: "garp", MAC: "aa"}, {At: at(150), Kind: "garp", MAC: "Bb"}},
			want: []map[string]bool{{"aa": true}, {"bb": true}}},
		{name: "two MACs in one bucket", end: at(100),
			ev:   []failover.Event{{At: at(10), Kind: "reply", MAC: "aa"}, {At: at(90), Kind: "reply", MAC: "bb"}},
			want: []map[string]bool{{"aa": true, "bb": true}}},
		{name: "HTTP and events outside the span left out", end: at(250),
			ev: []failover.Event{{At: at(-150), Kind: "reply", MAC: "early"}, {At: at(20), Kind: "http", OK: true},
				{At: at(120), Kind: "reply", MAC: "cc"}, {At: at(210), Kind: "reply", MAC: "partial"}, {At: at(400), Kind: "reply", MAC: "late"}},
			want: []map[string]bool{nil, {"cc": true}}},
		{name: "less than a bucket before the start left out", end: at(100),
			ev:   []failover.Event{{At: at(-50), Kind: "reply", MAC: "early"}, {At: at(10), Kind: "reply", MAC: "aa"}},
			want: []map[string]bool{{"aa": true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, bucketMACs(tc.ev, t0, tc.end, b)); diff != "" {
				t.Errorf("bucketMACs (-want +got):\n%s", diff)
			}
		})
	}
}
