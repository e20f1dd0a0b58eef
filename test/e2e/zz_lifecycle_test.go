package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These run last: they take the shared lab down and check nothing remains, then interrupt and kill
// `lab up` half-way and check that nothing remains either.

func TestLabDownLeavesNothing(t *testing.T) {
	out := run(t, ironlb, "lab", "down")
	t.Log(strings.TrimSpace(out))
	if left := leftovers(); len(left) > 0 {
		t.Fatalf("after lab down: %s", strings.Join(left, "\n"))
	}
	if out := run(t, ironlb, "lab", "down"); !strings.Contains(out, "no lab is up") {
		t.Errorf("a second lab down should say there is no lab, got %q", out)
	}
}

// startUp starts `lab up` and waits until the control plane is being started (the apiserver's log exists),
// so an interruption lands half-way.
func startUp(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(ironlb, "lab", "up", "--second-network") // its mypc3 and br1 must go on every path too
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(stateDir + "/logs/myk8s-control-plane/kube-apiserver.log"); err == nil {
			return cmd
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	t.Fatal("lab up did not reach the control plane in 30s")
	return nil
}

func TestInterruptedUpCleansUp(t *testing.T) {
	cmd := startUp(t)
	_ = cmd.Process.Signal(os.Interrupt) // Ctrl-C
	err := cmd.Wait()
	if err == nil {
		t.Errorf("interrupted lab up exited 0")
	}
	if left := leftovers(); len(left) > 0 {
		t.Fatalf("after Ctrl-C of lab up: %s", strings.Join(left, "\n"))
	}
}

func TestKilledUpThenDownCleansUp(t *testing.T) {
	cmd := startUp(t)
	_ = cmd.Process.Kill() // a crash: no cleanup ran
	_ = cmd.Wait()
	if left := leftovers(); len(left) == 0 {
		t.Fatalf("a killed lab up should leave a half-present lab for lab down to clean")
	}
	run(t, ironlb, "lab", "down")
	if left := leftovers(); len(left) > 0 {
		t.Fatalf("after lab down of a killed lab up: %s", strings.Join(left, "\n"))
	}
}

// The dual-stack variant (kind's IPv6 bridge subnet), here with kube-proxy in nftables mode: nodes and
// pods get an address of each family, pods answer over IPv6 across nodes, and a NodePort works through
// kube-proxy's nftables rules.
func TestDualStackNFTablesLab(t *testing.T) {
	out := labUp(t, "--ip-family=dual", "--proxy=nftables")
	t.Cleanup(func() {
		run(t, ironlb, "lab", "down")
		if left := leftovers(); len(left) > 0 {
			t.Errorf("after lab down of the dual-stack lab: %s", strings.Join(left, "\n"))
		}
	})
	t.Log(out)
	kubectlApply(t, "testdata/webpods.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	ips := strings.Fields(kubectl(t, "get", "pod", "webpod2", "-o", `jsonpath={.status.podIPs[*].ip}`))
	if len(ips) != 2 || !strings.HasPrefix(ips[0], "10.10.") || !strings.HasPrefix(ips[1], "fd00:10:10:") {
		t.Fatalf("webpod2 podIPs %v: want one IPv4 from 10.10.0.0/16 and one IPv6 from fd00:10:10::/56", ips)
	}
	body, err := curl("myk8s-control-plane", "http://["+ips[1]+"]/")
	if err != nil || hostnameOf(body) != "webpod2" {
		t.Fatalf("curl webpod2 over IPv6: %q %v", body, err)
	}
	if !strings.Contains(body, "RemoteAddr: [fc00:f853:ccd:e793::2]:") {
		t.Errorf("want the control plane's IPv6 bridge address as RemoteAddr:\n%s", body)
	}
	addrs := kubectl(t, "get", "node", "myk8s-worker", "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
	if addrs != "172.18.0.3 fc00:f853:ccd:e793::3" {
		t.Errorf("myk8s-worker InternalIPs %q, want both families", addrs)
	}
	kubectlApply(t, "testdata/services.yaml")
	nodePort := strings.TrimSpace(kubectl(t, "get", "svc", "svc-nodeport", "-o", "jsonpath={.spec.ports[0].nodePort}"))
	eventually(t, 30*time.Second, "NodePort through kube-proxy nftables", func() error {
		seen := map[string]bool{}
		for i := 0; i < 20; i++ {
			body, _ := curl("mypc", "http://172.18.0.4:"+nodePort)
			seen[hostnameOf(body)] = true
		}
		if !seen["webpod1"] || !seen["webpod2"] {
			return fmt.Errorf("20 requests reached %v", seen)
		}
		return nil
	})
	if tables, err := labExec("myk8s-worker", "nft", "list", "tables"); err != nil || !strings.Contains(tables, "table ip kube-proxy") {
		t.Errorf("no kube-proxy nftables table on myk8s-worker: %q %v", tables, err)
	}
	// The Service suite, as on the shared lab (kube-proxy iptables) and the ironlb-proxy lab.
	t.Run("ServiceSuite", serviceSuite)

	// IPv6 layer 2: one node answers neighbor solicitations for the Service's IPv6 address, and
	// requests reach the pods.
	v6 := `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: v6-pool, namespace: metallb-system}
spec: {addresses: ["fc00:f853:ccd:e793::ff00/120"]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: v6-l2, namespace: metallb-system}
spec: {ipAddressPools: [v6-pool]}
---
apiVersion: v1
kind: Service
metadata: {name: svc-v6, namespace: default}
spec:
  type: LoadBalancer
  ipFamilyPolicy: SingleStack
  ipFamilies: [IPv6]
  selector: {app: webpod}
  ports: [{port: 80}]
`
	if out, err := runStdin(v6, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var vip string
	eventually(t, 30*time.Second, "svc-v6 gets an IPv6 address", func() error {
		vip = strings.TrimSpace(kubectl(t, "get", "svc", "svc-v6", "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}"))
		if !strings.HasPrefix(vip, "fc00:f853:ccd:e793::ff") {
			return fmt.Errorf("ingress %q", vip)
		}
		return nil
	})
	eventually(t, 30*time.Second, "requests to ["+vip+"] from mypc", func() error {
		seen := map[string]bool{}
		for i := 0; i < 20; i++ {
			body, _ := curl("mypc", "http://["+vip+"]/")
			seen[hostnameOf(body)] = true
		}
		if !seen["webpod1"] || !seen["webpod2"] {
			return fmt.Errorf("20 requests reached %v", seen)
		}
		return nil
	})
	out, _ = labExec("mypc", "ndisc6", "-m", "-n", "-r", "2", vip, "eth0")
	macs := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if _, mac, ok := strings.Cut(l, "Target link-layer address: "); ok {
			macs[strings.ToLower(strings.TrimSpace(mac))] = true
		}
	}
	if len(macs) != 1 {
		t.Errorf("ndisc6 %s: link-layer addresses %v, want exactly one node's\n%s", vip, macs, out)
	} else {
		t.Logf("ndisc6 %s: answered by %v only", vip, macs)
	}
}

// ironlb's proxy instead of kube-proxy (lab up --proxy=ironlb, installed from config/proxy): the same
// Service suite passes, and the node's rules are ironlb's nftables table with no kube-proxy. The lab
// also has the BGP router and Prometheus, for the dashboard's test (every role's metrics, with data).
func TestServiceSuiteIronLBProxy(t *testing.T) {
	run(t, ironlb, "lab", "down")
	out := labUp(t, "--proxy=ironlb", "--bgp", "--prometheus")
	t.Cleanup(func() {
		run(t, ironlb, "lab", "down")
		if left := leftovers(); len(left) > 0 {
			t.Errorf("after lab down of the ironlb-proxy lab: %s", strings.Join(left, "\n"))
		}
	})
	if !strings.Contains(out, "ironlb proxy") {
		t.Errorf("lab up --proxy=ironlb did not report the proxy:\n%s", out)
	}
	if ds := kubectl(t, "get", "ds", "-A", "-o", "jsonpath={.items[*].metadata.name}"); strings.Contains(ds, "kube-proxy") || !strings.Contains(ds, "ironlb-proxy") {
		t.Errorf("DaemonSets %q: want ironlb-proxy and no kube-proxy", ds)
	}
	serviceSuite(t)
	t.Run("Conformance", conformanceSuite)
	t.Run("Algorithms", algorithmSuite)
	t.Run("NodeLoss", nodeLossSuite)
	t.Run("Dashboard", dashboardSuite)
	t.Run("Alerts", alertsSuite)
	t.Run("Chaos", chaosSuite)
	t.Run("DSR", dsrSuite)
	tables, err := labExec("myk8s-worker", "nft", "list", "tables")
	if err != nil || !strings.Contains(tables, "table ip ironlb") || strings.Contains(tables, "kube-proxy") {
		t.Errorf("nftables tables on myk8s-worker: %q %v; want ironlb's and no kube-proxy's", tables, err)
	}
}
