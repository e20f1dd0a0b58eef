package e2e

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
)

// The IPv6-only lab (issue 20): it runs after the shared IPv4 lab is down (this file sorts after
// zz_lifecycle_test.go) and brings its own up and down. Nodes, pods, Services and the client have
// IPv6 addresses only; the speakers heartbeat over UDP/IPv6 and probe with ICMPv6 echo. Seed 000's
// experiment passes with NDP in place of ARP, and the announcer's power cut moves the address to
// another node's MAC within the layer-2 failover goal.
func TestIPv6OnlyLab(t *testing.T) {
	run(t, ironlb, "lab", "down") // the suite's IPv4 lab, when this runs alone: one lab at a time
	out := labUp(t, "--ip-family=ipv6")
	t.Cleanup(func() {
		run(t, ironlb, "lab", "down")
		if left := leftovers(); len(left) > 0 {
			t.Errorf("after lab down of the IPv6-only lab: %s", strings.Join(left, "\n"))
		}
	})
	t.Log(out)
	const subnet = "fc00:f853:ccd:e793::"
	nodeMACs := macNode // derived from the IPv4 layout addresses in every family

	// IPv6 only: the nodes' InternalIPs, and no IPv4 address on any host's eth0.
	if addrs := kubectl(t, "get", "node", "myk8s-worker", "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`); addrs != subnet+"3" {
		t.Errorf("myk8s-worker InternalIPs %q, want %s3 only", addrs, subnet)
	}
	for _, h := range []string{"myk8s-worker", "mypc"} {
		if v4, err := labExec(h, "ip", "-4", "-o", "addr", "show", "dev", "eth0"); err != nil || strings.TrimSpace(v4) != "" {
			t.Errorf("%s eth0 has IPv4 addresses: %q %v", h, v4, err)
		}
	}

	// Seed 000: the webpods answer over IPv6 across nodes.
	kubectlApply(t, "testdata/webpods.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	ip2 := podIP(t, "webpod2")
	if !strings.HasPrefix(ip2, "fd00:10:10:") {
		t.Fatalf("webpod2 podIP %q, want one of fd00:10:10::/56", ip2)
	}
	if body, err := curl("myk8s-control-plane", "http://["+ip2+"]/"); err != nil || hostnameOf(body) != "webpod2" {
		t.Fatalf("curl webpod2 over IPv6: %q %v", body, err)
	}

	// MetalLB's pool and advertisement, and svc1..3: the seed's .200-.250, in the bridge's /64.
	cfg := fmt.Sprintf(`apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: my-ippool, namespace: metallb-system}
spec: {addresses: ["%sffc8-%sfffa"]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: my-l2-advertise, namespace: metallb-system}
spec: {ipAddressPools: [my-ippool]}
`, subnet, subnet)
	if out, err := runStdin(cfg, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	kubectlApply(t, "testdata/seed000-services.yaml")
	for _, svc := range []string{"svc1", "svc2", "svc3"} {
		var vip string
		eventually(t, 30*time.Second, svc+" gets an IPv6 address", func() error {
			vip = strings.TrimSpace(kubectl(t, "get", "svc", svc, "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}"))
			if !strings.HasPrefix(vip, subnet+"ff") {
				return fmt.Errorf("ingress %q", vip)
			}
			return nil
		})
		eventually(t, 30*time.Second, "requests to ["+vip+"] from mypc reach both webpods", func() error {
			seen := map[string]int{}
			for range 40 {
				body, _ := curl("mypc", "http://["+vip+"]/")
				seen[hostnameOf(body)]++
			}
			if seen["webpod1"] == 0 || seen["webpod2"] == 0 || seen["webpod1"]+seen["webpod2"] != 40 {
				return fmt.Errorf("40 requests reached %v", seen)
			}
			t.Logf("%s [%s]: %v", svc, vip, seen)
			return nil
		})
		macs := ndiscMACs(t, vip)
		if len(macs) != 1 || nodeMACs[macs[0]] == "" {
			t.Fatalf("ndisc6 %s: link-layer addresses %v, want exactly one node's", vip, macs)
		}
		node := nodeMACs[macs[0]]
		eventually(t, 20*time.Second, "ServiceL2Status of "+svc+" names "+node, func() error {
			out := strings.TrimSpace(kubectl(t, "get", "servicel2statuses", "-n", "metallb-system", "-l", "metallb.io/service-name="+svc,
				"-o", `jsonpath={range .items[*]}{.status.node}{"\n"}{end}`))
			if out != node {
				return fmt.Errorf("status nodes %q", out)
			}
			return nil
		})
		t.Logf("ndisc6 %s: answered by %s (%s) only", vip, macs[0], node)
	}
	if macs := ndiscMACs(t, subnet+"fff9"); len(macs) != 0 {
		t.Errorf("ndisc6 of an unassigned pool address answered by %v", macs)
	}

	// The announcer's power cut: an address ranked to worker3 moves to another node's MAC. The probe
	// in mypc solicits every 20 ms and stamps each advertisement in the kernel; the takeover is
	// measured from worker3's last answer to another node's first, which bounds the time from the
	// cut to the new announcer's first answer plus at most one probe interval.
	nodes := []string{"myk8s-control-plane", "myk8s-worker", "myk8s-worker2", "myk8s-worker3"}
	vipAddr, err := failover.Address("myk8s-worker3", nodes, netip.MustParsePrefix(subnet+"/64"))
	if err != nil {
		t.Fatal(err)
	}
	vip := vipAddr.String()
	svc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: failover, namespace: default, annotations: {metallb.io/loadBalancerIPs: "%s"}}
spec: {type: LoadBalancer, selector: {app: webpod}, ports: [{port: 80}]}
`, vip)
	if out, err := runStdin(svc, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	w3 := nodeMAC("myk8s-worker3")
	eventually(t, 30*time.Second, "worker3 announces ["+vip+"]", func() error {
		if macs := ndiscMACs(t, vip); len(macs) != 1 || macs[0] != w3 {
			return fmt.Errorf("ndisc6 MACs %v", macs)
		}
		if _, err := curl("mypc", "http://["+vip+"]/"); err != nil {
			return err
		}
		return nil
	})
	url := "http://[" + vip + "]/"
	probe := make(chan string, 1)
	go func() {
		out, _ := labExec("mypc", ironlb, "probe", "--addr", vip, "--url", url, "--every", "20ms", "--for", "4s", "--timeout", "250ms")
		probe <- out
	}()
	time.Sleep(time.Second)
	cut := time.Now()
	run(t, ironlb, "lab", "stop-node", "myk8s-worker3")
	t.Cleanup(func() { _, _ = runErr(ironlb, "lab", "start-node", "myk8s-worker3") })
	raw := <-probe
	ev, err := failover.Parse(bytes.NewReader([]byte(raw)))
	if err != nil {
		t.Fatalf("probe output: %v\n%s", err, raw)
	}
	var lastOld, firstNew time.Time
	newMAC := ""
	for _, e := range ev {
		if e.Kind == "http" {
			continue
		}
		switch {
		case e.MAC == w3 && (firstNew.IsZero() || e.At.Before(firstNew)):
			lastOld = e.At
		case e.MAC != w3 && firstNew.IsZero() && e.At.After(cut.Add(-time.Second)):
			firstNew, newMAC = e.At, e.MAC
		}
	}
	if firstNew.IsZero() || nodeMACs[newMAC] == "" {
		t.Fatalf("after the cut no other node answered for %s (new MAC %q)\n%s", vip, newMAC, raw)
	}
	takeover := firstNew.Sub(lastOld)
	tr := failover.Analyze(ev, cut, cut.Add(3*time.Second), cut.Add(3*time.Second), w3)
	t.Logf("power cut of worker3: [%s] answered by %s (%s) %s after worker3's last answer; HTTP gap %s (%d failed)",
		vip, newMAC, nodeMACs[newMAC], takeover.Round(time.Millisecond), tr.HTTPGap.Round(time.Millisecond), tr.HTTPFailed)
	// The layer-2 goal (docs/benchmarks.md: p99 ≤ 50 ms from the cut), plus one probe interval for
	// this measure, plus slack for one trial on a shared machine; bench-failover gives the figures.
	if goal := 50*time.Millisecond + 20*time.Millisecond + 80*time.Millisecond; takeover > goal {
		t.Errorf("takeover %s, want ≤ %s", takeover, goal)
	}
	if macs := ndiscMACs(t, vip); len(macs) != 1 || macs[0] == w3 {
		t.Errorf("after the cut, want exactly one other node answering for %s, got %v", vip, macs)
	}
	if _, err := curl("mypc", url); err != nil {
		t.Errorf("traffic did not come back after the announcer's loss: %v", err)
	}
	run(t, ironlb, "lab", "start-node", "myk8s-worker3")
	eventually(t, 60*time.Second, "exactly one announcer after worker3's return", func() error {
		if macs := ndiscMACs(t, vip); len(macs) != 1 {
			return fmt.Errorf("MACs %v", macs)
		}
		return nil
	})
}

// ndiscMACs asks for ip's link-layer address from mypc (ndisc6, twice) and returns the distinct MACs
// that answered.
func ndiscMACs(t *testing.T, ip string) []string {
	t.Helper()
	out, _ := labExec("mypc", "ndisc6", "-m", "-n", "-r", "2", "-w", "500", ip, "eth0")
	seen := map[string]bool{}
	var macs []string
	for _, l := range strings.Split(out, "\n") {
		if _, mac, ok := strings.Cut(l, "Target link-layer address: "); ok {
			m := strings.ToLower(strings.TrimSpace(mac))
			if !seen[m] {
				seen[m] = true
				macs = append(macs, m)
			}
		}
	}
	return macs
}
