package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Seed 000, step 1: two whoami pods pinned to worker and worker2, curled from the control-plane node.
func TestSeedWebpods(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	out := kubectl(t, "get", "pod", "-o", "wide")
	t.Logf("kubectl get pod -owide:\n%s", out)
	for pod, node := range map[string]string{"webpod1": "myk8s-worker", "webpod2": "myk8s-worker2"} {
		if got := strings.TrimSpace(kubectl(t, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}")); got != node {
			t.Errorf("%s runs on %q, want %s", pod, got, node)
		}
		ip := podIP(t, pod)
		if !strings.HasPrefix(ip, "10.10.") {
			t.Errorf("%s has IP %q, want one from the pod CIDR 10.10.0.0/16", pod, ip)
		}
		body, err := curl("myk8s-control-plane", "http://"+ip)
		if err != nil {
			t.Fatalf("curl %s from myk8s-control-plane: %v", ip, err)
		}
		if got := hostnameOf(body); got != pod {
			t.Errorf("curl %s: Hostname %q, want %s\n%s", ip, got, pod, body)
		}
		if !strings.Contains(body, "RemoteAddr: 172.18.0.2:") {
			t.Errorf("curl %s from the control plane: want RemoteAddr 172.18.0.2 (no NAT on the pod path)\n%s", ip, body)
		}
	}
}

// A Deployment goes through the real ReplicaSet controller and scheduler.
func TestDeployment(t *testing.T) {
	kubectl(t, "create", "deployment", "web", "--image=traefik/whoami", "--replicas=3")
	t.Cleanup(func() { kubectl(t, "delete", "deployment", "web", "--wait=false") })
	kubectl(t, "rollout", "status", "deployment/web", "--timeout=60s")
	out := kubectl(t, "get", "pods", "-l", "app=web", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.spec.nodeName}{"\n"}{end}`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 web pods, got:\n%s", out)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[2] == "myk8s-control-plane" {
			t.Errorf("pod line %q: want name, IP and a worker node (the control plane is tainted)", l)
			continue
		}
		body, err := curl("myk8s-control-plane", "http://"+f[1])
		if err != nil || hostnameOf(body) != f[0] {
			t.Errorf("curl %s (%s): hostname %q err %v", f[1], f[0], hostnameOf(body), err)
		}
	}
}

// Seeds 002 and 004: ClusterIP and NodePort through the real kube-proxy in iptables mode.
func TestServicesThroughKubeProxy(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	kubectlApply(t, "testdata/services.yaml")
	clusterIP := strings.TrimSpace(kubectl(t, "get", "svc", "svc-clusterip", "-o", "jsonpath={.spec.clusterIP}"))
	nodePort := strings.TrimSpace(kubectl(t, "get", "svc", "svc-nodeport", "-o", "jsonpath={.spec.ports[0].nodePort}"))
	if !strings.HasPrefix(clusterIP, "10.200.1.") {
		t.Fatalf("ClusterIP %q is not from the service CIDR 10.200.1.0/24", clusterIP)
	}
	// ClusterIP from inside the cluster reaches both pods.
	eventually(t, 30*time.Second, "ClusterIP reaches both pods", func() error {
		seen := map[string]int{}
		for i := 0; i < 20; i++ {
			body, _ := curl("myk8s-control-plane", fmt.Sprintf("http://%s:9000", clusterIP))
			seen[hostnameOf(body)]++
		}
		if seen["webpod1"] == 0 || seen["webpod2"] == 0 {
			return fmt.Errorf("20 requests to %s:9000 reached %v", clusterIP, seen)
		}
		return nil
	})
	// 100 requests from mypc to NODE_IP:nodePort, as in seed 004; the loop runs inside mypc.
	script := fmt.Sprintf(`for i in $(seq 100); do curl -s --connect-timeout 1 --max-time 2 172.18.0.3:%s | grep Hostname; done | sort | uniq -c`, nodePort)
	var counts map[string]int
	eventually(t, 30*time.Second, "NodePort from mypc", func() error {
		out, err := labExec("mypc", "bash", "-c", script)
		if err != nil {
			return err
		}
		counts = parseCounts(out)
		if counts["webpod1"]+counts["webpod2"] != 100 {
			return fmt.Errorf("100 requests reached %v", counts)
		}
		return nil
	})
	t.Logf("100 requests from mypc to 172.18.0.3:%s: webpod1 %d, webpod2 %d", nodePort, counts["webpod1"], counts["webpod2"])
	for _, p := range []string{"webpod1", "webpod2"} {
		if counts[p] < 30 || counts[p] > 70 {
			t.Errorf("%s got %d of 100 requests, want 30-70 (random 0.5)", p, counts[p])
		}
	}
	// The nat table shows seed 004's chain walk: KUBE-SERVICES -> KUBE-SVC -> KUBE-SEP -> DNAT.
	nat, err := labExec("myk8s-worker", "iptables", "-t", "nat", "-S")
	if err != nil {
		t.Fatal(err)
	}
	svc := regexp.MustCompile(`-A KUBE-SERVICES -d ` + regexp.QuoteMeta(clusterIP) + `/32 .*--dport 9000 -j (KUBE-SVC-\w+)`).FindStringSubmatch(nat)
	if svc == nil {
		t.Fatalf("no KUBE-SERVICES rule for %s:9000 in\n%s", clusterIP, nat)
	}
	seps := regexp.MustCompile(`-A `+svc[1]+` .*-j (KUBE-SEP-\w+)`).FindAllStringSubmatch(nat, -1)
	if len(seps) != 2 || !strings.Contains(nat, "-A "+svc[1]+" ") || !strings.Contains(nat, "--probability 0.50000000000") {
		t.Fatalf("want %s to pick one of 2 KUBE-SEP chains with probability 0.5, got %v in\n%s", svc[1], seps, nat)
	}
	for _, sep := range seps {
		if !regexp.MustCompile(`-A ` + sep[1] + ` -p tcp .* -j DNAT --to-destination 10\.10\.\d+\.\d+:80`).MatchString(nat) {
			t.Errorf("%s does not DNAT to a pod on port 80", sep[1])
		}
	}
	if !strings.Contains(nat, "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS") {
		t.Errorf("KUBE-SERVICES does not end with the jump to KUBE-NODEPORTS")
	}
	if !regexp.MustCompile(`-A KUBE-NODEPORTS -p tcp .*--dport ` + nodePort + ` -j KUBE-EXT-\w+`).MatchString(nat) {
		t.Errorf("KUBE-NODEPORTS has no rule for node port %s", nodePort)
	}
}

func parseCounts(out string) map[string]int {
	counts := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[1] == "Hostname:" {
			n, _ := strconv.Atoi(f[0])
			counts[f[2]] = n
		}
	}
	return counts
}
