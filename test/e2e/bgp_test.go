package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/bench/nodeloss"
)

// Seed 003's BGP mode in the lab's router topology (lab up --bgp): every node peers with FRR on the
// router; FRR spreads traffic from mypc2 (behind the router, on another subnet) over the nodes by
// ECMP. The addresses come from a pool outside the nodes' subnet, so only BGP can bring them.

var nodeAddr = map[string]string{
	"myk8s-control-plane": "172.18.0.2",
	"myk8s-worker":        "172.18.0.3",
	"myk8s-worker2":       "172.18.0.4",
	"myk8s-worker3":       "172.18.0.5",
}

const bgpConfig = `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: bgp-pool, namespace: metallb-system}
spec:
  addresses: [172.30.1.0/28]
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: e2e-communities, namespace: metallb-system}
spec:
  communities:
  - {name: e2e-large, value: "large:64513:7:9"}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bgp-adv, namespace: metallb-system}
spec:
  ipAddressPools: [bgp-pool]
  communities: ["64513:100", e2e-large]
  localPref: 150
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast, namespace: metallb-system}
spec: {receiveInterval: 50, transmitInterval: 50, detectMultiplier: 3}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: router, namespace: metallb-system}
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 172.18.255.254
  holdTime: 9s
  bfdProfile: fast
`

// vtyshJSON runs an FRR show command on the router and decodes its JSON.
func vtyshJSON(t *testing.T, cmd string, v any) {
	t.Helper()
	out, err := labExec("router", "vtysh", "-c", cmd+" json")
	if err != nil {
		t.Fatalf("vtysh %s: %v", cmd, err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("vtysh %s: %v\n%s", cmd, err, out)
	}
}

// routeNextHops returns the router's FIB next hops for a /32 (none when there is no route).
func routeNextHops(t *testing.T, ip string) []string {
	t.Helper()
	var r map[string][]struct {
		Protocol string `json:"protocol"`
		Selected bool   `json:"selected"`
		Nexthops []struct {
			IP     string `json:"ip"`
			Active bool   `json:"active"`
		} `json:"nexthops"`
	}
	vtyshJSON(t, "show ip route "+ip+"/32", &r)
	var hops []string
	for _, route := range r[ip+"/32"] {
		if route.Protocol != "bgp" || !route.Selected {
			continue
		}
		for _, nh := range route.Nexthops {
			if nh.Active {
				hops = append(hops, nh.IP)
			}
		}
	}
	sort.Strings(hops)
	return hops
}

func addrsOf(nodes ...string) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, nodeAddr[n])
	}
	sort.Strings(out)
	return out
}

func waitNextHops(t *testing.T, ip string, want []string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("router's next hops for %s = %v", ip, want), func() error {
		if got := routeNextHops(t, ip); !slices.Equal(got, want) {
			return fmt.Errorf("next hops %v", got)
		}
		return nil
	})
}

// bgpPath is one path of a prefix in the router's BGP table.
type bgpPath struct {
	Nexthops []struct {
		IP string `json:"ip"`
	} `json:"nexthops"`
	Community      *struct{ String string } `json:"community"`
	LargeCommunity *struct{ String string } `json:"largeCommunity"`
	LocPrf         int                      `json:"locPrf"`
	LocalPref      int                      `json:"localpref"`
}

func bgpPaths(t *testing.T, ip string) []bgpPath {
	t.Helper()
	var r struct {
		Paths []bgpPath `json:"paths"`
	}
	vtyshJSON(t, "show ip bgp "+ip+"/32", &r)
	return r.Paths
}

func setupBGP(t *testing.T) {
	t.Helper()
	kubectlApply(t, "testdata/webpods.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	if out, err := applyStdin(bgpConfig); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		// The peer first: a BFDProfile a BGPPeer still names may not be deleted, and `delete -f` goes
		// in the file's order (it left "fast" behind, and MetalLB's native speaker, switched in by a
		// later test, refused its whole configuration for it).
		_, _ = runErr(ironlb, "lab", "kubectl", "delete", "-n", "metallb-system", "bgppeer", "router", "--ignore-not-found")
		_, _ = runStdin(bgpConfig, ironlb, "lab", "kubectl", "delete", "--ignore-not-found", "-f", "-")
	})
	eventually(t, 60*time.Second, "every node's BGP session Established on the router", func() error {
		var sum struct {
			IPv4Unicast struct {
				Peers map[string]struct {
					State string `json:"state"`
				} `json:"peers"`
			} `json:"ipv4Unicast"`
		}
		vtyshJSON(t, "show bgp summary", &sum)
		var up []string
		for addr, p := range sum.IPv4Unicast.Peers {
			if p.State == "Established" {
				up = append(up, addr)
			}
		}
		sort.Strings(up)
		if !slices.Equal(up, addrsOf(labNodes...)) {
			return fmt.Errorf("established: %v", up)
		}
		return nil
	})
}

func applyBGPService(t *testing.T, name, ip, spec string) {
	t.Helper()
	y := fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  annotations:\n    metallb.io/loadBalancerIPs: %s\nspec:\n  type: LoadBalancer\n  selector:\n    app: webpod\n  ports:\n  - port: 80\n%s", name, ip, spec)
	if out, err := runStdin(y, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { kubectl(t, "delete", "svc", name, "--ignore-not-found") })
}

// Every node advertises the address with the advertisement's communities; FRR installs one next hop
// per node and spreads mypc2's connections over them; both pods answer. With externalTrafficPolicy
// Local only the nodes with a pod advertise, and the pods see mypc2's own address.
func TestBGPECMP(t *testing.T) {
	setupBGP(t)
	const ip, local = "172.30.1.1", "172.30.1.2"
	applyBGPService(t, "bgp-svc", ip, "")
	applyBGPService(t, "bgp-local", local, "  externalTrafficPolicy: Local\n")
	waitNextHops(t, ip, addrsOf(labNodes...), 30*time.Second)
	waitNextHops(t, local, addrsOf("myk8s-worker", "myk8s-worker2"), 30*time.Second)

	paths := bgpPaths(t, ip)
	if len(paths) != len(labNodes) {
		t.Errorf("FRR has %d paths for %s, want one per node (%d)", len(paths), ip, len(labNodes))
	}
	for _, p := range paths {
		if p.Community == nil || !strings.Contains(p.Community.String, "64513:100") {
			t.Errorf("path %+v lacks community 64513:100", p.Nexthops)
		}
		if p.LargeCommunity == nil || !strings.Contains(p.LargeCommunity.String, "64513:7:9") {
			t.Errorf("path %+v lacks large community 64513:7:9 (alias e2e-large)", p.Nexthops)
		}
	}

	// The route reaches FRR as soon as the speakers see the address assigned; kube-proxy programs it on
	// the nodes on its own schedule (iptables min-sync-period 1 s), so the first connections may be
	// dropped by a node without the rule yet (measured here: 0.6 s after the route): as with MetalLB.
	t0 := time.Now()
	eventually(t, 10*time.Second, "mypc2 reaches "+ip, func() error { _, err := curl("mypc2", "http://"+ip); return err })
	t.Logf("%s answered mypc2 %s after its next hops were in FRR", ip, time.Since(t0).Round(10*time.Millisecond))
	pods := map[string]int{}
	for i := 0; i < 100; i++ {
		body, err := curl("mypc2", "http://"+ip)
		if err != nil {
			t.Fatalf("request %d from mypc2: %v", i, err)
		}
		pods[hostnameOf(body)]++
	}
	t.Logf("100 requests from mypc2 to %s: %v", ip, pods)
	if pods["webpod1"] == 0 || pods["webpod2"] == 0 {
		t.Errorf("requests did not reach every pod: %v", pods)
	}
	for i := 0; i < 10; i++ {
		body, err := curl("mypc2", "http://"+local)
		if err != nil {
			t.Fatalf("request to the Local service: %v", err)
		}
		if got := remoteAddr(body); got != "192.168.10.100" {
			t.Fatalf("externalTrafficPolicy Local: the pod saw %s, want mypc2's 192.168.10.100", got)
		}
	}

	// MetalLB's status objects: a ServiceBGPStatus per node for the Service, naming the peer, and a
	// BGPSessionState per node and peer.
	out := kubectl(t, "get", "servicebgpstatuses.metallb.io", "-n", "metallb-system", "-l", "metallb.io/service-name=bgp-svc",
		"-o", `jsonpath={range .items[*]}{.status.node} {.status.peers}{"\n"}{end}`)
	if n := strings.Count(out, "router"); n != len(labNodes) {
		t.Errorf("ServiceBGPStatus of bgp-svc: want one per node naming peer router, got:\n%s", out)
	}
	eventually(t, 20*time.Second, "BGPSessionState Established with BFD up on every node", func() error {
		out := kubectl(t, "get", "bgpsessionstates.frrk8s.metallb.io", "-A",
			"-o", `jsonpath={range .items[*]}{.status.node} {.status.peer} {.status.bgpStatus} {.status.bfdStatus}{"\n"}{end}`)
		for _, n := range labNodes {
			if !strings.Contains(out, n+" 172.18.255.254 Established up") {
				return fmt.Errorf("%s missing:\n%s", n, out)
			}
		}
		return nil
	})

	// LOCAL_PREF travels on iBGP sessions only (as in MetalLB): worker3 peers over iBGP for a moment.
	if _, err := labExec("router", "vtysh", "-c", "configure terminal", "-c", "router bgp 64512",
		"-c", "neighbor ibgp peer-group", "-c", "neighbor ibgp remote-as internal",
		"-c", "no bgp listen range 172.18.0.5/32 peer-group nodes", "-c", "bgp listen range 172.18.0.5/32 peer-group ibgp"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = labExec("router", "vtysh", "-c", "configure terminal", "-c", "router bgp 64512",
			"-c", "no bgp listen range 172.18.0.5/32 peer-group ibgp", "-c", "no neighbor ibgp peer-group",
			"-c", "bgp listen range 172.18.0.5/32 peer-group nodes")
	})
	ibgp := `apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: router, namespace: metallb-system}
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 172.18.255.254
  holdTime: 9s
  bfdProfile: fast
  nodeSelectors:
  - matchExpressions: [{key: kubernetes.io/hostname, operator: NotIn, values: [myk8s-worker3]}]
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: router-ibgp, namespace: metallb-system}
spec:
  myASN: 64512
  peerASN: 64512
  peerAddress: 172.18.255.254
  holdTime: 9s
  nodeSelectors:
  - matchLabels: {kubernetes.io/hostname: myk8s-worker3}
`
	if out, err := runStdin(ibgp, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { kubectl(t, "delete", "bgppeer", "-n", "metallb-system", "router-ibgp", "--ignore-not-found") })
	eventually(t, 60*time.Second, "worker3's iBGP path with LOCAL_PREF 150", func() error {
		for _, p := range bgpPaths(t, ip) {
			if len(p.Nexthops) > 0 && p.Nexthops[0].IP == "172.18.0.5" && (p.LocPrf == 150 || p.LocalPref == 150) {
				return nil
			}
		}
		return fmt.Errorf("paths: %+v", bgpPaths(t, ip))
	})
}

// A node's power cut: with BFD (50 ms × 3) FRR withdraws its next hop within a fraction of a second and
// the request loop from mypc2 loses only the connections hashed to the dead node meanwhile; the route
// comes back when the node does.
func TestBGPNodeLoss(t *testing.T) {
	setupBGP(t)
	const ip = "172.30.1.3"
	applyBGPService(t, "bgp-loss", ip, "")
	waitNextHops(t, ip, addrsOf(labNodes...), 30*time.Second)
	eventually(t, 20*time.Second, "BFD up between the router and worker3", func() error {
		out, err := labExec("router", "vtysh", "-c", "show bfd peer 172.18.0.5 json")
		if err != nil || !strings.Contains(out, `"status":"up"`) {
			return fmt.Errorf("%v %s", err, out)
		}
		return nil
	})
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() { // a request every 10 ms, each on a new connection, so ECMP spreads them over the nodes
		out, err := labExec("mypc2", ironlb, "probe", "--url", "http://"+ip+"/", "--every", "10ms", "--for", "6s", "--timeout", "200ms")
		done <- result{out, err}
	}()
	time.Sleep(1500 * time.Millisecond)
	cut := time.Now()
	run(t, ironlb, "lab", "stop-node", "myk8s-worker3")
	t.Cleanup(func() { run(t, ironlb, "lab", "start-node", "myk8s-worker3") })
	eventually(t, 5*time.Second, "worker3's next hop withdrawn", func() error {
		if hops := routeNextHops(t, ip); slices.Contains(hops, "172.18.0.5") {
			return fmt.Errorf("next hops %v", hops)
		}
		return nil
	})
	withdrawn := time.Since(cut)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	reqs, err := failover.Parse(strings.NewReader(r.out))
	if err != nil {
		t.Fatal(err)
	}
	tr := nodeloss.Analyze(reqs, cut)
	t.Logf("worker3 stopped: next hop gone from the router's FIB within %s (polled through vtysh); mypc2's requests: %d of %d failed, the last %s after the cut",
		withdrawn.Round(time.Millisecond), tr.Failed, tr.Sent, tr.Window.Round(time.Millisecond))
	if withdrawn > 3*time.Second || tr.Sustained > 2*time.Second {
		t.Errorf("with BFD 50 ms × 3 the route took %s to go and requests kept failing for %s (hold time 9 s: BFD did not act)", withdrawn, tr.Sustained)
	}
	run(t, ironlb, "lab", "start-node", "myk8s-worker3")
	waitNextHops(t, ip, addrsOf(labNodes...), 90*time.Second)
}

// Without BFD a dead node's next hop goes when the router's hold timer expires.
func TestBGPNodeLossWithoutBFD(t *testing.T) {
	setupBGP(t)
	noBFD := strings.Replace(bgpConfig, "  holdTime: 9s\n  bfdProfile: fast\n", "  holdTime: 3s\n", 1)
	if out, err := runStdin(noBFD, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const ip = "172.30.1.4"
	applyBGPService(t, "bgp-nobfd", ip, "")
	waitNextHops(t, ip, addrsOf(labNodes...), 60*time.Second)
	cut := time.Now()
	run(t, ironlb, "lab", "stop-node", "myk8s-worker3")
	t.Cleanup(func() { run(t, ironlb, "lab", "start-node", "myk8s-worker3") })
	eventually(t, 10*time.Second, "worker3's next hop withdrawn", func() error {
		if hops := routeNextHops(t, ip); slices.Contains(hops, "172.18.0.5") {
			return fmt.Errorf("next hops %v", hops)
		}
		return nil
	})
	withdrawn := time.Since(cut)
	t.Logf("without BFD (hold time 3 s) worker3's next hop went after %s", withdrawn.Round(time.Millisecond))
	if withdrawn > 3*time.Second+time.Second {
		t.Errorf("withdrawal took %s, more than the 3 s hold time", withdrawn)
	}
	run(t, ironlb, "lab", "start-node", "myk8s-worker3")
	waitNextHops(t, ip, addrsOf(labNodes...), 90*time.Second)
}

// A wrong password, a wrong AS number and an unreachable peer each show in the BGPSessionState, as an
// event on the BGPPeer and in the speaker's log; the node's other session keeps its routes.
func TestBGPBadPeers(t *testing.T) {
	setupBGP(t)
	const ip = "172.30.1.5"
	applyBGPService(t, "bgp-bad", ip, "")
	waitNextHops(t, ip, addrsOf(labNodes...), 30*time.Second)
	var before map[string]struct {
		Dropped int `json:"connectionsDropped"`
	}
	vtyshJSON(t, "show bgp neighbors", &before)

	// worker3 alone gets a second, broken peer; then its good session is replaced by broken ones.
	peers := func(name, extra string) string {
		return fmt.Sprintf(`apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: %s, namespace: metallb-system}
spec:
  myASN: 64513
  nodeSelectors:
  - matchLabels: {kubernetes.io/hostname: myk8s-worker3}
%s`, name, extra)
	}
	unreachable := peers("unreachable", "  peerASN: 64512\n  peerAddress: 172.18.255.250\n  connectTime: 1s\n")
	if out, err := runStdin(unreachable, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { kubectl(t, "delete", "bgppeer", "-n", "metallb-system", "unreachable", "--ignore-not-found") })
	sessionState := func(peer string) string {
		return kubectl(t, "get", "bgpsessionstates.frrk8s.metallb.io", "-A", "-l", "frrk8s.metallb.io/node=myk8s-worker3",
			"-o", `jsonpath={range .items[*]}{.status.peer}={.status.bgpStatus}{"\n"}{end}`)
	}
	eventually(t, 30*time.Second, "the unreachable peer's session state and event", func() error {
		st := sessionState("172.18.255.250")
		if !strings.Contains(st, "172.18.255.250=") || strings.Contains(st, "172.18.255.250=Established") {
			return fmt.Errorf("session states:\n%s", st)
		}
		ev := kubectl(t, "get", "events", "-n", "metallb-system", "--field-selector", "involvedObject.name=unreachable",
			"-o", `jsonpath={range .items[*]}{.type} {.reason} {.message}{"\n"}{end}`)
		if !strings.Contains(ev, "Warning") {
			return fmt.Errorf("no Warning event on BGPPeer unreachable:\n%s", ev)
		}
		t.Logf("unreachable peer: %s", strings.TrimSpace(ev))
		return nil
	})
	// The good sessions, worker3's included, are untouched.
	if hops := routeNextHops(t, ip); !slices.Equal(hops, addrsOf(labNodes...)) {
		t.Errorf("next hops changed while a broken peer was added: %v", hops)
	}

	for _, c := range []struct{ name, spec, want string }{
		{"wrong-password", "  peerASN: 64512\n  peerAddress: 172.18.255.254\n  password: not-what-the-router-expects\n  connectTime: 1s\n", "ConnectFailed"},
		{"wrong-asn", "  peerASN: 64999\n  peerAddress: 172.18.255.254\n  connectTime: 1s\n", "AS"},
	} {
		// worker3's good session to the router gives way to the broken one (one session per peer address).
		excl := strings.Replace(bgpConfig[strings.Index(bgpConfig, "apiVersion: metallb.io/v1beta2"):], "  bfdProfile: fast\n",
			"  bfdProfile: fast\n  nodeSelectors:\n  - matchExpressions: [{key: kubernetes.io/hostname, operator: NotIn, values: [myk8s-worker3]}]\n", 1)
		if out, err := runStdin(excl+"---\n"+peers(c.name, c.spec), ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		eventually(t, 60*time.Second, c.name+": event on the BGPPeer", func() error {
			ev := kubectl(t, "get", "events", "-n", "metallb-system", "--field-selector", "involvedObject.name="+c.name,
				"-o", `jsonpath={range .items[*]}{.type} {.reason} {.message}{"\n"}{end}`)
			if !strings.Contains(ev, "Warning") || !strings.Contains(ev, c.want) {
				return fmt.Errorf("events on BGPPeer %s:\n%s", c.name, ev)
			}
			t.Logf("%s: %s", c.name, strings.TrimSpace(ev))
			return nil
		})
		if st := sessionState("172.18.255.254"); strings.Contains(st, "172.18.255.254=Established") {
			t.Errorf("%s: worker3's session state says Established:\n%s", c.name, st)
		}
		logs := strings.Join(speakerLogLines("myk8s-worker3", c.name), "\n")
		if logs == "" {
			t.Errorf("%s: no speaker log line on worker3 names the peer", c.name)
		}
		// The other nodes keep their sessions and routes.
		waitNextHops(t, ip, addrsOf("myk8s-control-plane", "myk8s-worker", "myk8s-worker2"), 30*time.Second)
		kubectl(t, "delete", "bgppeer", "-n", "metallb-system", c.name)
		if out, err := runStdin(bgpConfig, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		waitNextHops(t, ip, addrsOf(labNodes...), 60*time.Second)
	}
	var after map[string]struct {
		Dropped int `json:"connectionsDropped"`
	}
	vtyshJSON(t, "show bgp neighbors", &after)
	for _, n := range []string{"myk8s-control-plane", "myk8s-worker", "myk8s-worker2"} {
		a := nodeAddr[n]
		if after[a].Dropped != before[a].Dropped {
			t.Errorf("%s's session to the router dropped %d times while worker3's peers were broken", n, after[a].Dropped-before[a].Dropped)
		}
	}
}

// speakerLogLines returns the lines of the ironlb speaker's log on node that contain s.
func speakerLogLines(node, s string) []string {
	out, _ := runErr("sh", "-c", fmt.Sprintf("cat %s/logs/%s/pods/metallb-system_ironlb-speaker-*_speaker.log", stateDir, node))
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			lines = append(lines, l)
		}
	}
	return lines
}

// A speaker restart (its Pod deleted; the DaemonSet makes a new one) re-establishes that node's
// session and brings its next hop back; the other nodes' sessions are not touched.
func TestBGPSpeakerRestart(t *testing.T) {
	setupBGP(t)
	const ip = "172.30.1.6"
	applyBGPService(t, "bgp-restart", ip, "")
	waitNextHops(t, ip, addrsOf(labNodes...), 30*time.Second)
	type nbr struct {
		Dropped     int `json:"connectionsDropped"`
		Established int `json:"connectionsEstablished"`
	}
	var before map[string]nbr
	vtyshJSON(t, "show bgp neighbors", &before)
	pod := strings.TrimSpace(kubectl(t, "get", "pods", "-n", "metallb-system", "-l", "component=speaker",
		"--field-selector", "spec.nodeName=myk8s-worker3", "-o", "jsonpath={.items[0].metadata.name}"))
	kubectl(t, "delete", "pod", "-n", "metallb-system", pod)
	// The stopping speaker closes its session (a Cease), so worker3's next hop goes, then comes back
	// with the new speaker.
	eventually(t, 30*time.Second, "worker3's next hop withdrawn by the stopping speaker", func() error {
		if hops := routeNextHops(t, ip); slices.Contains(hops, "172.18.0.5") {
			return fmt.Errorf("next hops %v", hops)
		}
		return nil
	})
	waitNextHops(t, ip, addrsOf(labNodes...), 60*time.Second)
	var after map[string]nbr
	vtyshJSON(t, "show bgp neighbors", &after)
	for _, n := range []string{"myk8s-control-plane", "myk8s-worker", "myk8s-worker2"} {
		a := nodeAddr[n]
		if after[a] != before[a] {
			t.Errorf("%s's session changed across worker3's speaker restart: %+v -> %+v", n, before[a], after[a])
		}
	}
}
