package speaker

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestLatestWriter: what a latestWriter writes, and what it reports, for updates before and during
// Run, failing writes and resyncs. Each case runs until its writes say it is done (no clock is read
// for an assertion: the short durations only keep the test quick).
func TestLatestWriter(t *testing.T) {
	errDown := errors.New("down")
	for _, tc := range []struct {
		name string
		loop writeLoop
		// before are the values recorded before Run starts.
		before []int
		// fail is how many writes fail first.
		fail int
		// during, if set, is recorded while the first write runs.
		during *int
		// writes is how many writes the case waits for; want is what they wrote.
		writes int
		want   []int
		// wantErrs is how many of the reports were failures (the others: nil).
		wantErrs int
	}{
		{name: "the latest of the values recorded before", before: []int{1, 2, 3}, writes: 1, want: []int{3}},
		{name: "a failed write is tried again", loop: writeLoop{backoff: time.Millisecond}, before: []int{7}, fail: 2,
			writes: 3, want: []int{7, 7, 7}, wantErrs: 2},
		{name: "written again every resync", loop: writeLoop{resync: time.Millisecond}, before: []int{4},
			writes: 3, want: []int{4, 4, 4}},
		{name: "a change made during a write is written next", before: []int{1}, during: ptr(2), writes: 2, want: []int{1, 2}},
		{name: "with a gap between writes", loop: writeLoop{gap: time.Millisecond}, before: []int{1}, during: ptr(5),
			writes: 2, want: []int{1, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLatestWriter(0)
			for _, v := range tc.before {
				l.Update(func(int) int { return v })
			}
			var wrote []int
			var errs, oks int
			done := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			loop := tc.loop
			loop.report = func(err error) {
				if err != nil {
					errs++
				} else {
					oks++
				}
			}
			ran := make(chan struct{})
			go func() {
				defer close(ran)
				l.Run(ctx, loop, func(_ context.Context, v int) error {
					wrote = append(wrote, v)
					if len(wrote) == 1 && tc.during != nil {
						l.Update(func(int) int { return *tc.during })
					}
					if len(wrote) == tc.writes {
						close(done)
						cancel() // the last write's report is not made: ctx has ended
					}
					if len(wrote) <= tc.fail {
						return errDown
					}
					return nil
				})
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cancel()
				<-ran
				t.Fatalf("wrote %v, waited for %d writes", wrote, tc.writes)
			}
			<-ran
			if !slices.Equal(wrote, tc.want) {
				t.Errorf("wrote %v, want %v", wrote, tc.want)
			}
			if errs != tc.wantErrs || oks != tc.writes-1-tc.wantErrs {
				t.Errorf("reported %d failures and %d successes, want %d and %d", errs, oks, tc.wantErrs, tc.writes-1-tc.wantErrs)
			}
		})
	}
}

// TestLatestWriterUpdateSeesTheLatest: Update hands f the value recorded last, and Latest returns
// what f made.
func TestLatestWriterUpdateSeesTheLatest(t *testing.T) {
	l := newLatestWriter([]string(nil))
	for _, s := range []string{"a", "b", "c"} {
		l.Update(func(old []string) []string { return append(slices.Clone(old), s) })
	}
	if got := l.Latest(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Latest() = %v", got)
	}
}
