package speaker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recordingSink records the keys it is given.
type recordingSink struct{ calls [][2]string }

func (r *recordingSink) SetKeys(p, s []byte) bool {
	r.calls = append(r.calls, [2]string{string(p), string(s)})
	return len(p) > 0
}

// TestHeartbeatKeys: a valid Secret gives the keys (and readiness); a rotation is taken live; an
// invalid or deleted Secret leaves the last keys in place; a short secondary is ignored.
func TestHeartbeatKeys(t *testing.T) {
	k1, k2 := "0123456789abcdef0123456789abcdef", "ZYXWVUTSRQPONMLKJIHGFEDCBA987654"
	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	sink := &recordingSink{}
	h := newHeartbeatKeys(testNS, DefaultHeartbeatKeySecret, sink, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	h.set(secret(DefaultHeartbeatKeySecret, map[string]string{"primary": "short"}))
	if h.wait(ctx, time.Millisecond) || len(sink.calls) != 0 {
		t.Fatalf("ready with an invalid key: calls %q", sink.calls)
	}
	h.set(secret("someone-else", map[string]string{"primary": k1}))
	h.set(secret(DefaultHeartbeatKeySecret, map[string]string{"primary": k1}))
	h.set(secret(DefaultHeartbeatKeySecret, map[string]string{"primary": k1})) // unchanged: not set again
	if !h.wait(context.Background(), time.Second) {
		t.Fatal("not ready with a valid key")
	}
	h.set(secret(DefaultHeartbeatKeySecret, map[string]string{"primary": k2, "secondary": k1}))     // rotation
	h.set(secret(DefaultHeartbeatKeySecret, map[string]string{"secondary": k1}))                    // broken: kept
	h.set(secret(DefaultHeartbeatKeySecret, map[string]string{"primary": k2, "secondary": "tiny"})) // short secondary
	want := [][2]string{{k1, ""}, {k2, k1}, {k2, ""}}
	if len(sink.calls) != len(want) {
		t.Fatalf("keys set %q, want %q", sink.calls, want)
	}
	for i := range want {
		if sink.calls[i] != want[i] {
			t.Errorf("call %d: %q, want %q", i, sink.calls[i], want[i])
		}
	}
	if _, _, _, err := keysOf(secret("x", nil)); !errors.Is(err, errNoPrimary) {
		t.Errorf("keysOf(empty) = %v, want errNoPrimary", err)
	}
}
