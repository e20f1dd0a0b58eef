package controller

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPausedLeaderCannotOverwrite: replica A leads and decides a Service's address (10.70.0.0, the
// lowest free), then is "paused" with that write in hand (its write hook blocks, as SIGSTOP would);
// meanwhile the user asks for another address, replica B takes the lease over and writes it. A then
// resumes: its stale write must not land, at any moment (a watch records every state of the
// Service), and the Service ends with B's decision. Two pauses: before A's lease check (the check
// finds B holding the lease and A writes nothing), and after it, just before the API call (the
// write carries the resourceVersion A decided from and fails with a conflict).
func TestPausedLeaderCannotOverwrite(t *testing.T) {
	h := newHarness(t)
	h.apply(pool("p", "10.70.0.0/28"))
	for _, tc := range []struct {
		stage writeStage
		svc   string
		want  string // what the user asks for while A is paused: B's decision
	}{{stageLease, "paused-before-lease-check", "10.70.0.5"}, {stageWrite, "paused-before-write", "10.70.0.6"}} {
		t.Run(string(tc.stage), func(t *testing.T) {
			what := "service default/" + tc.svc
			hold, reached := make(chan struct{}), make(chan struct{}, 1)
			var released, wroteAfterRelease atomic.Bool
			hook := func(stage writeStage, w string) {
				if w != what {
					return
				}
				if stage == tc.stage && !released.Load() {
					select {
					case reached <- struct{}{}:
					default:
					}
					<-hold
					return
				}
				if stage == stageWrite && released.Load() {
					wroteAfterRelease.Store(true)
				}
			}
			// Leases long enough that A's term outlives the test's steps: A keeps running, as a
			// process resumed after SIGCONT does until its elector notices the lost lease.
			run := func(id string, hook func(writeStage, string)) func() {
				return h.runReplica(Config{Identity: id,
					FlushInterval: 200 * time.Millisecond, LeaseDuration: 20 * time.Second, RenewDeadline: 15 * time.Second,
					RetryPeriod: 200 * time.Millisecond, writeHook: hook}).stop
			}
			var releaseOnce sync.Once
			release := func() { releaseOnce.Do(func() { released.Store(true); close(hold) }) }
			stopA := run("replica-a", hook)
			t.Cleanup(func() { release(); stopA() })
			h.waitHolderT(t, "replica-a", "replica-a to lead")
			stopB := run("replica-b", nil)
			t.Cleanup(stopB)

			// Every state the Service goes through.
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			w, err := h.cs.CoreV1().Services("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + tc.svc})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var seen []string
			go func() {
				for ev := range w.ResultChan() {
					if s, ok := ev.Object.(*corev1.Service); ok {
						for _, in := range s.Status.LoadBalancer.Ingress {
							mu.Lock()
							seen = append(seen, in.IP)
							mu.Unlock()
						}
					}
				}
			}()

			h.createService(tc.svc)
			select {
			case <-reached:
			case <-time.After(20 * time.Second):
				t.Fatal("replica-a never came to write the Service")
			}
			// The user changes the Service while A is paused, and B takes the lease over.
			patch := []byte(`{"metadata":{"annotations":{"metallb.io/loadBalancerIPs":"` + tc.want + `"}}}`)
			if _, err := h.cs.CoreV1().Services("default").Patch(context.Background(), tc.svc, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			h.takeLeaseT(t, "replica-b", 20)
			h.waitIP(tc.svc, tc.want) // B's decision

			// A resumes with its stale decision (10.70.0.0).
			release()
			time.Sleep(2 * time.Second) // A's write, and the retries it triggers, happen now
			if got := h.ip(tc.svc); got != tc.want {
				t.Errorf("after A resumed the Service holds %q, want B's %s", got, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, ip := range seen {
				if ip != tc.want {
					t.Errorf("the Service held %s at some point (states seen: %v): A's stale write landed", ip, seen)
					break
				}
			}
			if tc.stage == stageLease && wroteAfterRelease.Load() {
				t.Error("A passed its lease check after B took the lease over")
			}
			if got := h.leaseHolder(); got != "replica-b" {
				t.Errorf("lease held by %q, want replica-b", got)
			}
		})
	}
}
