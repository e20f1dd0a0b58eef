package speaker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
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
	if h.wait(ctx, time.Millisecond, nil) || len(sink.calls) != 0 {
		t.Fatalf("ready with an invalid key: calls %q", sink.calls)
	}
	h.set(secret("someone-else", map[string]string{"primary": k1}))
	h.set(secret(DefaultHeartbeatKeySecret, map[string]string{"primary": k1}))
	h.set(secret(DefaultHeartbeatKeySecret, map[string]string{"primary": k1})) // unchanged: not set again
	if !h.wait(context.Background(), time.Second, nil) {
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

// TestHeartbeatKeyMissing: until a valid key is set, missing names the Secret and why (not read yet,
// missing once the informer has listed it, invalid), wait reports it, and /readyz says it instead of
// "listening"; once a key is set the speaker is past it, and a later broken Secret keeps it so.
func TestHeartbeatKeyMissing(t *testing.T) {
	const secret = testNS + "/" + DefaultHeartbeatKeySecret
	synced := false
	h := newHeartbeatKeys(testNS, DefaultHeartbeatKeySecret, &recordingSink{}, slog.New(slog.DiscardHandler))
	h.synced = func() bool { return synced }
	e := newOwnerEnv(t, true, Config{})
	e.s.keys = h
	e.s.mu.Lock()
	e.s.ready = false // Run sets it only after the key and the listening
	e.s.mu.Unlock()
	check := func(step, want string) {
		t.Helper()
		if got := h.missing(); got != want {
			t.Errorf("%s: missing() = %q, want %q", step, got, want)
		}
		code, body := e.readyz(t)
		if want == "" {
			if !strings.Contains(body, "listening") {
				t.Errorf("%s: /readyz %d %q, want 503 listening", step, code, body)
			}
			return
		}
		if code != http.StatusServiceUnavailable || strings.TrimSpace(body) != want {
			t.Errorf("%s: /readyz %d %q, want 503 %q", step, code, body, want)
		}
	}
	check("before the informer listed it", "no heartbeat key: Secret "+secret+" not read yet (missing, or the speaker may not read it: check its RBAC)")
	synced = true
	check("listed, absent", "no heartbeat key: Secret "+secret+" is missing (the controller creates it)")

	var reports []string
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if h.wait(ctx, time.Millisecond, func(why string) { reports = append(reports, why) }) {
		t.Fatal("wait: a key, want none")
	}
	if len(reports) == 0 || reports[0] != "no heartbeat key: Secret "+secret+" is missing (the controller creates it)" {
		t.Errorf("wait reported %q, want the missing Secret", reports)
	}

	h.set(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultHeartbeatKeySecret, Namespace: testNS}, Data: map[string][]byte{"primary": []byte("short")}})
	check("invalid", "no heartbeat key: Secret "+secret+` is invalid (no primary key: data["primary"] has 5 bytes, want at least 32)`)
	h.set(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultHeartbeatKeySecret, Namespace: testNS},
		Data: map[string][]byte{"primary": []byte("0123456789abcdef0123456789abcdef")}})
	check("valid", "")
	h.set(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultHeartbeatKeySecret, Namespace: testNS}})
	check("broken after a valid key (kept)", "")
}
