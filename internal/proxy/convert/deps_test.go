package convert

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the converter pure: API types and nftrules only: no client-go, no
// kernel access (nftrules' knftables types come with os/exec, which nftrules never calls).
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(dep, "k8s.io/client-go"), strings.HasPrefix(dep, "github.com/google/nftables"),
			strings.HasPrefix(dep, "golang.org/x/sys/unix"), strings.HasPrefix(dep, "github.com/prometheus/"):
			t.Errorf("convert depends on %s", dep)
		}
	}
}
