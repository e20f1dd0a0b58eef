package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// serviceSuite is the lab's Service suite, written against behaviour only (no rule dumps), so that it
// runs unchanged on every dataplane: kube-proxy in iptables mode (the shared lab), kube-proxy in
// nftables mode and ironlb's proxy (labs of their own, in zz_lifecycle_test.go). Seeds 001, 002 and
// 004: ClusterIP, NodePort, LoadBalancer, externalTrafficPolicy Local, session affinity, and a Service
// without endpoints.
func serviceSuite(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	kubectlApply(t, "testdata/services.yaml")
	kubectlApply(t, "testdata/seed000-metallb.yaml")
	t.Cleanup(func() {
		kubectl(t, "delete", "-f", "testdata/services.yaml", "--ignore-not-found")
		kubectl(t, "delete", "svc", "suite-local", "suite-affinity", "suite-empty", "--ignore-not-found")
	})
	clusterIP := strings.TrimSpace(kubectl(t, "get", "svc", "svc-clusterip", "-o", "jsonpath={.spec.clusterIP}"))
	nodePort := strings.TrimSpace(kubectl(t, "get", "svc", "svc-nodeport", "-o", "jsonpath={.spec.ports[0].nodePort}"))

	t.Run("ClusterIP", func(t *testing.T) {
		eventually(t, 30*time.Second, "ClusterIP from a node reaches both pods", func() error {
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
	})
	t.Run("NodePort", func(t *testing.T) {
		script := fmt.Sprintf(`for i in $(seq 100); do curl -s --connect-timeout 1 --max-time 2 172.18.0.5:%s | grep Hostname; done | sort | uniq -c`, nodePort)
		var counts map[string]int
		eventually(t, 30*time.Second, "NodePort on a node without pods, from mypc", func() error {
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
		for _, p := range []string{"webpod1", "webpod2"} {
			if counts[p] < 30 || counts[p] > 70 {
				t.Errorf("%s got %d of 100 requests, want 30-70 (random, equal probability)", p, counts[p])
			}
		}
	})
	t.Run("LoadBalancer", func(t *testing.T) {
		ip := addrRankedFirst(t, "myk8s-worker3")
		applyService(t, "suite-lb", ip, nil, "")
		seen := map[string]int{}
		for i := 0; i < 40; i++ {
			body, err := curl("mypc", "http://"+ip)
			if err != nil {
				t.Fatalf("request %d to %s: %v", i, ip, err)
			}
			seen[hostnameOf(body)]++
			if ra := remoteAddr(body); ra == "172.18.0.100" {
				t.Fatalf("externalTrafficPolicy Cluster: the pod saw the client's address %s, want the node's (masquerade)", ra)
			}
		}
		if seen["webpod1"] == 0 || seen["webpod2"] == 0 {
			t.Errorf("40 requests to %s reached %v", ip, seen)
		}
	})
	t.Run("ExternalTrafficPolicyLocal", func(t *testing.T) {
		ip := addrRankedFirst(t, "myk8s-worker", addrRankedFirst(t, "myk8s-worker3"))
		applyService(t, "suite-local", ip, nil, "  externalTrafficPolicy: Local\n")
		for i := 0; i < 10; i++ {
			body, err := curl("mypc", "http://"+ip)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if h := hostnameOf(body); h != "webpod1" {
				t.Errorf("Local: request reached %s, want only the announcing node's pod webpod1", h)
			}
			if ra := remoteAddr(body); ra != "172.18.0.100" {
				t.Errorf("Local: the pod saw %s, want the client's own address 172.18.0.100", ra)
			}
		}
		hc := strings.TrimSpace(kubectl(t, "get", "svc", "suite-local", "-o", "jsonpath={.spec.healthCheckNodePort}"))
		for node, want := range map[string]string{"172.18.0.3": "200", "172.18.0.5": "503"} {
			code, _ := labExec("mypc", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", "http://"+node+":"+hc+"/healthz")
			if code != want {
				t.Errorf("healthCheckNodePort on %s answered %q, want %s", node, code, want)
			}
		}
	})
	t.Run("SessionAffinity", func(t *testing.T) {
		y := "apiVersion: v1\nkind: Service\nmetadata: {name: suite-affinity}\nspec:\n  selector: {app: webpod}\n  sessionAffinity: ClientIP\n  ports: [{port: 9001, targetPort: 80}]\n"
		if out, err := runStdin(y, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		ip := strings.TrimSpace(kubectl(t, "get", "svc", "suite-affinity", "-o", "jsonpath={.spec.clusterIP}"))
		var first string
		eventually(t, 30*time.Second, "affinity Service answers", func() error {
			body, err := curl("myk8s-control-plane", "http://"+ip+":9001")
			first = hostnameOf(body)
			return err
		})
		for i := 0; i < 15; i++ {
			body, _ := curl("myk8s-control-plane", "http://"+ip+":9001")
			if h := hostnameOf(body); h != first {
				t.Fatalf("sessionAffinity ClientIP: request %d reached %s after %s", i, h, first)
			}
		}
	})
	t.Run("NoEndpoints", func(t *testing.T) {
		y := "apiVersion: v1\nkind: Service\nmetadata: {name: suite-empty}\nspec:\n  selector: {app: nothing-has-this}\n  ports: [{port: 9002, targetPort: 80}]\n"
		if out, err := runStdin(y, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		ip := strings.TrimSpace(kubectl(t, "get", "svc", "suite-empty", "-o", "jsonpath={.spec.clusterIP}"))
		// Rejected at once (ICMP port unreachable: curl exit 7, "couldn't connect"), not left to time out.
		eventually(t, 30*time.Second, "a Service without endpoints rejects", func() error {
			start := time.Now()
			_, err := labExec("myk8s-control-plane", "curl", "-s", "--connect-timeout", "3", "http://"+ip+":9002")
			if err == nil || !strings.Contains(err.Error(), "exit status 7") || time.Since(start) > 2*time.Second {
				return fmt.Errorf("curl: %v after %s, want exit 7 at once", err, time.Since(start))
			}
			return nil
		})
	})
}

// TestServiceSuite runs the suite on the shared lab: kube-proxy in iptables mode, as in the seeds.
func TestServiceSuite(t *testing.T) { serviceSuite(t) }
