package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/tools/cache"
)

// Check is one condition of a health endpoint: Check returns nil when it holds, else why not.
type Check struct {
	Name  string
	Check func() error
}

// InformersSynced is a readiness check that holds once every informer has synced (listed its
// objects once); before, it names how many of them have not.
func InformersSynced(synced ...cache.InformerSynced) Check {
	return Check{Name: "informers", Check: func() error {
		n := 0
		for _, s := range synced {
			if !s() {
				n++
			}
		}
		if n > 0 {
			return fmt.Errorf("%d of %d informers not synced", n, len(synced))
		}
		return nil
	}}
}

// HealthHandler serves /healthz and /livez (liveness: every check of live holds) and /readyz
// (readiness: every check of ready holds) as Kubernetes' components do: 200 "ok" when they all hold;
// 503 otherwise, one line per check ("[+]name ok", "[-]name failed: reason"). With ?verbose the
// lines are written on success too. A nil or empty list always holds. No authentication: the
// answers carry no secret, and the kubelet probes them.
func HealthHandler(live, ready []Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", checksHandler(live))
	mux.Handle("/livez", checksHandler(live))
	mux.Handle("/readyz", checksHandler(ready))
	return mux
}

func checksHandler(checks []Check) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		failed := false
		for _, c := range checks {
			if err := c.Check(); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %v\n", c.Name, err)
			} else {
				fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		switch {
		case failed:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, b.String())
			fmt.Fprintf(w, "%s check failed\n", strings.TrimPrefix(r.URL.Path, "/"))
		case r.URL.Query().Has("verbose"):
			fmt.Fprint(w, b.String())
			fmt.Fprintf(w, "%s check passed\n", strings.TrimPrefix(r.URL.Path, "/"))
		default:
			fmt.Fprint(w, "ok")
		}
	}
}

// ServeHealth serves h on addr over plain HTTP until ctx ends, for the kubelet's probes (a role's
// --health-probe-bind-address); an empty addr serves nothing. It returns once listening: an error
// when addr cannot be listened on; later serving errors are logged.
func ServeHealth(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("health probe server: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health probe server", "addr", addr, "err", err)
		}
	}()
	return nil
}
