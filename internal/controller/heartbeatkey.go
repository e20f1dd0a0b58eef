package controller

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/liveness"
)

// The heartbeat key: the speakers sign their heartbeats with a cluster key (internal/liveness,
// auth.go) kept in the Secret liveness.KeySecret of the configuration namespace. Every controller
// replica, leader or not, makes sure it exists (as MetalLB's controller creates its memberlist
// Secret): when absent it is created with a random primary key; replicas racing to create it converge
// on whichever Create wins. An existing Secret is never changed: rotating the key is the operator's
// (docs/install.md). The check is repeated every keyCheckEvery, so a deleted Secret comes back with
// a new key (the speakers keep the old one until then, and take the new one live).

// keyCheckEvery is how often the heartbeat key Secret is checked for.
const keyCheckEvery = time.Minute

// keepHeartbeatKey ensures the Secret now and every keyCheckEvery until ctx ends, retrying failures
// (the apiserver not reachable yet) with a back-off up to keyCheckEvery.
func keepHeartbeatKey(ctx context.Context, cs kubernetes.Interface, ns, name string, log *slog.Logger) {
	wait := time.Second
	for {
		created, err := ensureHeartbeatKey(ctx, cs, ns, name, log)
		switch {
		case err != nil:
			log.Error("heartbeat key Secret: cannot ensure it; speakers without it stay unready", "secret", ns+"/"+name, "err", err, "retryIn", wait)
		case created:
			log.Info("heartbeat key Secret created", "secret", ns+"/"+name)
		}
		next := keyCheckEvery
		if err != nil {
			next, wait = wait, min(2*wait, keyCheckEvery)
		} else {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// ensureHeartbeatKey creates the heartbeat key Secret when it is absent; it reports whether this call
// created it. A Secret that exists is left as it is (a warning says when its primary key is unusable).
func ensureHeartbeatKey(ctx context.Context, cs kubernetes.Interface, ns, name string, log *slog.Logger) (bool, error) {
	secrets := cs.CoreV1().Secrets(ns)
	for try := 0; try < 3; try++ {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if !liveness.ValidKey(s.Data[liveness.KeyPrimary]) {
				log.Warn("heartbeat key Secret has no usable primary key; speakers keep their last key or stay unready",
					"secret", ns+"/"+name, "want", fmt.Sprintf("data[%q] of at least %d bytes", liveness.KeyPrimary, liveness.KeyMinLen))
			}
			return false, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("reading %s/%s: %w", ns, name, err)
		}
		key := make([]byte, liveness.KeyMinLen)
		if _, err := rand.Read(key); err != nil {
			return false, err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "ironlb"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{liveness.KeyPrimary: key},
		}, metav1.CreateOptions{})
		if err == nil {
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating %s/%s: %w", ns, name, err)
		}
		// Another replica created it first: read it back.
	}
	return false, fmt.Errorf("%s/%s: neither created nor read", ns, name)
}
