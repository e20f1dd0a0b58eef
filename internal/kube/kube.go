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

// ServeMetrics serves reg (plus Go and process collectors) on addr at /metrics, and the routes given,
// until ctx ends. An empty addr serves nothing.
func ServeMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger, routes ...Route) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for _, r := range routes {
		mux.Handle(r.Path, r.Handler)
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "addr", addr, "err", err)
		}
	}()
}
