package controller

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ironlb/ironlb/internal/liveness"
)

// TestEnsureHeartbeatKey: an absent Secret is created with a random key of KeyMinLen bytes; an
// existing one is left alone; replicas racing converge on one Secret, created once.
func TestEnsureHeartbeatKey(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	const ns = "metallb-system"

	cs := fake.NewClientset()
	created, err := ensureHeartbeatKey(ctx, cs, ns, liveness.KeySecret, log)
	if err != nil || !created {
		t.Fatalf("created %v, err %v", created, err)
	}
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, liveness.KeySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := s.Data[liveness.KeyPrimary]
	if len(key) < liveness.KeyMinLen || bytes.Equal(key, make([]byte, len(key))) {
		t.Fatalf("primary key %x: want %d random bytes", key, liveness.KeyMinLen)
	}
	if created, err := ensureHeartbeatKey(ctx, cs, ns, liveness.KeySecret, log); err != nil || created {
		t.Fatalf("second call: created %v, err %v", created, err)
	}
	again, _ := cs.CoreV1().Secrets(ns).Get(ctx, liveness.KeySecret, metav1.GetOptions{})
	if !bytes.Equal(again.Data[liveness.KeyPrimary], key) {
		t.Fatal("an existing key was replaced")
	}

	// An operator's Secret (mid-rotation) is never touched.
	op := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: liveness.KeySecret, Namespace: ns},
		Data: map[string][]byte{liveness.KeyPrimary: bytes.Repeat([]byte("n"), 40), liveness.KeySecondary: key}}
	cs = fake.NewClientset(op)
	if created, err := ensureHeartbeatKey(ctx, cs, ns, liveness.KeySecret, log); err != nil || created {
		t.Fatalf("operator's Secret: created %v, err %v", created, err)
	}

	// Replicas racing: one creates, the others read it back.
	cs = fake.NewClientset()
	var wg sync.WaitGroup
	var mu sync.Mutex
	creates := 0
	for range 4 {
		wg.Go(func() {
			c, err := ensureHeartbeatKey(ctx, cs, ns, liveness.KeySecret, log)
			if err != nil {
				t.Error(err)
			}
			if c {
				mu.Lock()
				creates++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if creates != 1 {
		t.Fatalf("%d replicas created the Secret, want 1", creates)
	}
}
