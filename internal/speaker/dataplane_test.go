package speaker

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestDataplaneRules has one row per rule of the data plane's health (dataplane.go): a sequence of
// events, each at its time, then the verdict: ready, why not, what is due to reopen and when.
func TestDataplaneRules(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		at time.Duration
		ev dataplaneEvent
	}
	linkUp := func(index int) dataplaneEvent { return dataplaneEvent{Up: true, Index: index} }
	linkGone := dataplaneEvent{Reason: DataplaneLinkMissing, Detail: "deleted"}
	linkDown := dataplaneEvent{Reason: DataplaneLinkDown, Detail: "LinkNoCarrier"}
	sockErr := func(r string) dataplaneEvent {
		return dataplaneEvent{Responder: r, Reason: DataplaneSocketError, Detail: "boom"}
	}
	reopened := func(r string) dataplaneEvent { return dataplaneEvent{Responder: r, Up: true} }
	reopenFailed := func(r string) dataplaneEvent {
		return dataplaneEvent{Responder: r, Reason: DataplaneReopenFailed, Detail: "no such interface"}
	}
	type want struct {
		ready    bool
		reason   dataplaneReason
		resp     string        // the responder Why names
		dueAt    time.Duration // when Due starts returning due (ignored if due is empty)
		due      []string
		failures int
	}
	rows := []struct {
		name  string
		steps []step
		want  want
	}{{
		name:  "1. healthy from the start; the link's first report changes nothing",
		steps: []step{{0, linkUp(7)}},
		want:  want{ready: true},
	}, {
		name:  "1, 3. a socket error: not ready, that responder reopened after the first backoff",
		steps: []step{{0, sockErr(responderARP)}},
		want:  want{reason: DataplaneSocketError, resp: responderARP, due: []string{responderARP}, dueAt: dataplaneRetryMin, failures: 1},
	}, {
		name:  "1. reopened: ready again, nothing due",
		steps: []step{{0, sockErr(responderARP)}, {dataplaneRetryMin, reopened(responderARP)}},
		want:  want{ready: true, failures: 1},
	}, {
		name:  "2. the link deleted: not ready for the link, every socket faulted",
		steps: []step{{0, linkGone}},
		want:  want{reason: DataplaneLinkMissing, due: []string{responderARP, responderNDP}, dueAt: dataplaneRetryMin, failures: 1},
	}, {
		name:  "2. the link down: not ready",
		steps: []step{{0, linkDown}},
		want:  want{reason: DataplaneLinkDown, due: []string{responderARP, responderNDP}, dueAt: dataplaneRetryMin, failures: 1},
	}, {
		name:  "3, 4. the link back: reopen every socket at once, failures from zero",
		steps: []step{{0, linkGone}, {time.Second, reopenFailed(responderARP)}, {2 * time.Second, linkUp(9)}},
		want:  want{reason: DataplaneReopenFailed, resp: responderARP, due: []string{responderARP, responderNDP}, dueAt: 2 * time.Second},
	}, {
		name: "1. the link back and both reopened: ready",
		steps: []step{{0, linkGone}, {2 * time.Second, linkUp(9)}, {2 * time.Second, reopened(responderARP)},
			{2 * time.Second, reopened(responderNDP)}},
		want: want{ready: true},
	}, {
		name:  "2. the link created again unseen (another index while up): reopen every socket at once",
		steps: []step{{0, linkUp(7)}, {time.Second, linkUp(9)}},
		want:  want{reason: DataplaneLinkMissing, resp: responderARP, due: []string{responderARP, responderNDP}, dueAt: time.Second},
	}, {
		name:  "3. each failure doubles the backoff",
		steps: []step{{0, sockErr(responderNDP)}, {time.Second, reopenFailed(responderNDP)}, {2 * time.Second, reopenFailed(responderNDP)}},
		want: want{reason: DataplaneReopenFailed, resp: responderNDP, due: []string{responderNDP}, dueAt: 2*time.Second + 4*dataplaneRetryMin,
			failures: 3},
	}, {
		name:  "3. a socket failing again right after its reopen backs off further",
		steps: []step{{0, sockErr(responderARP)}, {time.Second, reopened(responderARP)}, {2 * time.Second, sockErr(responderARP)}},
		want: want{reason: DataplaneSocketError, resp: responderARP, due: []string{responderARP}, dueAt: 2*time.Second + 2*dataplaneRetryMin,
			failures: 2},
	}, {
		name: "4. after dataplaneStable of health, failures count from zero",
		steps: []step{{0, sockErr(responderARP)}, {time.Second, reopened(responderARP)},
			{time.Second + dataplaneStable, sockErr(responderARP)}},
		want: want{reason: DataplaneSocketError, resp: responderARP, due: []string{responderARP}, dueAt: time.Second + dataplaneStable + dataplaneRetryMin,
			failures: 1},
	}, {
		name:  "an unknown responder is ignored",
		steps: []step{{0, sockErr("XDP")}},
		want:  want{ready: true},
	}}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			d := newDataplane(responderARP, responderNDP)
			d.LinkIndex = 7
			last := t0
			for _, s := range r.steps {
				last = at(s.at)
				before, n := d, len(d.Sockets)
				d = d.apply(s.ev, at(s.at))
				if len(before.Sockets) != n {
					t.Fatalf("apply changed its receiver's sockets")
				}
			}
			f, resp := d.Why(last)
			got := want{ready: d.Ready(last), reason: f.Reason, resp: resp, failures: d.Failures}
			if !d.RetryAt.IsZero() {
				got.due, got.dueAt = d.Due(d.RetryAt), d.RetryAt.Sub(t0)
				if due := d.Due(d.RetryAt.Add(-time.Nanosecond)); due != nil {
					t.Errorf("due before RetryAt: %v", due)
				}
			}
			if diff := cmp.Diff(r.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDataplaneSince: Since marks the outage's start, HealthySince its end.
func TestDataplaneSince(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	d := newDataplane(responderARP)
	d = d.apply(dataplaneEvent{Reason: DataplaneLinkMissing}, t0)
	d = d.apply(dataplaneEvent{Reason: DataplaneLinkDown}, t0.Add(time.Second))
	if !d.Since.Equal(t0) {
		t.Errorf("Since %v, want the first fault's time %v", d.Since, t0)
	}
	d = d.apply(dataplaneEvent{Up: true, Index: 3}, t0.Add(2*time.Second))
	d = d.apply(dataplaneEvent{Responder: responderARP, Up: true}, t0.Add(3*time.Second))
	if !d.Up() || !d.Since.IsZero() || !d.HealthySince.Equal(t0.Add(3*time.Second)) {
		t.Errorf("up %v since %v healthy since %v, want up since the reopen", d.Up(), d.Since, d.HealthySince)
	}
}

// TestDataplaneListening: rule 1's listening: up again, the data plane is ready only after Listen,
// says why meanwhile, and asks to be woken at its end; a fault meanwhile cancels it.
func TestDataplaneListening(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	d := newDataplane(responderARP)
	d.Listen = time.Second
	if !d.Ready(t0) {
		t.Fatal("not ready at start: the start-up listening is the owner's, not the data plane's")
	}
	d = d.apply(dataplaneEvent{Responder: responderARP, Reason: DataplaneSocketError}, t0)
	d = d.apply(dataplaneEvent{Responder: responderARP, Up: true}, t0.Add(time.Second))
	up := t0.Add(time.Second)
	if f, _ := d.Why(up); !d.Up() || d.Ready(up) || f.Reason != DataplaneListening {
		t.Errorf("just reopened: up %v ready %v why %v, want up, listening", d.Up(), d.Ready(up), f.Reason)
	}
	if next := d.Next(up); !next.Equal(up.Add(time.Second)) {
		t.Errorf("Next %v, want the listening's end %v", next, up.Add(time.Second))
	}
	if !d.Ready(up.Add(time.Second)) || !d.Next(up.Add(time.Second)).IsZero() {
		t.Error("not ready, or something pending, after the listening")
	}
	d = d.apply(dataplaneEvent{Reason: DataplaneLinkDown}, up.Add(500*time.Millisecond))
	if f, _ := d.Why(up.Add(time.Hour)); f.Reason != DataplaneLinkDown {
		t.Errorf("a fault while listening: why %v, want LinkDown", f.Reason)
	}
}

func TestDataplaneBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: dataplaneRetryMin, 2: 2 * dataplaneRetryMin, 3: 4 * dataplaneRetryMin, 100: dataplaneRetryMax} {
		if got := dataplaneBackoff(n); got != want {
			t.Errorf("dataplaneBackoff(%d) = %v, want %v", n, got, want)
		}
	}
}
