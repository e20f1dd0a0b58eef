package proxybench

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseWrk(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string // inline text, or "@file" in testdata
		want    Wrk
		wantErr bool
	}{
		{name: "captured", in: "@wrk-ok.txt",
			want: Wrk{Requests: 243, RPS: 241.73, P50: 6930 * time.Microsecond, P99: 37170 * time.Microsecond}},
		{name: "captured non-2xx", in: "@wrk-non2xx.txt",
			want: Wrk{Requests: 764, RPS: 758.25, P50: 1960 * time.Microsecond, P99: 14370 * time.Microsecond, Errors: 764}},
		{name: "socket errors and other units", in: `Running 10s test @ http://172.18.0.5:31080/
  2 threads and 50 connections
  Latency Distribution
     50%  812.00us
     75%    1.01ms
     90%    1.40ms
     99%    1.20s
  400123 requests in 10.00s, 52.34MB read
  Socket errors: connect 0, read 12, write 1, timeout 3
Requests/sec:  40001.23
Transfer/sec:      5.23MB
`, want: Wrk{Requests: 400123, RPS: 40001.23, P50: 812 * time.Microsecond, P99: 1200 * time.Millisecond, Errors: 16}},
		{name: "without --latency", in: "  10 requests in 1.00s, 1KB read\nRequests/sec:     10.00\n", wantErr: true},
		{name: "bad latency", in: "  Latency Distribution\n     50%    fast\nRequests/sec: 1\n", wantErr: true},
		{name: "bad socket errors", in: "  Socket errors: connect x\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if f, ok := strings.CutPrefix(in, "@"); ok {
				b, err := os.ReadFile("testdata/" + f)
				if err != nil {
					t.Fatal(err)
				}
				in = string(b)
			}
			got, err := ParseWrk(strings.NewReader(in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseWrk: error %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ParseWrk (-want +got):\n%s", d)
			}
		})
	}
}

func TestWrkDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"812.00us": 812 * time.Microsecond, "1.50ms": 1500 * time.Microsecond, "2.00s": 2 * time.Second,
		"1.50m": 90 * time.Second, "1.00h": time.Hour,
	} {
		if got, err := wrkDuration(in); err != nil || got != want {
			t.Errorf("wrkDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"12", "ms", "x.ms"} {
		if _, err := wrkDuration(in); err == nil {
			t.Errorf("wrkDuration(%q): no error", in)
		}
	}
}

func TestSummarizeWrk(t *testing.T) {
	runs := []Wrk{
		{RPS: 100, P50: 3 * time.Millisecond, P99: 9 * time.Millisecond, Errors: 1},
		{RPS: 300, P50: 1 * time.Millisecond, P99: 7 * time.Millisecond},
		{RPS: 200, P50: 2 * time.Millisecond, P99: 8 * time.Millisecond, Errors: 2},
	}
	want := WrkSummary{Runs: 3, RPS: 200, P50: 2 * time.Millisecond, P99: 8 * time.Millisecond, Errors: 3}
	if d := cmp.Diff(want, SummarizeWrk(runs)); d != "" {
		t.Errorf("SummarizeWrk (-want +got):\n%s", d)
	}
	if got := SummarizeWrk(nil); got.RPS != -1 || got.P50 != -1 || got.Runs != 0 {
		t.Errorf("SummarizeWrk(nil) = %+v, want unknowns", got)
	}
}
