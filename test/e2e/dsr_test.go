package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// dsrSuite: issue 19's direct server return (annotation ironlb.io/external-mode: dsr) in layer 2,
// in the ironlb-proxy lab. The pods are on worker and worker2, the address is announced by
// worker3: with externalTrafficPolicy Cluster the pods see mypc's own address and every pod
// answers; keep-alive connections from mypc survive worker3's power cut, while the same
// connections to a Service in snat mode, through the same cut, break (the test can fail).
func dsrSuite(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	kubectlApply(t, "testdata/seed000-metallb.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	dsrIP := addrRankedFirst(t, "myk8s-worker3")
	snatIP := addrRankedFirst(t, "myk8s-worker3", dsrIP)
	applyService(t, "dsr", dsrIP, map[string]string{"ironlb.io/external-mode": "dsr"}, "")
	applyService(t, "dsr-snat", snatIP, map[string]string{"ironlb.io/external-mode": "snat"}, "")
	for _, ip := range []string{dsrIP, snatIP} {
		if macs := arpingMACs(t, ip); len(macs) != 1 || macNode[macs[0]] != "myk8s-worker3" {
			t.Fatalf("%s answered by %v, want myk8s-worker3 only", ip, macs)
		}
	}

	t.Run("ClientAddressAndSpread", func(t *testing.T) {
		eventually(t, 30*time.Second, "dsr: 30 requests from mypc keep its address and reach both pods", func() error {
			seen := map[string]int{}
			for i := 0; i < 30; i++ {
				body, err := curl("mypc", "http://"+dsrIP)
				if err != nil {
					return fmt.Errorf("request %d: %v", i, err)
				}
				if ra := remoteAddr(body); ra != "172.18.0.100" {
					return fmt.Errorf("request %d: whoami saw RemoteAddr %q, want mypc's 172.18.0.100", i, ra)
				}
				seen[hostnameOf(body)]++
			}
			if seen["webpod1"] == 0 || seen["webpod2"] == 0 {
				return fmt.Errorf("30 requests reached %v, want both pods", seen)
			}
			t.Logf("dsr %s: 30 requests, client address kept, spread %v", dsrIP, seen)
			return nil
		})
		// The snat Service masquerades, as kube-proxy with Cluster policy.
		body, err := curl("mypc", "http://"+snatIP)
		if ra := remoteAddr(body); err != nil || ra == "172.18.0.100" {
			t.Errorf("snat: RemoteAddr %q (%v), want a node-side address", ra, err)
		}
		if tables, err := labExec("myk8s-worker3", "nft", "list", "table", "ip", "ironlb-dsr"); err != nil || !strings.Contains(tables, dsrIP+" . tcp . 80") || strings.Contains(tables, snatIP+" ") {
			t.Errorf("ironlb-dsr table on myk8s-worker3 (want %s in it, not %s): %v\n%s", dsrIP, snatIP, err, tables)
		}
	})

	// The DSR path's sysctls (dsrapply.Sysctls) were written on every node by the proxy, from its
	// container whose own /proc/sys is read-only: through the host's /proc/sys/net the chart mounts
	// (--proc-sys). nf_conntrack_tcp_be_liberal is 0 in a new network namespace and the lab does not
	// set it, so only the proxy can have made it 1.
	t.Run("SysctlsThroughHostProcSys", func(t *testing.T) {
		for _, node := range []string{"myk8s-worker", "myk8s-worker2", "myk8s-worker3"} {
			for name, want := range map[string]string{"net/netfilter/nf_conntrack_tcp_be_liberal": "1", "net/ipv4/conf/all/send_redirects": "0"} {
				got, err := labExec(node, "cat", "/proc/sys/"+name)
				if err != nil || strings.TrimSpace(got) != want {
					t.Errorf("%s: %s = %q (%v), want %s", node, name, strings.TrimSpace(got), err, want)
				}
			}
		}
		files, _ := filepath.Glob(filepath.Join(stateDir, "logs", "*", "pods", "metallb-system_ironlb-proxy-*_proxy.log"))
		if len(files) == 0 {
			t.Fatal("no proxy logs in the lab's logs")
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "read-only file system") {
					t.Errorf("%s: %s", filepath.Base(f), l)
				}
			}
		}
	})

	// Seed 003's externalTrafficPolicy experiment (its 2.5), with dsr beside the two policies: Local
	// keeps the client's address but reaches only the announcing node's pods, Cluster (snat) spreads
	// but masquerades; dsr must keep the address, reach every pod and time out on no request.
	t.Run("Seed003ExternalTrafficPolicy", func(t *testing.T) {
		localIP := addrRankedFirst(t, "myk8s-worker3", dsrIP, snatIP)
		applyService(t, "dsr-etp-local", localIP, nil, "  externalTrafficPolicy: Local\n")
		const n = 40
		type tally struct {
			answered, clientKept int
			pods                 map[string]int
		}
		count := func(ip string) tally {
			r := tally{pods: map[string]int{}}
			for range n {
				body, err := curl("mypc", "http://"+ip)
				if err != nil || hostnameOf(body) == "" {
					continue // a timeout or an error: not answered
				}
				r.answered++
				r.pods[hostnameOf(body)]++
				if remoteAddr(body) == "172.18.0.100" {
					r.clientKept++
				}
			}
			return r
		}
		res := map[string]tally{"Local": count(localIP), "Cluster (snat)": count(snatIP), "dsr": count(dsrIP)}
		for _, k := range []string{"Local", "Cluster (snat)", "dsr"} {
			r := res[k]
			t.Logf("%-14s %d of %d answered (%d timed out or failed), client address kept in %d, pods %v", k, r.answered, n, n-r.answered, r.clientKept, r.pods)
		}
		d := res["dsr"]
		if d.answered != n || d.clientKept != n || d.pods["webpod1"] == 0 || d.pods["webpod2"] == 0 {
			t.Errorf("dsr: %d of %d answered, client address kept in %d, pods %v; want every request answered with mypc's address and both pods", d.answered, n, d.clientKept, d.pods)
		}
		if c := res["Cluster (snat)"]; c.clientKept != 0 {
			t.Errorf("Cluster (snat): the pods saw mypc's address in %d requests, want none (masquerade)", c.clientKept)
		}
		if l := res["Local"]; len(l.pods) > 1 {
			t.Errorf("Local: requests reached %v, want the announcing node's pod only", l.pods)
		}
	})

	t.Run("ConnectionsSurviveAnnouncerPowerCut", func(t *testing.T) {
		r := cutWithOpenConnections(t, "mypc", dsrIP, snatIP)
		t.Logf("worker3 (the announcer) lost power: %s", r)
		if r.dsrBroken > 0 || r.dsrMoved > 0 {
			t.Errorf("dsr: %d of %d connections broke and %d changed pod through the announcer's power cut, want none", r.dsrBroken, r.n, r.dsrMoved)
		}
		if r.snatBroken == 0 {
			t.Errorf("snat: no connection broke through the announcer's power cut: the test cannot tell dsr from snat")
		}
	})

	t.Run("BGP", dsrBGP)
}

// dsrBGP: the same in BGP mode, from mypc2 behind the router, which spreads connections over the
// four nodes by ECMP: the pods see mypc2's address, both answer, and when worker3 (a next hop,
// without pods) loses power, the router moves its connections to other nodes, which forward them to
// the same backend node: no dsr connection breaks; snat connections that entered by worker3 do.
func dsrBGP(t *testing.T) {
	setupBGP(t)
	const dsrIP, snatIP = "172.30.1.11", "172.30.1.12"
	svcs := ""
	for name, ip := range map[string]string{"dsr-bgp": dsrIP, "dsr-bgp-snat": snatIP} {
		mode := "dsr"
		if name == "dsr-bgp-snat" {
			mode = "snat"
		}
		svcs += fmt.Sprintf("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  annotations:\n    metallb.io/loadBalancerIPs: %s\n    ironlb.io/external-mode: %s\nspec:\n  type: LoadBalancer\n  selector: {app: webpod}\n  ports: [{port: 80}]\n", name, ip, mode)
	}
	if out, err := runStdin(svcs, ironlb, "lab", "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = runStdin(svcs, ironlb, "lab", "kubectl", "delete", "--ignore-not-found", "-f", "-") })
	waitNextHops(t, dsrIP, addrsOf(labNodes...), 30*time.Second)
	waitNextHops(t, snatIP, addrsOf(labNodes...), 30*time.Second)
	eventually(t, 20*time.Second, "BFD up between the router and worker3", func() error {
		out, err := labExec("router", "vtysh", "-c", "show bfd peer 172.18.0.5 json")
		if err != nil || !strings.Contains(out, `"status":"up"`) {
			return fmt.Errorf("%v %s", err, out)
		}
		return nil
	})
	eventually(t, 30*time.Second, "dsr: 30 requests from mypc2 keep its address and reach both pods", func() error {
		seen := map[string]int{}
		for i := 0; i < 30; i++ {
			body, err := curl("mypc2", "http://"+dsrIP)
			if err != nil {
				return fmt.Errorf("request %d: %v", i, err)
			}
			if ra := remoteAddr(body); ra != "192.168.10.100" {
				return fmt.Errorf("request %d: whoami saw RemoteAddr %q, want mypc2's 192.168.10.100", i, ra)
			}
			seen[hostnameOf(body)]++
		}
		if seen["webpod1"] == 0 || seen["webpod2"] == 0 {
			return fmt.Errorf("30 requests reached %v, want both pods", seen)
		}
		t.Logf("dsr over BGP %s: 30 requests from mypc2, client address kept, spread %v", dsrIP, seen)
		return nil
	})
	r := cutWithOpenConnections(t, "mypc2", dsrIP, snatIP)
	t.Logf("BGP, worker3 (one of 4 next hops, no pods) lost power: %s", r)
	if r.dsrBroken > 0 || r.dsrMoved > 0 {
		t.Errorf("dsr over BGP: %d of %d connections broke and %d changed pod through a next hop's power cut, want none (their pods live on)", r.dsrBroken, r.n, r.dsrMoved)
	}
	if r.snatBroken == 0 {
		t.Logf("snat over BGP: no connection had entered by worker3 (ECMP put none of %d there)", r.n)
	}
}

// cutResult is what worker3's power cut did to the keep-alive connections of cutWithOpenConnections.
type cutResult struct {
	n                               int // connections per Service
	dsrBroken, dsrMoved, snatBroken int
	dsrStall                        time.Duration // the longest any dsr connection waited for an answer
}

func (r cutResult) String() string {
	return fmt.Sprintf("dsr %d of %d keep-alive connections broken (%d changed pod, longest stall %s), snat %d of %d broken",
		r.dsrBroken, r.n, r.dsrMoved, r.dsrStall.Round(time.Millisecond), r.snatBroken, r.n)
}

// cutWithOpenConnections opens 20 keep-alive connections from the lab host client to each of dsrIP
// and snatIP, each requesting every 100 ms, cuts worker3's power after 2 s (it is started again when
// the test ends), holds the connections 8 s more and counts what broke.
func cutWithOpenConnections(t *testing.T, client, dsrIP, snatIP string) cutResult {
	t.Helper()
	r := cutResult{n: 20}
	dsr := openKeepAlive(t, client, dsrIP, r.n)
	snat := openKeepAlive(t, client, snatIP, r.n)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range append(dsr, snat...) {
		wg.Go(func() { c.loop(stop) })
	}
	time.Sleep(2 * time.Second)
	run(t, ironlb, "lab", "stop-node", "myk8s-worker3")
	t.Cleanup(func() { run(t, ironlb, "lab", "start-node", "myk8s-worker3") })
	time.Sleep(8 * time.Second)
	close(stop)
	wg.Wait()
	for _, c := range dsr {
		if c.err != nil {
			r.dsrBroken++
			t.Logf("dsr connection %s broke after %d requests: %v", c.local, c.ok, c.err)
		}
		if c.moved {
			r.dsrMoved++
		}
	}
	for _, c := range snat {
		if c.err != nil {
			r.snatBroken++
		}
	}
	r.dsrStall = slowest(dsr)
	return r
}

// slowest is the longest any of conns waited for an answer.
func slowest(conns []*kaConn) time.Duration {
	var d time.Duration
	for _, c := range conns {
		d = max(d, c.slowest)
	}
	return d
}

// kaConn is one keep-alive HTTP connection that requests every 100 ms until stopped or broken.
type kaConn struct {
	c     net.Conn
	r     *bufio.Reader
	host  string // Host header
	local string
	pod   string // whoami's Hostname on the first answer
	ok    int    // answered requests
	moved bool   // a later answer came from another pod
	err   error  // why the connection broke
	// slowest is the longest a request took to be answered (the stall a cut caused), reported only.
	slowest time.Duration
}

// openKeepAlive dials n TCP connections to ip:80 from lab host ns's network namespace (a socket
// stays in the namespace it was made in) and has each answer one request.
func openKeepAlive(t *testing.T, ns, ip string, n int) []*kaConn {
	t.Helper()
	conns, err := dialIn(ns, ip+":80", n)
	if err != nil {
		t.Fatal(err)
	}
	var out []*kaConn
	for _, c := range conns {
		k := &kaConn{c: c, r: bufio.NewReader(c), host: ip, local: c.LocalAddr().String()}
		t.Cleanup(func() { c.Close() })
		if err := k.request(); err != nil {
			t.Fatalf("first request on %s to %s: %v", k.local, ip, err)
		}
		out = append(out, k)
	}
	return out
}

func dialIn(ns, addr string, n int) ([]net.Conn, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	h, err := netns.GetFromName(ns)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("netns %s: %w", ns, err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	var conns []net.Conn
	var derr error
	d := net.Dialer{Timeout: 3 * time.Second}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			derr = err
			break
		}
		conns = append(conns, c)
	}
	if err := netns.Set(orig); err != nil {
		// The thread stays in the lab's namespace: leave it locked so that it dies with the goroutine.
		return conns, errors.Join(derr, err)
	}
	runtime.UnlockOSThread()
	return conns, derr
}

func (k *kaConn) request() error {
	start := time.Now()
	defer func() { k.slowest = max(k.slowest, time.Since(start)) }()
	k.c.SetDeadline(start.Add(3 * time.Second))
	if _, err := fmt.Fprintf(k.c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", k.host); err != nil {
		return err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		return fmt.Errorf("status %s, close %v", resp.Status, resp.Close)
	}
	pod := hostnameOf(string(body))
	if k.pod == "" {
		k.pod = pod
	} else if pod != k.pod {
		k.moved = true
	}
	k.ok++
	return nil
}

func (k *kaConn) loop(stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if err := k.request(); err != nil {
				k.err = err
				return
			}
		}
	}
}
