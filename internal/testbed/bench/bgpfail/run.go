package bgpfail

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/testbed/bench/benchcfg"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// VIP is the benchmark's service address, from a pool outside the nodes' subnet: only the router
// can bring the client to it.
var VIP = netip.MustParseAddr("172.30.0.10")

// Options say what to run.
type Options struct {
	Self     string        // the ironlb binary
	Speaker  string        // "ironlb" or "metallb" (native BGP mode, no BFD)
	BFD      time.Duration // BFD interval (× 3); 0 for no BFD
	HoldTime time.Duration // BGP hold time (keepalive a third of it)
	Trials   int
	Cut      string        // the node to cut
	Window   time.Duration // probing after the cut, before the node returns
	RawDir   string        // if set, each trial's route events and probe log go there
	Log      func(format string, args ...any)
}

// Label names the configuration in tables.
func (o Options) Label() string {
	sp := "ironlb"
	if o.Speaker == "metallb" {
		sp = "MetalLB v0.16.1 (native BGP)"
	}
	bfd := "no BFD"
	if o.BFD > 0 {
		bfd = fmt.Sprintf("BFD %s × 3", o.BFD)
	}
	return fmt.Sprintf("%s, %s, hold time %s", sp, bfd, o.HoldTime)
}

// The benchmark's configuration objects; each is replaced whole (benchcfg), so nothing an earlier
// run set survives.
const (
	poolYAML = `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: bench-bgp, namespace: metallb-system}
spec:
  addresses: [172.30.0.0/28]
`
	adYAML = `apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bench-bgp, namespace: metallb-system}
spec:
  ipAddressPools: [bench-bgp]
`
	peerYAML = `apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: router, namespace: metallb-system}
spec:
  myASN: %d
  peerASN: %d
  peerAddress: %s
  holdTime: %s
%s`
	bfdYAML = `apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: bench, namespace: metallb-system}
spec: {receiveInterval: %d, transmitInterval: %d, detectMultiplier: 3}
`
	serviceYAML = `apiVersion: v1
kind: Service
metadata:
  name: bench-bgp
  namespace: default
  annotations: {metallb.io/loadBalancerIPs: "%s"}
spec:
  type: LoadBalancer
  selector: {app: bench-web}
  ports: [{port: 80}]
`
)

// Objects returns exactly what a run with o needs in the cluster: the pool, the advertisement, the
// router's BGPPeer (with the BFD profile it names when o.BFD > 0, put before it), and the workload.
// Every other BGPPeer, BGPAdvertisement, BFDProfile and Community goes (benchcfg.Owned): MetalLB's
// native speaker refuses a whole configuration in which any peer has a BFD profile.
func (o Options) Objects() []benchcfg.Object {
	cfg := func(res, name, manifest string) benchcfg.Object {
		return benchcfg.Object{Ref: benchcfg.Ref{Resource: res, Namespace: benchcfg.Namespace, Name: name}, Manifest: manifest, Replace: true}
	}
	objs := []benchcfg.Object{
		cfg("ipaddresspool.metallb.io", "bench-bgp", poolYAML),
		cfg("bgpadvertisement.metallb.io", "bench-bgp", adYAML),
	}
	bfd := ""
	if o.BFD > 0 {
		ms := o.BFD.Milliseconds()
		objs = append(objs, cfg("bfdprofile.metallb.io", "bench", fmt.Sprintf(bfdYAML, ms, ms)))
		bfd = "  bfdProfile: bench\n"
	}
	objs = append(objs, cfg("bgppeer.metallb.io", "router", fmt.Sprintf(peerYAML, lab.NodeASN, lab.RouterASN, "172.18.255.254", o.HoldTime, bfd)),
		benchcfg.Workload,
		benchcfg.Object{Ref: benchcfg.Ref{Resource: "service", Namespace: "default", Name: "bench-bgp"}, Manifest: fmt.Sprintf(serviceYAML, VIP)})
	return objs
}

// Setup runs the chosen speaker and makes the cluster hold exactly the benchmark's configuration
// and workload (Objects). It returns when it started writing them, for Ready.
func Setup(ctx context.Context, l *lab.Lab, o Options) (applied time.Time, err error) {
	if l.Plan.Router.Name == "" {
		return time.Time{}, fmt.Errorf("the lab has no router: bring it up with `ironlb lab up --bgp`")
	}
	if o.Speaker == "metallb" && o.BFD > 0 {
		return time.Time{}, fmt.Errorf("MetalLB's native BGP mode has no BFD: use --bfd 0")
	}
	fo := failover.Options{Self: o.Self, Speaker: o.Speaker, Memberlist: "default", Log: o.Log}
	if err := failover.UseSpeaker(ctx, fo); err != nil {
		return time.Time{}, err
	}
	if applied, err = benchcfg.Apply(ctx, o.kubectl, o.Objects()); err != nil {
		return applied, err
	}
	return applied, kubectl(ctx, o.Self, "", "rollout", "status", "deploy/bench-web", "--timeout=120s")
}

// kubectl is benchcfg's Kubectl for o.
func (o Options) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	return failover.Kubectl(ctx, o.Self, stdin, args...)
}

// Ready waits until the router's route to VIP has exactly the nodes as next hops, and fails at once
// with the speakers' own words if they refuse the configuration Setup applied at applied.
func Ready(ctx context.Context, l *lab.Lab, o Options, mon *Monitor, applied time.Time, timeout time.Duration) error {
	wctx, cancel := context.WithCancel(ctx)
	refused := make(chan error, 1)
	go func() { refused <- benchcfg.Watch(wctx, o.kubectl, applied, 2*time.Second) }()
	err := mon.WaitNextHopsOr(wctx, NodeAddrs(l), timeout, refused)
	cancel()
	return err
}

func kubectl(ctx context.Context, self, stdin string, args ...string) error {
	_, err := failover.Kubectl(ctx, self, stdin, args...)
	return err
}

// Monitor follows the router's kernel route to an address over netlink.
type Monitor struct {
	mu     sync.Mutex
	events []RouteEvent
	cur    []netip.Addr
	done   chan struct{}
}

// Watch starts following the route to vip in the router's namespace.
func Watch(l *lab.Lab, vip netip.Addr) (*Monitor, error) {
	h, err := netns.GetFromPath(lab.NetNSPath(l.Plan.Router.Name))
	if err != nil {
		return nil, err
	}
	defer h.Close()
	m := &Monitor{done: make(chan struct{})}
	ch := make(chan netlink.RouteUpdate, 4096)
	if err := netlink.RouteSubscribeWithOptions(ch, m.done, netlink.RouteSubscribeOptions{Namespace: &h, ListExisting: true}); err != nil {
		return nil, err
	}
	go func() {
		for u := range ch {
			at := time.Now()
			if u.Dst == nil || u.Table != unix.RT_TABLE_MAIN {
				continue
			}
			ones, _ := u.Dst.Mask.Size()
			a, ok := netip.AddrFromSlice(u.Dst.IP)
			if !ok || a.Unmap() != vip || ones != 32 {
				continue
			}
			var hops []netip.Addr
			if u.Type == unix.RTM_NEWROUTE {
				if gw, ok := netip.AddrFromSlice(u.Gw); ok && u.Gw != nil {
					hops = append(hops, gw.Unmap())
				}
				for _, nh := range u.MultiPath {
					if gw, ok := netip.AddrFromSlice(nh.Gw); ok && nh.Gw != nil {
						hops = append(hops, gw.Unmap())
					}
				}
			}
			slices.SortFunc(hops, func(a, b netip.Addr) int { return a.Compare(b) })
			m.mu.Lock()
			m.cur = hops
			m.events = append(m.events, RouteEvent{At: at, NextHops: hops})
			m.mu.Unlock()
		}
	}()
	return m, nil
}

// Close stops the monitor.
func (m *Monitor) Close() { close(m.done) }

// NextHops returns the route's next hops now.
func (m *Monitor) NextHops() []netip.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.cur)
}

// Since returns the events from t on.
func (m *Monitor) Since(t time.Time) []RouteEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []RouteEvent
	for _, e := range m.events {
		if !e.At.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// WaitNextHops waits until the route has exactly the given next hops.
func (m *Monitor) WaitNextHops(ctx context.Context, want []netip.Addr, timeout time.Duration) error {
	return m.WaitNextHopsOr(ctx, want, timeout, nil)
}

// WaitNextHopsOr is WaitNextHops that also returns the first non-nil error from fail.
func (m *Monitor) WaitNextHopsOr(ctx context.Context, want []netip.Addr, timeout time.Duration, fail <-chan error) error {
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b netip.Addr) int { return a.Compare(b) })
	deadline := time.Now().Add(timeout)
	for {
		if got := m.NextHops(); slices.Equal(got, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the router's route to %s has next hops %v after %s, want %v", VIP, m.NextHops(), timeout, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-fail:
			if err != nil {
				return err
			}
			fail = nil // Watch ended without a refusal
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitBFDUp waits until the router's BFD session with peer is up.
func WaitBFDUp(ctx context.Context, l *lab.Lab, peer netip.Addr, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := l.Vtysh(ctx, "show bfd peer "+peer.String()+" json")
		if err == nil && strings.Contains(out, `"status":"up"`) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the router's BFD session with %s is not up after %s: %s", peer, timeout, out)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NodeAddrs returns the nodes' addresses on the bridge.
func NodeAddrs(l *lab.Lab) []netip.Addr {
	var out []netip.Addr
	for _, n := range l.Plan.Nodes {
		out = append(out, n.Addr)
	}
	return out
}

// Run runs the trials.
func Run(ctx context.Context, l *lab.Lab, o Options) ([]Trial, error) {
	cutHost, ok := l.Plan.Host(o.Cut)
	if !ok || !cutHost.IsNode() {
		return nil, fmt.Errorf("no node %q", o.Cut)
	}
	applied, err := Setup(ctx, l, o)
	if err != nil {
		return nil, err
	}
	mon, err := Watch(l, VIP)
	if err != nil {
		return nil, err
	}
	defer mon.Close()
	url := "http://" + VIP.String() + "/"
	var trials []Trial
	if err := Ready(ctx, l, o, mon, applied, 120*time.Second); err != nil {
		return nil, err
	}
	for i := 1; i <= o.Trials; i++ {
		if err := mon.WaitNextHops(ctx, NodeAddrs(l), 120*time.Second); err != nil {
			return trials, fmt.Errorf("before trial %d: %w", i, err)
		}
		// The router starts BFD once the BGP session is up, and BFD takes a second or two to come
		// up (FRR sends slowly until then): a cut before that would measure the hold time.
		if o.BFD > 0 && o.Speaker != "metallb" {
			if err := WaitBFDUp(ctx, l, cutHost.Addr, 60*time.Second); err != nil {
				return trials, fmt.Errorf("before trial %d: %w", i, err)
			}
		}
		back := 10 * time.Second
		total := time.Second + o.Window + back
		probe := exec.CommandContext(ctx, o.Self, "lab", "exec", lab.Client2Name, "--", o.Self, "probe",
			"--url", url, "--every", "10ms", "--for", total.String(), "--timeout", "200ms")
		var out bytes.Buffer
		probe.Stdout = &out
		if err := probe.Start(); err != nil {
			return trials, err
		}
		time.Sleep(time.Second)
		cut, err := l.PowerCut(ctx, o.Cut)
		if err != nil {
			_ = probe.Wait()
			return trials, err
		}
		time.Sleep(time.Until(cut.Add(o.Window)))
		backAt := time.Now()
		if err := l.StartNode(ctx, o.Cut); err != nil {
			_ = probe.Wait()
			return trials, err
		}
		if err := probe.Wait(); err != nil {
			return trials, fmt.Errorf("probe: %w", err)
		}
		routes := mon.Since(cut.Add(-2 * time.Second))
		reqs, err := failover.Parse(bytes.NewReader(out.Bytes()))
		if err != nil {
			return trials, err
		}
		if o.RawDir != "" {
			_ = os.MkdirAll(o.RawDir, 0o755)
			var b strings.Builder
			fmt.Fprintf(&b, "cut %d\nback %d\n", cut.UnixNano(), backAt.UnixNano())
			for _, e := range routes {
				fmt.Fprintf(&b, "route %d %v\n", e.At.UnixNano(), e.NextHops)
			}
			b.Write(out.Bytes())
			_ = os.WriteFile(filepath.Join(o.RawDir, fmt.Sprintf("trial-%02d.log", i)), []byte(b.String()), 0o644)
		}
		t := Analyze(routes, reqs, cutHost.Addr, cut, backAt)
		if b, err := os.ReadFile(l.RouterLog("bfdd")); err == nil && o.BFD > 0 {
			if at, ok := BFDDownAt(string(b), cutHost.Addr, cut); ok && at.Before(backAt) {
				t.BFDDown = at.Sub(cut)
			}
		}
		trials = append(trials, t)
		o.Log("trial %2d/%d: BFD down at the router after %s, route withdrawn after %s, client outage %s (%d/%d failed) | return: route back after %s, %d failed",
			i, o.Trials, ms(t.BFDDown), ms(t.Withdrawn), ms(t.ClientOutage), t.Failed, t.Sent, ms(t.Readded), t.BackFailed)
	}
	return trials, nil
}

// MeasureSpread sends n requests from mypc2, each on a new connection, and counts them by receiving
// node and by pod.
func MeasureSpread(ctx context.Context, l *lab.Lab, self string, n int) (byNode, byPod map[string]int, err error) {
	script := fmt.Sprintf("for i in $(seq %d); do curl -s --max-time 2 http://%s/; echo; done", n, VIP)
	cmd := exec.CommandContext(ctx, self, "lab", "exec", lab.Client2Name, "--", "sh", "-c", script)
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("curl from %s: %w", lab.Client2Name, err)
	}
	podCIDRs, err := nodePodCIDRs(ctx, self)
	if err != nil {
		return nil, nil, err
	}
	nodeOf := func(a netip.Addr) string {
		for _, h := range l.Plan.Nodes {
			if h.Addr == a {
				return h.Name
			}
		}
		for name, p := range podCIDRs {
			if p.Contains(a) {
				return name
			}
		}
		return ""
	}
	var remotes []netip.Addr
	byPod = map[string]int{}
	hostRE := regexp.MustCompile(`(?m)^Hostname: (\S+)`)
	remoteRE := regexp.MustCompile(`(?m)^RemoteAddr: (\S+)`)
	for _, m := range hostRE.FindAllStringSubmatch(string(out), -1) {
		byPod[m[1]]++
	}
	for _, m := range remoteRE.FindAllStringSubmatch(string(out), -1) {
		if ap, err := netip.ParseAddrPort(m[1]); err == nil {
			remotes = append(remotes, ap.Addr())
		}
	}
	return Spread(remotes, nodeOf), byPod, nil
}

func nodePodCIDRs(ctx context.Context, self string) (map[string]netip.Prefix, error) {
	out, err := exec.CommandContext(ctx, self, "lab", "kubectl", "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.podCIDR}{"\n"}{end}`).Output()
	if err != nil {
		return nil, err
	}
	m := map[string]netip.Prefix{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			if p, err := netip.ParsePrefix(f[1]); err == nil {
				m[f[0]] = p
			}
		}
	}
	return m, nil
}
