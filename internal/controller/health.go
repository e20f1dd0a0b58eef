package controller

import (
	"errors"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection"

	"github.com/ironlb/ironlb/internal/kube"
)

// health is what the controller's /healthz and /readyz say (--health-probe-bind-address, plain HTTP
// for the kubelet). Run and the reconciler set it; the health server reads it: atomics only.
//
// Ready means this replica can do its part: the admission webhook's informers have synced and it
// listens (every replica serves the webhook, and readiness puts it behind the webhook's Service),
// and, on the replica that leads (every one without leader election), the reconciler's informers
// have synced and its initial load is done. A standby has no reconciler: it is ready once its webhook
// is. Live means the process answers and, leading, has renewed its lease (watchdog).
type health struct {
	webhook       bool        // the webhook is served: readiness waits for its informers
	webhookSynced atomic.Bool // its informers have synced and it listens
	leading       atomic.Bool // this replica runs the reconciler
	loaded        atomic.Bool // the reconciler's informers have synced and its initial load is done
	// watchdog fails liveness when this replica leads on a lease it has not renewed for its
	// duration plus watchdogTimeout (a stuck leader); nil without leader election.
	watchdog *leaderelection.HealthzAdaptor
}

// watchdogTimeout is how long past its lease a stuck leader stays live.
const watchdogTimeout = 20 * time.Second

func newHealth(cfg Config) *health {
	h := &health{webhook: cfg.WebhookAddr != ""}
	if cfg.LeaderElect {
		h.watchdog = leaderelection.NewLeaderHealthzAdaptor(watchdogTimeout)
	}
	return h
}

// Errors the readiness checks return.
var (
	errWebhookSyncing = errors.New("admission webhook: informers not synced or not listening yet")
	errLeaderLoading  = errors.New("leading: informers not synced or initial load under way")
)

func (h *health) readyChecks() []kube.Check {
	return []kube.Check{
		{Name: "webhook", Check: func() error {
			if h.webhook && !h.webhookSynced.Load() {
				return errWebhookSyncing
			}
			return nil
		}},
		{Name: "allocator", Check: func() error {
			if h.leading.Load() && !h.loaded.Load() {
				return errLeaderLoading
			}
			return nil
		}},
	}
}

func (h *health) liveChecks() []kube.Check {
	if h.watchdog == nil {
		return nil
	}
	return []kube.Check{{Name: "leader-election", Check: func() error { return h.watchdog.Check(nil) }}}
}

// startTerm and endTerm bracket a reconciler's run (a leader's term).
func (h *health) startTerm() { h.loaded.Store(false); h.leading.Store(true) }
func (h *health) endTerm()   { h.leading.Store(false); h.loaded.Store(false) }
