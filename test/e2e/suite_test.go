package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/bench/nodeloss"
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

// algorithmSuite checks ironlb proxy's balancing algorithms (annotation ironlb.io/load-balancing) over
// four endpoints: random within statistical bounds, round-robin exact, and Maglev consistent hashing
// stable per client and moving only about the removed endpoint's share of clients.
func algorithmSuite(t *testing.T) {
	var pods strings.Builder
	nodes := []string{"myk8s-worker", "myk8s-worker2", "myk8s-worker3", "myk8s-worker"}
	for i, n := range nodes {
		fmt.Fprintf(&pods, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: algo-%d, labels: {app: algo}}\nspec:\n  nodeName: %s\n  terminationGracePeriodSeconds: 0\n  containers: [{name: whoami, image: traefik/whoami}]\n", i+1, n)
	}
	ip := addrRankedFirst(t, "myk8s-worker2")
	svcs := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: algo-random}
spec: {selector: {app: algo}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: algo-rr, annotations: {ironlb.io/load-balancing: round-robin}}
spec: {selector: {app: algo}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: algo-maglev, annotations: {ironlb.io/load-balancing: maglev, metallb.io/loadBalancerIPs: "%s"}}
spec: {type: LoadBalancer, selector: {app: algo}, ports: [{port: 80}]}
`, ip)
	if out, err := runStdin(pods.String()+"---\n"+svcs, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = runStdin(pods.String()+"---\n"+svcs, ironlb, "lab", "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
	waitReady(t, "pod/algo-1", "pod/algo-2", "pod/algo-3", "pod/algo-4")

	count := func(svc string) map[string]int {
		t.Helper()
		cip := strings.TrimSpace(kubectl(t, "get", "svc", svc, "-o", "jsonpath={.spec.clusterIP}"))
		// n requests in one curl (a URL range), each on a new connection (Connection: close).
		requests := func(n int) (map[string]int, int, error) {
			out, err := labExec("myk8s-control-plane", "bash", "-c",
				fmt.Sprintf(`curl -s --max-time 60 -H 'Connection: close' 'http://%s/?[1-%d]' | grep Hostname | sort | uniq -c`, cip, n))
			counts := parseCounts(out)
			total := 0
			for _, c := range counts {
				total += c
			}
			return counts, total, err
		}
		// Every pod answers before the 1000 are counted: a run while the pods turn ready one by one
		// mixes two distributions (seen in CI: 372, 382, 114, 132 when half the requests came before
		// two of the four were ready).
		eventually(t, 30*time.Second, svc+": every endpoint answers", func() error {
			counts, total, err := requests(100)
			if err != nil || total != 100 || len(counts) != 4 {
				return fmt.Errorf("100 requests to %s reached %v (%v)", svc, counts, err)
			}
			return nil
		})
		counts, total, err := requests(1000)
		if err != nil || total != 1000 || len(counts) != 4 {
			t.Fatalf("1000 requests to %s reached %v (%v)", svc, counts, err)
		}
		return counts
	}
	t.Run("Random", func(t *testing.T) {
		c := count("algo-random")
		t.Logf("random: %v", c)
		for p, n := range c { // 250 ± 4σ, σ = √(1000 · ¼ · ¾) ≈ 13.7
			if n < 195 || n > 305 {
				t.Errorf("random: %s got %d of 1000, outside 250 ± 55", p, n)
			}
		}
	})
	t.Run("RoundRobin", func(t *testing.T) {
		c := count("algo-rr")
		t.Logf("round-robin: %v", c)
		for p, n := range c {
			if n != 250 {
				t.Errorf("round-robin: %s got %d of 1000, want exactly 250", p, n)
			}
		}
	})
	t.Run("Maglev", func(t *testing.T) {
		// 40 clients: extra addresses on mypc, each request bound to one of them.
		var clients []string
		for i := 1; i <= 40; i++ {
			a := fmt.Sprintf("172.18.1.%d", i)
			if _, err := labExec("mypc", "ip", "addr", "add", a+"/16", "dev", "eth0"); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, a)
		}
		t.Cleanup(func() {
			for _, a := range clients {
				_, _ = labExec("mypc", "ip", "addr", "del", a+"/16", "dev", "eth0")
			}
		})
		pick := func() map[string]string {
			t.Helper()
			var script strings.Builder
			for _, a := range clients {
				fmt.Fprintf(&script, "echo %s $(curl -s --max-time 2 --interface %s http://%s/ | grep Hostname)\n", a, a, ip)
			}
			out, err := labExec("mypc", "bash", "-c", script.String())
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if f := strings.Fields(l); len(f) == 3 {
					m[f[0]] = f[2]
				}
			}
			return m
		}
		eventually(t, 30*time.Second, "the maglev Service answers every client", func() error {
			if m := pick(); len(m) != len(clients) {
				return fmt.Errorf("answers %d of %d", len(m), len(clients))
			}
			return nil
		})
		first, second := pick(), pick()
		for _, a := range clients {
			if first[a] != second[a] {
				t.Errorf("maglev: client %s went to %s, then %s", a, first[a], second[a])
			}
		}
		kubectl(t, "delete", "pod", "algo-4", "--wait=true")
		var after map[string]string
		eventually(t, 30*time.Second, "no client reaches the removed endpoint", func() error {
			after = pick()
			for _, p := range after {
				if p == "algo-4" || p == "" {
					return fmt.Errorf("still %v", after)
				}
			}
			return nil
		})
		moved, movedOthers, onRemoved := 0, 0, 0
		for _, a := range clients {
			if first[a] == "algo-4" {
				onRemoved++
			}
			if after[a] != first[a] {
				moved++
				if first[a] != "algo-4" {
					movedOthers++
				}
			}
		}
		t.Logf("maglev: one of 4 endpoints removed: %d of %d clients moved (%d were on it, %d others)", moved, len(clients), onRemoved, movedOthers)
		// The clients of the removed endpoint must move (about 1/N of them; with 40 clients its share
		// varies by chance); Maglev's promise is that the others stay, but for ε of the table's
		// buckets: at most 0.5·sqrt(N/size) for N endpoints (TestMaglevMinimalDisruption; 0.063 for 4 in
		// 251). 40 clients sample that share, so the limit is the count that Binomial(40, ε) exceeds
		// less than 0.5% of the time (7): a hash that is not consistent (mod N) moves about 20.
		eps := 0.5 * math.Sqrt(4/float64(nftrules.DefaultMaglevTableSize))
		if limit := binomialLimit(len(clients), eps, 0.005); movedOthers > limit {
			t.Errorf("maglev: %d clients of the remaining endpoints moved, want at most %d (ε = %.3f of %d clients, exceeded by chance < 0.5%%)", movedOthers, limit, eps, len(clients))
		}
	})
}

// nodeLossSuite: with an endpoint on every worker, a worker's power cut costs only the requests sent
// before ironlb's proxy declares the node dead (its own echo detector), not the 40-50 s kube-proxy
// waits for the node controller (MetalLB #2796). The benchmark (lab bench-nodeloss) reports the figure;
// this asserts only that traffic recovers long before the node controller reacts.
func nodeLossSuite(t *testing.T) {
	var pods strings.Builder
	for i, w := range []string{"myk8s-worker", "myk8s-worker2", "myk8s-worker3"} {
		fmt.Fprintf(&pods, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: loss-%d, labels: {app: loss}}\nspec:\n  nodeName: %s\n  terminationGracePeriodSeconds: 0\n  containers: [{name: whoami, image: traefik/whoami}]\n", i+1, w)
	}
	ip := addrRankedFirst(t, "myk8s-worker", addrRankedFirst(t, "myk8s-worker3"), addrRankedFirst(t, "myk8s-worker2"))
	svc := fmt.Sprintf("---\napiVersion: v1\nkind: Service\nmetadata: {name: loss, annotations: {metallb.io/loadBalancerIPs: %q}}\nspec: {type: LoadBalancer, selector: {app: loss}, ports: [{port: 80}]}\n", ip)
	if out, err := runStdin(pods.String()+svc, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = runStdin(pods.String()+svc, ironlb, "lab", "kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	})
	waitReady(t, "pod/loss-1", "pod/loss-2", "pod/loss-3")
	eventually(t, 30*time.Second, "the Service answers from mypc", func() error {
		_, err := curl("mypc", "http://"+ip)
		return err
	})
	type res struct {
		out string
		err error
	}
	done := make(chan res, 1)
	go func() {
		out, err := labExec("mypc", ironlb, "probe", "--url", "http://"+ip+"/", "--every", "10ms", "--for", "13s", "--timeout", "200ms")
		done <- res{out, err}
	}()
	time.Sleep(time.Second)
	cut := time.Now()
	run(t, ironlb, "lab", "stop-node", "myk8s-worker3")
	t.Cleanup(func() { run(t, ironlb, "lab", "start-node", "myk8s-worker3") })
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	reqs, err := failover.Parse(strings.NewReader(r.out))
	if err != nil {
		t.Fatal(err)
	}
	tr := nodeloss.Analyze(reqs, cut)
	t.Logf("worker3 lost power: %d of %d requests failed, the last %s after the cut (kube-proxy keeps failing a third of them until the node controller's 40-50 s)",
		tr.Failed, tr.Sent, tr.Window.Round(time.Millisecond))
	if tr.Sent < 500 {
		t.Fatalf("only %d requests sent in 12 s", tr.Sent)
	}
	t.Logf("requests failing at >= 5%% until %s after the cut", tr.Sustained)
	if tr.Sustained > 2*time.Second {
		t.Errorf("requests kept failing for %s after the cut: the proxy kept the dead node's endpoint", tr.Sustained)
	}
}

// binomialLimit is the smallest k with P(X > k) < alpha for X ~ Binomial(n, p).
func binomialLimit(n int, p, alpha float64) int {
	pmf := math.Pow(1-p, float64(n)) // P(X = 0)
	cdf := pmf
	for k := 0; k < n; k++ {
		if 1-cdf < alpha {
			return k
		}
		pmf *= float64(n-k) / float64(k+1) * p / (1 - p)
		cdf += pmf
	}
	return n
}
