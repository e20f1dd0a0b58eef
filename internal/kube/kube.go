// Package kube holds the small Kubernetes client helpers every role shares.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig loads a kubeconfig file, or the in-cluster configuration when path is empty, and sets the
// user agent and client-side rate limits.
func RESTConfig(path, userAgent string, qps float32, burst int) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if path != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.UserAgent, rc.QPS, rc.Burst = userAgent, qps, burst
	return rc, nil
}

// Clients returns a typed and a dynamic client for the configuration RESTConfig builds.
func Clients(path, userAgent string, qps float32, burst int) (kubernetes.Interface, dynamic.Interface, error) {
	rc, err := RESTConfig(path, userAgent, qps, burst)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return cs, dyn, nil
}

// Route is one more handler a metrics server serves, at Path (for example a role's /readyz).
type Route struct {
	Path    string
	Handler http.HandlerFunc
}

// ServeMetrics serves reg (plus Go and process collectors) on addr at /metrics over plain HTTP until
// ctx ends, to anyone who reaches addr (bind it to 127.0.0.1), and the routes given. An
// empty addr serves nothing. See ServeSecureMetrics.
func ServeMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger, routes ...Route) {
	_ = ServeSecureMetrics(ctx, addr, nil, reg, log, routes...)
}

// ServeSecureMetrics is ServeMetrics over HTTPS when auth is set: with a self-signed certificate,
// and /metrics only for clients auth lets through (a bearer token the apiserver authenticates and
// authorizes for get on /metrics). /healthz and /readyz (unless a route serves it) answer "ok" to
// anyone, unauthenticated, for the kubelet's probes (an HTTPS probe does not verify the
// certificate); the routes given are served unauthenticated too. It returns an error only when the
// certificate cannot be made; listening errors are logged.
func ServeSecureMetrics(ctx context.Context, addr string, auth *Authorizer, reg *prometheus.Registry, log *slog.Logger, routes ...Route) error {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if addr == "" {
		return nil
	}
	var metrics http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second}
	if auth != nil {
		metrics = auth.Wrap(metrics)
		tc, err := selfSignedTLS("ironlb-metrics")
		if err != nil {
			return fmt.Errorf("metrics server: %w", err)
		}
		srv.TLSConfig = tc
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	served := map[string]bool{}
	for _, r := range routes {
		mux.Handle(r.Path, r.Handler)
		served[r.Path] = true
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if !served[path] {
			mux.HandleFunc(path, ok)
		}
	}
	srv.Handler = mux
	go func() { <-ctx.Done(); srv.Close() }()
	go func() {
		var err error
		if srv.TLSConfig != nil {
			err = srv.ListenAndServeTLS("", "")
		} else {
			err = srv.ListenAndServe()
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "addr", addr, "err", err)
		}
	}()
	return nil
}
