package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Fencing: every write the controller makes (a Service's annotation and status, a pool's status, the
// ConfigurationState) is guarded twice.
//
//  1. Right before it, a leader checks that it still holds the lease, with a read of the Lease from
//     the apiserver (not from a cache: a paused process has a stale one). A former leader that was
//     paused (SIGSTOP) longer than its lease and then resumed (SIGCONT) finds another holder and
//     writes nothing; its leader elector ends its term shortly after.
//  2. The write carries the resourceVersion of the object the decision was made from (a merge patch
//     with metadata.resourceVersion, which the apiserver treats as a precondition). A write that
//     left the lease check before the pause but reaches the apiserver after the new leader wrote the
//     object fails with 409 Conflict and does not land; the key is decided again from the informer.
//
// What remains: a former leader paused between the lease check and its request reaching the
// apiserver can still write an object the new leader has not written since (it found nothing to
// change there). The new leader sees that write through its informer and decides the Service again,
// so the stale address lasts one reconcile (an allocation the new leader disagrees with is replaced,
// as for a forged status). Kubernetes offers no precondition across two objects (the Lease and the
// Service), so this window can be narrowed, not closed.

// errFenced: this replica no longer holds the lease; the write was not made.
var errFenced = errors.New("not the leader")

// fence says whether this replica may still write.
type fence interface {
	// check returns nil while the replica holds the lease, an error wrapping errFenced when another
	// one does, or the error of reading the Lease.
	check(ctx context.Context) error
}

// leaseFenceFresh is how long a successful lease check is trusted for the writes that follow it. Go's
// monotonic clock keeps running while a process is stopped, so a replica resumed after a pause longer
// than this checks again before its next write.
const leaseFenceFresh = 100 * time.Millisecond

// leaseFence checks the leader Lease on the apiserver.
type leaseFence struct {
	leases   typedcoordinationv1.LeaseInterface
	name, id string

	mu   sync.Mutex // guards okAt
	okAt time.Time  // when the last check that found this replica holding the lease started
}

func (f *leaseFence) check(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.okAt.IsZero() && time.Since(f.okAt) < leaseFenceFresh {
		return nil
	}
	start := time.Now()
	l, err := f.leases.Get(ctx, f.name, metav1.GetOptions{}) // no resourceVersion: a quorum read
	if err != nil {
		return fmt.Errorf("reading lease %s: %w", f.name, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder != f.id {
		f.okAt = time.Time{}
		return fmt.Errorf("%w: lease %s is held by %q, not %q", errFenced, f.name, holder, f.id)
	}
	f.okAt = start
	return nil
}

// beforeWrite runs the test hook and the fence before a write of what; a non-nil error means the
// write must not be made.
func (r *reconciler) beforeWrite(ctx context.Context, what string) error {
	if h := r.cfg.writeHook; h != nil {
		h(stageLease, what)
	}
	if ctx.Err() != nil {
		return ctx.Err() // leadership or the process is ending: a former leader must not write
	}
	if r.fence != nil {
		if err := r.fence.check(ctx); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if h := r.cfg.writeHook; h != nil {
		h(stageWrite, what)
	}
	return nil
}

// withResourceVersion adds metadata.resourceVersion to a merge patch: the apiserver then applies it
// only to that version of the object (409 Conflict otherwise). An empty rv adds nothing.
func withResourceVersion(patch map[string]any, rv string) map[string]any {
	if rv == "" {
		return patch
	}
	md, _ := patch["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		patch["metadata"] = md
	}
	md["resourceVersion"] = rv
	return patch
}
