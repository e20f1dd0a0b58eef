package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/election"
)

// Issue 20: a pool on a second network, announced on eth1 only (L2Advertisement.spec.interfaces,
// MetalLB's semantics). From mypc3 on that network exactly one node answers ARP, with its eth1 MAC,
// the node MetalLB's ranking puts first; requests reach the pods; the ServiceL2Status lists eth1;
// nothing answers for the address on the first network; and when the announcer loses power, one other
// node answers on its eth1.
func TestL2SecondNetwork(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	cfg := `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: second-pool
  namespace: metallb-system
spec:
  addresses:
  - 172.19.255.200-172.19.255.250
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: second-l2
  namespace: metallb-system
spec:
  ipAddressPools:
  - second-pool
  interfaces:
  - eth1
`
	if out, err := runStdin(cfg, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		kubectl(t, "delete", "-n", "metallb-system", "l2advertisement/second-l2", "ipaddresspool/second-pool", "--ignore-not-found")
	})
	// An address MetalLB's ranking gives worker3 (no webpod there), so that its power cut below
	// moves it.
	ip := ""
	for i := 200; i <= 250 && ip == ""; i++ {
		if a := netip.AddrFrom4([4]byte{172, 19, 255, byte(i)}); election.Rank(a, labNodes)[0] == "myk8s-worker3" {
			ip = a.String()
		}
	}
	if ip == "" {
		t.Fatal("no address in 172.19.255.200-250 ranks myk8s-worker3 first")
	}
	svc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: second-net
  annotations:
    metallb.io/loadBalancerIPs: %s
spec:
  type: LoadBalancer
  selector:
    app: webpod
  ports:
  - port: 80
`, ip)
	if out, err := runStdin(svc, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { kubectl(t, "delete", "svc", "second-net", "--ignore-not-found") })
	eventually(t, 30*time.Second, "second-net answers from mypc3", func() error {
		_, err := curl("mypc3", "http://"+ip)
		return err
	})

	want := election.Rank(netip.MustParseAddr(ip), labNodes)[0]
	var macs []string
	eventually(t, 10*time.Second, "one node answers ARP on the second network", func() error {
		if macs = arpingFrom("mypc3", ip); len(macs) != 1 {
			return fmt.Errorf("MACs %v, want one", macs)
		}
		return nil
	})
	if got := eth1MACNode[macs[0]]; got != want {
		t.Errorf("ARP for %s answered by %s (%s), want %s's eth1 (MetalLB's ranking)", ip, macs[0], got, want)
	}
	// Announced on eth1 only: nobody answers on the first network.
	if m := arpingFrom("mypc", ip); len(m) != 0 {
		t.Errorf("ARP for %s on the first network answered by %v, want nobody (interfaces: [eth1])", ip, m)
	}

	counts := map[string]int{}
	for i := 0; i < 50; i++ {
		body, err := curl("mypc3", "http://"+ip)
		if err != nil {
			t.Fatalf("request %d from mypc3: %v", i, err)
		}
		counts[hostnameOf(body)]++
	}
	if counts["webpod1"]+counts["webpod2"] != 50 || counts["webpod1"] == 0 || counts["webpod2"] == 0 {
		t.Errorf("50 requests from mypc3 reached %v, want both webpods", counts)
	}

	eventually(t, 20*time.Second, "ServiceL2Status lists eth1", func() error {
		out := kubectl(t, "get", "servicel2statuses", "-n", "metallb-system", "-l", "metallb.io/service-name=second-net",
			"-o", `jsonpath={range .items[*]}{.status.node}/{.status.interfaces[*].name}{"\n"}{end}`)
		if got := strings.TrimSpace(out); got != want+"/eth1" {
			return fmt.Errorf("got %q, want %q", got, want+"/eth1")
		}
		return nil
	})
	t.Logf("%s on eth1 only: answered by %s (%s), requests %v, ServiceL2Status %s/eth1", ip, want, macs[0], counts, want)

	// The announcer loses power (both cables): another node takes the address over, on its eth1.
	run(t, ironlb, "lab", "stop-node", want)
	t.Cleanup(func() { _, _ = runErr(ironlb, "lab", "start-node", want) })
	eventually(t, 10*time.Second, "another node answers on the second network", func() error {
		if macs = arpingFrom("mypc3", ip); len(macs) != 1 || eth1MACNode[macs[0]] == want || eth1MACNode[macs[0]] == "" {
			return fmt.Errorf("MACs %v, want one other node's eth1", macs)
		}
		if _, err := curl("mypc3", "http://"+ip); err != nil {
			return err
		}
		return nil
	})
	t.Logf("after %s's power cut: answered by %s (%s)", want, eth1MACNode[macs[0]], macs[0])
	run(t, ironlb, "lab", "start-node", want)
	eventually(t, 60*time.Second, "exactly one announcer after the return", func() error {
		if macs = arpingFrom("mypc3", ip); len(macs) != 1 {
			return fmt.Errorf("MACs %v", macs)
		}
		return nil
	})
}
