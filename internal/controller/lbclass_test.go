package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/internal/config"
)

// TestLBClassAgainstAPIServer runs two controllers side by side, as two implementations would: one
// started with --lb-class=ironlb.io/a (its pools in namespace lb-a), one without a class (its pools
// in metallb-system). Each serves only its own Services (MetalLB's rule, config.Serves), and a
// Service of a third class is never written by either, even when it carries ironlb's annotation
// and a status that neither would give it.
func TestLBClassAgainstAPIServer(t *testing.T) {
	h := newHarness(t)
	const nsA, classA, classB = "lb-a", "ironlb.io/a", "other.example/b"
	ctx := context.Background()
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.apply(pool("classless", "10.20.0.10-10.20.0.20"))
	h.apply(fmt.Sprintf("apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: class-a\n  namespace: %s\nspec:\n  addresses: [10.10.0.10-10.10.0.20]\n", nsA))
	class := func(c string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.LoadBalancerClass = &c }
	}

	// Another implementation's Service, already given an address by it, and (as after a migration)
	// carrying ironlb's annotation: the old rule would have taken the address back.
	h.createService("theirs", class(classB), func(s *corev1.Service) {
		s.Annotations = map[string]string{config.AnnotationAllocatedFromPool: "classless"}
	})
	theirs, err := h.cs.CoreV1().Services("default").Get(ctx, "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirs.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.77"}}
	theirs, err = h.cs.CoreV1().Services("default").UpdateStatus(ctx, theirs, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	h.startWith(Config{Namespace: nsA, LBClass: classA, FlushInterval: 100 * time.Millisecond})
	h.startWith(Config{Namespace: ns, FlushInterval: 100 * time.Millisecond})

	h.createService("mine-a", class(classA))
	h.createService("classless")
	h.waitIP("mine-a", "10.10.0.10")
	h.waitIP("classless", "10.20.0.10")
	h.waitEvent("mine-a", "IPAllocated", "10.10.0.10")
	h.waitEvent("classless", "IPAllocated", "10.20.0.10")
	if got := h.events("mine-a", "IPAllocated"); len(got) != 1 {
		t.Errorf("mine-a: IPAllocated events %q, want exactly one (from the class-a controller)", got)
	}
	if got := h.events("classless", "IPAllocated"); len(got) != 1 {
		t.Errorf("classless: IPAllocated events %q, want exactly one (from the controller without a class)", got)
	}

	// A pool change makes both controllers decide every Service again; "theirs" was seen first,
	// when both started, and again now.
	h.apply(pool("classless", "10.20.0.10-10.20.0.21"))
	h.apply(fmt.Sprintf("apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: class-a\n  namespace: %s\nspec:\n  addresses: [10.10.0.10-10.10.0.21]\n", nsA))
	h.createService("mine-a-2", class(classA))
	h.createService("classless-2")
	h.waitIP("mine-a-2", "10.10.0.11")
	h.waitIP("classless-2", "10.20.0.11")

	got, err := h.cs.CoreV1().Services("default").Get(ctx, "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != theirs.ResourceVersion {
		t.Errorf("Service of class %s was written (resourceVersion %s, was %s): annotations %v, status %v",
			classB, got.ResourceVersion, theirs.ResourceVersion, got.Annotations, got.Status.LoadBalancer.Ingress)
	}
	if evs := h.events("theirs", "AllocationFailed"); len(evs) > 0 {
		t.Errorf("Service of class %s got AllocationFailed events: %q", classB, evs)
	}
}
