// Package kube holds the small Kubernetes client helpers every role shares.
package kube

import (
	"fmt"

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
