package e2e

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/election"
)

// macRE matches arping's answer lines.
var macRE = regexp.MustCompile(`bytes from ([0-9a-f:]{17})`)

// arpingMACs returns the distinct MACs answering ARP for ip from mypc.
func arpingMACs(t *testing.T, ip string) []string {
	t.Helper()
	return arpingFrom("mypc", ip)
}

// arpingFrom returns the distinct MACs answering ARP for ip from host's eth0, sorted.
func arpingFrom(host, ip string) []string {
	out, _ := labExec(host, "arping", "-c", "3", "-w", "4", "-I", "eth0", ip)
	seen := map[string]bool{}
	for _, m := range macRE.FindAllStringSubmatch(out, -1) {
		seen[m[1]] = true
	}
	var macs []string
	for m := range seen {
		macs = append(macs, m)
	}
	sort.Strings(macs)
	return macs
}

// Seed 000 end to end: from mypc, 100 curls to each external IP reach both webpods; arping sees one MAC per
// address, a node's.
func TestSeedLoadBalancerTraffic(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	kubectlApply(t, "testdata/seed000-metallb.yaml")
	kubectlApply(t, "testdata/seed000-services.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	for _, ip := range []string{"172.18.255.200", "172.18.255.201", "172.18.255.202"} {
		script := fmt.Sprintf(`for i in $(seq 100); do curl -s --connect-timeout 1 --max-time 2 %s | grep Hostname; done | sort | uniq -c`, ip)
		var counts map[string]int
		eventually(t, 30*time.Second, "traffic to "+ip, func() error {
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
		t.Logf("%s: webpod1 %d, webpod2 %d", ip, counts["webpod1"], counts["webpod2"])
		for _, p := range []string{"webpod1", "webpod2"} {
			if counts[p] < 30 || counts[p] > 70 {
				t.Errorf("%s: %s got %d of 100, want 30-70", ip, p, counts[p])
			}
		}
		macs := arpingMACs(t, ip)
		if len(macs) != 1 || macNode[macs[0]] == "" {
			t.Errorf("arping %s: MACs %v, want exactly one node's", ip, macs)
		}
	}
	// Nothing answers for an address no Service holds.
	if macs := arpingMACs(t, "172.18.255.249"); len(macs) != 0 {
		t.Errorf("arping of an unassigned pool address answered by %v", macs)
	}
}

// probeLoop requests url from mypc every 20 ms for d and returns the longest gap between successes and
// how many requests failed.
func probeLoop(url string, d time.Duration) (time.Duration, int, int, error) {
	return probeLoopHost("mypc", url, d)
}

// probeLoopHost requests url from host every 20 ms for d and returns the longest gap between successes.
func probeLoopHost(host, url string, d time.Duration) (time.Duration, int, int, error) {
	script := fmt.Sprintf(`end=$(( $(date +%%s%%N) / 1000000 + %d )); while [ $(( $(date +%%s%%N) / 1000000 )) -lt $end ]; do
  t=$(( $(date +%%s%%N) / 1000000 )); if curl -s -o /dev/null --connect-timeout 0.2 --max-time 0.5 %s; then echo "$t ok"; else echo "$t fail"; fi; sleep 0.02; done`, d.Milliseconds(), url)
	out, err := labExec(host, "bash", "-c", script)
	if err != nil {
		return 0, 0, 0, err
	}
	var last int64
	var gap int64
	ok, fail := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		ts, _ := strconv.ParseInt(f[0], 10, 64)
		if f[1] != "ok" {
			fail++
			continue
		}
		ok++
		if last != 0 && ts-last > gap {
			gap = ts - last
		}
		last = ts
	}
	return time.Duration(gap) * time.Millisecond, ok, fail, nil
}

// Failover: the announcer of an address loses power while a client requests every 20 ms; traffic comes
// back through exactly one other node; then the node returns. The serving pods are on worker and worker2,
// and the address is chosen so that worker3 announces it, so the figure measures the announcement.
func TestFailoverOnNodeLoss(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	kubectlApply(t, "testdata/seed000-metallb.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	nodes := []string{"myk8s-control-plane", "myk8s-worker", "myk8s-worker2", "myk8s-worker3"}
	var vip string
	for i := 230; i <= 250; i++ { // MetalLB's ranking picks worker3 first for this address
		a := netip.MustParseAddr(fmt.Sprintf("172.18.255.%d", i))
		if election.Rank(a, nodes)[0] == "myk8s-worker3" {
			vip = a.String()
			break
		}
	}
	if vip == "" {
		t.Fatal("no address in .230-.250 ranks worker3 first")
	}
	svc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: failover
  annotations:
    metallb.io/loadBalancerIPs: %s
spec:
  type: LoadBalancer
  selector:
    app: webpod
  ports:
  - port: 80
`, vip)
	if out, err := runStdin(svc, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { kubectl(t, "delete", "svc", "failover", "--ignore-not-found") })
	url := "http://" + vip
	eventually(t, 30*time.Second, "failover service answers", func() error {
		_, err := curl("mypc", url)
		return err
	})
	if macs := arpingMACs(t, vip); len(macs) != 1 || macs[0] != nodeMAC("myk8s-worker3") {
		t.Fatalf("before the cut, %s should be announced by worker3 (%s), got %v", vip, nodeMAC("myk8s-worker3"), macs)
	}
	done := make(chan struct{})
	var gap time.Duration
	var ok, fail int
	var perr error
	go func() {
		defer close(done)
		gap, ok, fail, perr = probeLoop(url, 4*time.Second)
	}()
	time.Sleep(time.Second)
	run(t, ironlb, "lab", "stop-node", "myk8s-worker3")
	t.Cleanup(func() { _, _ = runErr(ironlb, "lab", "start-node", "myk8s-worker3") })
	<-done
	if perr != nil {
		t.Fatal(perr)
	}
	t.Logf("announcer power cut: longest gap between successful requests %s (%d ok, %d failed)", gap, ok, fail)
	if macs := arpingMACs(t, vip); len(macs) != 1 || macs[0] == nodeMAC("myk8s-worker3") {
		t.Errorf("after the cut, want exactly one other node answering for %s, got %v", vip, macs)
	}
	if _, err := curl("mypc", url); err != nil {
		t.Errorf("traffic did not come back after the announcer's loss: %v", err)
	}
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		gap, ok, fail, perr = probeLoop(url, 10*time.Second)
	}()
	time.Sleep(time.Second)
	run(t, ironlb, "lab", "start-node", "myk8s-worker3")
	<-done2
	t.Logf("announcer's return: longest gap between successful requests %s (%d ok, %d failed)", gap, ok, fail)
	eventually(t, 30*time.Second, "exactly one announcer after the return", func() error {
		if macs := arpingMACs(t, vip); len(macs) != 1 {
			return fmt.Errorf("MACs %v", macs)
		}
		return nil
	})
}
