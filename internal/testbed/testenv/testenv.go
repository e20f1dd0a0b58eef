// Package testenv starts a real etcd and kube-apiserver on loopback for tests that need the API server's
// behaviour (admission, status subresources, CRD validation, resource versions), the way the lab starts
// them but without namespaces: both listen on 127.0.0.1 only. It needs the lab's Kubernetes binaries
// (hack/k8s-binaries.sh); tests call Start and skip when they are missing, unless IRONLB_E2E=1 demands them.
//
// testenv and its subpackages (frr, proc) are for tests only: testenv and frr import testing, which the
// ironlb binary must not link (cmd/ironlb's TestNoTesting). What a program needs (the benchmarks) is
// internal/testbed/apiserver, which Start wraps.
package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ironlb/ironlb/internal/testbed/apiserver"
)

// Env is a running API server.
type Env = apiserver.Env

// Start runs etcd and kube-apiserver for the test and stops them in t.Cleanup.
func Start(t testing.TB) *Env {
	t.Helper()
	bin := apiserver.BinDir()
	if _, err := os.Stat(filepath.Join(bin, "kube-apiserver")); err != nil {
		if os.Getenv("IRONLB_E2E") == "1" {
			t.Fatalf("kube-apiserver not found in %s (hack/k8s-binaries.sh builds it)", bin)
		}
		t.Skipf("kube-apiserver not found in %s; run hack/k8s-binaries.sh (make test does)", bin)
	}
	e, err := apiserver.Launch(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}
