package speaker

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/ironlb/ironlb/internal/kube"
)

// TestProbeState checks the speaker's /readyz on --health-probe-bind-address: not ready while Run
// is starting (before the informers exist), nor while they sync, nor before the speaker itself is
// ready; ready after; /healthz answers throughout.
func TestProbeState(t *testing.T) {
	var p probeState
	h := kube.HealthHandler(nil, p.checks())
	get := func(path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w.Code, w.Body.String()
	}
	step := func(name string, want int, wantBody string) {
		t.Helper()
		if code, body := get("/readyz"); code != want || body != wantBody {
			t.Errorf("%s: /readyz %d %q, want %d %q", name, code, body, want, wantBody)
		}
		if code, _ := get("/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz %d, want 200", name, code)
		}
	}
	step("starting", 503, "[-]informers failed: starting\n[-]speaker failed: starting\nreadyz check failed\n")

	e := newOwnerEnv(t, true, Config{})
	synced := false
	e.s.ready = false // as Run builds it: not ready until it has listened to its peers
	p.set([]cache.InformerSynced{func() bool { return true }, func() bool { return synced }}, e.s)
	step("syncing", 503, "[-]informers failed: 1 of 2 informers not synced\n[-]speaker failed: listening to peers before the first election\nreadyz check failed\n")
	synced = true
	step("listening", 503, "[+]informers ok\n[-]speaker failed: listening to peers before the first election\nreadyz check failed\n")
	e.s.setReady()
	step("ready", 200, "ok")
}
