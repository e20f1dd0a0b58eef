// Package healthcheck answers the HTTP health checks kube-proxy answers, in kube-proxy's format,
// so load balancers and probes written for it work unchanged:
//
//   - the proxy's own health on --healthz-bind-address (default :10256): /healthz and /livez
//     (ProxyHealth), 200 while changes are applied within the timeout, 503 otherwise;
//   - one listener per Service with externalTrafficPolicy Local on its healthCheckNodePort
//     (Services), 200 while the node has ready local endpoints, 503 otherwise.
//
// The state lives behind a mutex and is updated by the proxy's sync loop; the HTTP servers only
// read it.
package healthcheck

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ProxyHealth tracks whether the proxy applies changes in time (kube-proxy's ProxyHealthServer).
// It is healthy unless a change has waited for a sync longer than the timeout. Safe for
// concurrent use.
type ProxyHealth struct {
	timeout time.Duration
	now     func() time.Time

	mu            sync.Mutex // guards the following fields
	lastUpdated   time.Time  // end of the last successful sync
	oldestPending time.Time  // first change not yet applied; zero if none
	lastQueued    time.Time
	ineligible    bool // the node is being deleted (see convert.NodeEligible)
}

// NewProxyHealth returns a tracker with the given timeout; now is the clock (nil: time.Now). It
// starts with nothing pending, so it is healthy until the first change waits too long.
func NewProxyHealth(timeout time.Duration, now func() time.Time) *ProxyHealth {
	if now == nil {
		now = time.Now
	}
	return &ProxyHealth{timeout: timeout, now: now}
}

// Queued records that a change waits for a sync.
func (h *ProxyHealth) Queued() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if h.oldestPending.IsZero() {
		h.oldestPending = now
	}
	h.lastQueued = now
}

// Updated records a successful sync that started at start: changes queued before it are
// applied; those queued during it are still pending (since start, at the latest).
func (h *ProxyHealth) Updated(start time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastUpdated = h.now()
	if h.lastQueued.After(start) {
		h.oldestPending = start
	} else {
		h.oldestPending = time.Time{}
	}
}

// SetNodeEligible records whether the node should get traffic (/healthz only).
func (h *ProxyHealth) SetNodeEligible(ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ineligible = !ok
}

// Healthy reports whether no change has waited longer than the timeout.
func (h *ProxyHealth) Healthy() bool {
	ok, _, _, _ := h.state()
	return ok
}

func (h *ProxyHealth) state() (healthy bool, lastUpdated, now time.Time, eligible bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now = h.now()
	healthy = h.oldestPending.IsZero() || now.Sub(h.oldestPending) < h.timeout
	return healthy, h.lastUpdated, now, !h.ineligible
}

// Handler serves /healthz (healthy and the node eligible) and /livez (healthy) with
// kube-proxy's JSON bodies.
func (h *ProxyHealth) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		healthy, last, now, eligible := h.state()
		writeHeader(w, healthy && eligible)
		fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q, "nodeEligible": %v}`, last, now, eligible)
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		healthy, last, now, _ := h.state()
		writeHeader(w, healthy)
		fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q}`, last, now)
	})
	return mux
}

func writeHeader(w http.ResponseWriter, ok bool) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if ok {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}
