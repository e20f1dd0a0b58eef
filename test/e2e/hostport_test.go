package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// hostPort, DNATed by the node agent as the CNI portmap plugin does: a Pod's TCP and UDP hostPort
// reached at node:hostPort from mypc and from another node, and the agent's table gone with the last
// hostPort Pod. (A hostIP 127.0.0.1 hostPort is the upstream HostPort [Conformance] test's.)
func TestHostPort(t *testing.T) {
	kubectlApply(t, "testdata/hostport.yaml")
	t.Cleanup(func() { kubectl(t, "delete", "-f", "testdata/hostport.yaml", "--wait=false", "--ignore-not-found") })
	waitReady(t, "pod/hostport")
	node := strings.TrimSpace(kubectl(t, "get", "node", "myk8s-worker", "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`))
	if node == "" {
		t.Fatal("myk8s-worker has no InternalIP")
	}
	for _, from := range []string{"mypc", "myk8s-worker2"} {
		eventually(t, 10*time.Second, "TCP hostPort from "+from, func() error {
			body, err := curl(from, fmt.Sprintf("http://%s:18080/hostname", node))
			if err != nil || strings.TrimSpace(body) != "hostport" {
				return fmt.Errorf("http://%s:18080/hostname from %s: %q %v; want hostport", node, from, body, err)
			}
			return nil
		})
	}
	eventually(t, 10*time.Second, "UDP hostPort from mypc", func() error {
		out, err := runStdin("hostname\n", ironlb, "lab", "exec", "mypc", "--", "nc", "-u", "-w", "1", node, "18080")
		if err != nil || strings.TrimSpace(out) != "hostport" {
			return fmt.Errorf("udp %s:18080 from mypc: %q %v; want hostport", node, out, err)
		}
		return nil
	})
	if tables, err := labExec("myk8s-worker", "nft", "list", "table", "inet", "ironlb-lab-hostports"); err != nil || !strings.Contains(tables, "dport 18080") {
		t.Errorf("myk8s-worker's hostPort table: %q %v", tables, err)
	}

	kubectl(t, "delete", "-f", "testdata/hostport.yaml", "--wait=true", "--timeout=60s")
	eventually(t, 20*time.Second, "the hostPort table removed with its Pods", func() error {
		if out, err := labExec("myk8s-worker", "nft", "list", "tables"); err != nil || strings.Contains(out, "ironlb-lab-hostports") {
			return fmt.Errorf("tables on myk8s-worker: %q %v", out, err)
		}
		return nil
	})
	if body, err := curl("mypc", fmt.Sprintf("http://%s:18080/hostname", node)); err == nil {
		t.Errorf("hostPort still answers after its Pod is gone: %q", body)
	}
}
