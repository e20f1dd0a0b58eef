package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// TestKubeletAPI: kubectl exec, logs (-f) and port-forward work in the lab as in kind, through the
// apiserver and the node agent's kubelet API (docs/lab-kubelet.md); the kubelet API refuses a client
// without the apiserver's client certificate.
func TestKubeletAPI(t *testing.T) {
	kubectlApply(t, "testdata/kubeletapi.yaml")
	t.Cleanup(func() { kubectl(t, "delete", "-f", "testdata/kubeletapi.yaml", "--wait=false", "--ignore-not-found") })
	waitReady(t, "pod/kubelet-api")
	kubectlBin := labKubectl(t)

	t.Run("exec", func(t *testing.T) {
		if out := kubectl(t, "exec", "-c", "tools", "kubelet-api", "--", "cat", "/etc/hostname"); out != "kubelet-api\n" {
			t.Errorf("cat /etc/hostname = %q, want the pod's name", out)
		}
		if out := kubectl(t, "exec", "-c", "tools", "kubelet-api", "--", "sh", "-c", "hostname; echo $GREETING"); out != "kubelet-api\nhello from the pod\n" {
			t.Errorf("hostname and env = %q", out)
		}
		// the container's network namespace: its eth0 has the pod's IP
		ip := podIP(t, "kubelet-api")
		if out := kubectl(t, "exec", "-c", "tools", "kubelet-api", "--", "ip", "-o", "-4", "addr", "show", "eth0"); !strings.Contains(out, " "+ip+"/") {
			t.Errorf("eth0 in the exec = %q, want the pod IP %s", out, ip)
		}
		out, err := runErr(ironlb, "lab", "kubectl", "exec", "-c", "tools", "kubelet-api", "--", "sh", "-c", "exit 3")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("kubectl exec sh -c 'exit 3': %v (%q), want exit status 3", err, out)
		}
		if out, err := runStdin("shout\n", ironlb, "lab", "kubectl", "exec", "-i", "-c", "tools", "kubelet-api", "--", "tr", "a-z", "A-Z"); err != nil || out != "SHOUT\n" {
			t.Errorf("kubectl exec -i with stdin: %q, %v", out, err)
		}
		// a figure, not a check: how long one `kubectl exec -- true` takes end to end (kubectl start included)
		var times []time.Duration
		for range 5 {
			t0 := time.Now()
			kubectl(t, "exec", "-c", "tools", "kubelet-api", "--", "true")
			times = append(times, time.Since(t0))
		}
		slices.Sort(times)
		t.Logf("kubectl exec -- true: median %s, min %s, max %s (5 runs)", times[2], times[0], times[4])
	})

	t.Run("logs", func(t *testing.T) {
		if out := kubectl(t, "logs", "kubelet-api"); !strings.Contains(out, "Starting up on port 8080") {
			t.Errorf("kubectl logs = %q, want whoami's start line", out)
		}
		out := kubectl(t, "logs", "kubelet-api", "--timestamps", "--tail=1")
		ts, _, _ := strings.Cut(out, " ")
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || strings.Count(out, "\n") != 1 {
			t.Errorf("kubectl logs --timestamps --tail=1 = %q: want one line with an RFC 3339 time", out)
		}
		// -f: a request's access line shows up while kubectl follows
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		follow := exec.CommandContext(ctx, kubectlBin, "--kubeconfig", filepath.Join(stateDir, "kubeconfig"), "logs", "-f", "kubelet-api")
		stdout, err := follow.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }()
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		ip := podIP(t, "kubelet-api")
		deadline := time.After(30 * time.Second)
		for seen := false; !seen; {
			// keep asking: kubectl may attach after the first request
			if _, err := curl("myk8s-control-plane", fmt.Sprintf("http://%s:8080/follow-me", ip)); err != nil {
				t.Logf("curl: %v", err)
			}
			wait := time.After(time.Second)
		drain:
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("kubectl logs -f ended early: %v", follow.Wait())
					}
					if strings.Contains(l, "GET /follow-me") {
						seen = true
					}
				case <-wait:
					break drain
				case <-deadline:
					t.Fatal("kubectl logs -f did not show the request's access line")
				}
			}
		}
	})

	t.Run("port-forward", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pf := exec.CommandContext(ctx, kubectlBin, "--kubeconfig", filepath.Join(stateDir, "kubeconfig"),
			"port-forward", "pod/kubelet-api", ":8080")
		stdout, err := pf.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = pf.Process.Signal(syscall.SIGTERM); _ = pf.Wait() }()
		port := make(chan string, 1)
		go func() {
			re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					port <- m[1]
				}
			}
			_, _ = io.Copy(io.Discard, stdout)
		}()
		var local string
		select {
		case local = <-port:
		case <-ctx.Done():
			t.Fatal("kubectl port-forward did not start forwarding")
		}
		// curl on the host's loopback reaches the pod through apiserver and kubelet API
		for i := range 2 {
			out, err := runErr("curl", "-s", "--max-time", "10", fmt.Sprintf("http://127.0.0.1:%s/pf-%d", local, i))
			if err != nil || !strings.Contains(out, "Hostname: kubelet-api") || !strings.Contains(out, fmt.Sprintf("GET /pf-%d ", i)) {
				t.Errorf("curl through kubectl port-forward: %v\n%s", err, out)
			}
		}
	})

	t.Run("refuses clients without the apiserver's certificate", func(t *testing.T) {
		node := strings.TrimSpace(kubectl(t, "get", "pod", "kubelet-api", "-o", "jsonpath={.spec.nodeName}"))
		url := fmt.Sprintf("https://%s:10250/pods", nodeAddr[node])
		out, _ := labExec("myk8s-control-plane", "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", url)
		if out != "401" {
			t.Errorf("GET %s without a client certificate: HTTP %q, want 401", url, out)
		}
	})
}

// labKubectl is the lab's kubectl (from the Kubernetes binaries the lab runs), for commands that run in
// the background and must be stopped by signal.
func labKubectl(t *testing.T) string {
	t.Helper()
	p, err := lab.State{Dir: stateDir}.ReadPlan()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(p.Config.K8sBin, "kubectl")
}
