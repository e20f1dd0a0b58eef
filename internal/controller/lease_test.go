package controller

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// The leader-election tests (fence_test.go, ha_test.go) read and take over the replicas' lease
// directly: the helpers here do it one way for all of them.

// leaseName is the Lease the controller replicas campaign for, in ns.
const leaseName = "ironlb-controller"

// leaseHolder is the lease's holder ("" while there is no lease or no holder).
func (h *harness) leaseHolder() string {
	l, err := h.cs.CoordinationV1().Leases(ns).Get(context.Background(), leaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitHolderT polls the lease until id holds it, failing t after 20 s; what says what is awaited.
func (h *harness) waitHolderT(t *testing.T, id, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); h.leaseHolder() != id; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (lease holder %q)", what, h.leaseHolder())
		}
	}
}

// takeLeaseT writes id into the lease as its holder, acquired and renewed now, for secs seconds: what
// another replica taking over does, or a thief, seen from the holder (whose next renewal fails).
//
// The holder keeps renewing while this runs, so an update can meet a newer version: it is read and
// written again on a conflict (a CI run failed on "the object has been modified" once).
func (h *harness) takeLeaseT(t *testing.T, id string, secs int32) {
	t.Helper()
	leases := h.cs.CoordinationV1().Leases(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(context.Background(), leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime, l.Spec.LeaseDurationSeconds = &id, &now, &now, &secs
		_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
