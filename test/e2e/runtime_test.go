package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What the node agent gives a container, checked from outside (env through whoami's ?env=true, files
// through an exec readiness probe, capabilities through /proc) — and an image the lab cannot run.
func TestContainerRuntime(t *testing.T) {
	kubectlApply(t, "testdata/runtime.yaml")
	t.Cleanup(func() { kubectl(t, "delete", "-f", "testdata/runtime.yaml", "--wait=false", "--ignore-not-found") })
	waitReady(t, "pod/runtime") // the exec probe passes only if every volume is in place
	ip := podIP(t, "runtime")
	node := strings.TrimSpace(kubectl(t, "get", "pod", "runtime", "-o", "jsonpath={.spec.nodeName}"))
	body, err := curl("myk8s-control-plane", fmt.Sprintf("http://%s:8080/?env=true", ip))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Name: hello-" + node, // args with $(VAR) from a configMapKeyRef and a fieldRef
		"Hostname: runtime",
		"PORT=8080",
		"MY_NODE=" + node,
		"MY_POD_IP=" + ip,
		"GREETING=hello",
		"PASSWORD=s3cret",
		"COMBINED=hello@" + ip + " $(LITERAL)",
		"KUBERNETES_SERVICE_HOST=10.200.1.1",
		"KUBERNETES_SERVICE_PORT=443",
		"HOSTNAME=runtime",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("whoami output lacks %q:\n%s", want, body)
		}
	}
	// The httpGet liveness probe on the named port "http" passes: no restarts.
	time.Sleep(5 * time.Second) // two liveness periods
	if rc := kubectl(t, "get", "pod", "runtime", "-o", "jsonpath={.status.containerStatuses[0].restartCount}"); rc != "0" {
		t.Errorf("runtime pod restarted %s times: its liveness probe failed", rc)
	}
	// Capabilities: drop ALL, add NET_BIND_SERVICE -> the bounding set is exactly bit 10.
	uid := strings.TrimSpace(kubectl(t, "get", "pod", "runtime", "-o", "jsonpath={.metadata.uid}"))
	procs, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/ironlb-lab-myk8s/%s/pods/%s/whoami-*/cgroup.procs", node, uid))
	procs2, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/ironlb-lab-myk8s/%s/pods/%s/whoami-*/cgroup.procs", node, uid))
	procs = append(procs, procs2...)
	if len(procs) == 0 {
		t.Fatalf("no cgroup for the runtime pod's container")
	}
	pid, _ := os.ReadFile(procs[0])
	status, err := os.ReadFile("/proc/" + strings.Fields(string(pid))[0] + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "CapBnd:\t0000000000000400") {
		t.Errorf("container capability bounding set: want only NET_BIND_SERVICE (0x400)\n%s", status)
	}
	// An image the lab cannot map waits in ErrImagePull with a clear message, and the agent carries on.
	eventually(t, 30*time.Second, "no-such-image waits in ErrImagePull", func() error {
		out := kubectl(t, "get", "pod", "no-such-image", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.reason} {.status.containerStatuses[0].state.waiting.message}")
		if !strings.HasPrefix(out, "ErrImagePull ") || !strings.Contains(out, "redis:7.4") {
			return fmt.Errorf("state: %q", out)
		}
		return nil
	})
	events := kubectl(t, "get", "events", "--field-selector", "involvedObject.name=no-such-image", "-o", "jsonpath={.items[*].reason}")
	if !strings.Contains(events, "Failed") {
		t.Errorf("no Failed event for no-such-image (events: %s)", events)
	}
	// Deleting a pod removes its processes and namespace.
	ns := "myk8s-" + strings.TrimPrefix(node, "myk8s-") + "-p-" + strings.ReplaceAll(uid, "-", "")[:8]
	if _, err := os.Stat("/run/netns/" + ns); err != nil {
		t.Fatalf("pod namespace %s missing while the pod runs: %v", ns, err)
	}
	kubectl(t, "delete", "pod", "runtime", "--timeout=60s")
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		t.Errorf("pod namespace %s still exists after the pod was deleted", ns)
	}
	for _, p := range procs {
		if _, err := os.Stat(filepath.Dir(p)); err == nil {
			t.Errorf("container cgroup %s still exists after the pod was deleted", filepath.Dir(p))
		}
	}
}
