package apiserver

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A port taken between its pick and etcd's bind (here: held by the test, handed out as etcd's client
// port) makes the first attempt fail with "address already in use"; Launch starts again on other
// ports and succeeds.
func TestLaunchRetriesATakenPort(t *testing.T) {
	bin := BinDir()
	if _, err := os.Stat(filepath.Join(bin, "kube-apiserver")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Kubernetes binaries in %s (hack/k8s-binaries.sh)", bin)
		}
		t.Skipf("no Kubernetes binaries in %s (hack/k8s-binaries.sh)", bin)
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port
	picks := 0
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return taken, nil
		}
		return freePort()
	}
	defer func() { pickPort = freePort }()
	e, err := Launch(bin, t.TempDir())
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	defer e.Stop()
	if picks != 6 {
		t.Errorf("%d ports picked, want 6 (two attempts of three)", picks)
	}
	if out, err := e.Kubectl("get", "--raw", "/readyz"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}
