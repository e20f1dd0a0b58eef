package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/testbed/attack"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// The adapters of issue 18's faults: attacks from the client's namespace (through package attack),
// a paused controller, a flapping interface, failing nftables commits, a lost webhook Secret. The
// decisions about what they may change are the pure Judge functions in invariants.go.

// heartbeatPort is the speakers' UDP heartbeat port (the speaker's --heartbeat-port, which the
// lab's manifests leave at its default).
const heartbeatPort = 7947

func parseMAC(s string) net.HardwareAddr {
	m, _ := net.ParseMAC(s)
	return m
}

// probedServices are the probed Services' names, in probeAddrs' order.
func probedServices() []string {
	var out []string
	for i := range probeAddrs {
		out = append(out, fmt.Sprintf("chaos-p%d", i+1))
	}
	return out
}

// announcers returns the announcing node of each probed Service that has exactly one
// ServiceL2Status.
func (r *runner) announcers(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := r.dyn.Resource(v1beta1.ServiceL2StatusGVR).Namespace("metallb-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	nodes := map[string][]string{}
	for _, u := range l.Items {
		ns, _, _ := unstructured.NestedString(u.Object, "status", "serviceNamespace")
		svc, _, _ := unstructured.NestedString(u.Object, "status", "serviceName")
		node, _, _ := unstructured.NestedString(u.Object, "status", "node")
		if ns == namespace && slices.Contains(probedServices(), svc) && node != "" {
			nodes[svc] = append(nodes[svc], node)
		}
	}
	out := map[string]string{}
	for svc, ns := range nodes {
		if len(ns) == 1 {
			out[svc] = ns[0]
		}
	}
	return out, nil
}

// electionLoop samples the probed Services' announcers every second.
func (r *runner) electionLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		an, err := r.announcers(ctx)
		if err != nil {
			continue
		}
		now := time.Now()
		r.mu.Lock()
		for _, svc := range probedServices() {
			r.elects = append(r.elects, Election{At: now, Service: svc, Node: an[svc]})
		}
		r.mu.Unlock()
	}
}

// peerEvents reads the speakers' logs (every node, every container generation) for their view
// changes between from and to.
func (r *runner) peerEvents(from, to time.Time) []PeerEvent {
	files, _ := filepath.Glob(filepath.Join(r.l.State.Dir, "logs", "*", "pods", "metallb-system_*speaker*_speaker.log"))
	var out []PeerEvent
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			for _, e := range ParsePeerLines(sc.Text()) {
				if !e.At.Before(from) && !e.At.After(to) {
					out = append(out, e)
				}
			}
		}
		fh.Close()
	}
	slices.SortFunc(out, func(a, b PeerEvent) int { return a.At.Compare(b.At) })
	return out
}

// victim returns the announcer of a probed Service (the first that has one), else a random worker.
func (r *runner) victim(ctx context.Context) lab.Host {
	an, _ := r.announcers(ctx)
	for _, svc := range probedServices() {
		if h, ok := r.l.Plan.Host(an[svc]); ok && h.Role == lab.RoleWorker {
			return h
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.workers()
	h, _ := r.l.Plan.Host(ws[r.rng.IntN(len(ws))])
	return h
}

// sendAll sends each payload to every node's heartbeat port, every interval, for d.
func sendAll(s *attack.UDPSender, nodes []lab.Host, payloads [][]byte, every, d time.Duration) int {
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(every) {
		for _, p := range payloads {
			for _, h := range nodes {
				if s.Send(netip.AddrPortFrom(h.Addr, heartbeatPort), p) == nil {
					n++
				}
			}
		}
	}
	return n
}

// forgedHeartbeat forges, from the client's own address, heartbeats in the name of a probed
// Service's announcer saying it leaves and is not ready, then floods 300 unknown names.
func (r *runner) forgedHeartbeat(ctx context.Context) (string, error) {
	v := r.victim(ctx)
	c := r.l.Plan.Client
	s, err := attack.DialUDP(c.Name, netip.AddrPortFrom(c.Addr, 0))
	if err != nil {
		return "", err
	}
	defer s.Close()
	from := time.Now()
	sent := sendAll(s, r.l.Plan.Nodes, [][]byte{attack.Leaving(v.Name, "eth0", time.Now()), attack.NotReady(v.Name, "eth0", time.Now())}, 10*time.Millisecond, 3*time.Second)
	ghosts := attack.Ghosts("chaos-ghost", 300, time.Now())
	sent += sendAll(s, r.l.Plan.Nodes, ghosts, 500*time.Millisecond, 2*time.Second)
	r.spanSince(FaultForgedHeartbeat, v.Name, SpanAttack, from)
	time.Sleep(2 * time.Second) // the views settle before the next fault
	return fmt.Sprintf("forged-heartbeat: %d packets from %s: %s leaving and not ready for 3 s, then 300 unknown names for 2 s", sent, c.Name, v.Name), nil
}

// replayedHeartbeat captures a worker's heartbeats on its eth0, replays them from the client's own
// address, then cuts the worker's power, gives the client its address and replays its heartbeats
// from there; the address goes and the worker comes back.
func (r *runner) replayedHeartbeat(ctx context.Context) (string, error) {
	v := r.victim(ctx)
	c := r.l.Plan.Client
	caps, err := attack.Capture(ctx, v.Name, "eth0", heartbeatPort, 1500*time.Millisecond)
	if err != nil {
		return "", err
	}
	own := attack.From(caps, v.Addr)
	if len(own) == 0 {
		return "", fmt.Errorf("no heartbeat of %s captured on its eth0 (%d datagrams)", v.Name, len(caps))
	}
	from := time.Now() // the attack's span, recorded when it ends, or when the fault fails
	spanned := false
	defer func() {
		if !spanned {
			r.spanSince(FaultReplayedHeartbeat, v.Name, SpanAttack, from)
		}
	}()
	// From the client's own address: every captured datagram to its first destination.
	s, err := attack.DialUDP(c.Name, netip.AddrPortFrom(c.Addr, 0))
	if err != nil {
		return "", err
	}
	sent := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, d := range caps {
			if s.Send(d.Dst, d.Payload) == nil {
				sent++
			}
		}
	}
	s.Close()
	// From the cut worker's address, taken over.
	r.window(FaultReplayedHeartbeat, failoverBudget)
	r.span(FaultReplayedHeartbeat, v.Name, SpanLoses, 5*time.Second+returnBudget)
	r.noteCut(ctx, v.Name)
	defer r.spanSince(FaultReplayedHeartbeat, v.Name, SpanCutOff, time.Now())
	if err := r.l.StopNode(ctx, v.Name); err != nil {
		return "", err
	}
	r.mu.Lock()
	r.stops[v.Name]++
	r.taken = append(r.taken, v.Addr)
	r.mu.Unlock()
	if err := r.l.ExtraAddr(ctx, c.Name, v.Addr, true); err != nil {
		return "", err
	}
	// The nodes learn the address's new MAC as a router would: gratuitous ARP from the client.
	if a, err := attack.DialARP(c.Name, "eth0"); err == nil {
		if fs, err := attack.ARPClaims(parseMAC(c.MAC), v.Addr, nil); err == nil {
			for range 3 {
				for _, f := range fs {
					_ = a.Send(f)
				}
			}
		}
		a.Close()
	}
	s2, err := attack.DialUDP(c.Name, netip.AddrPortFrom(v.Addr, heartbeatPort))
	if err != nil {
		return "", err
	}
	sentCut := 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		for _, d := range own {
			if s2.Send(d.Dst, d.Payload) == nil {
				sentCut++
			}
			time.Sleep(50 * time.Millisecond / time.Duration(max(1, len(r.l.Plan.Nodes)-1)))
		}
	}
	s2.Close()
	r.spanSince(FaultReplayedHeartbeat, v.Name, SpanAttack, from)
	spanned = true
	if err := r.l.ExtraAddr(ctx, c.Name, v.Addr, false); err != nil {
		return "", err
	}
	r.window(FaultReplayedHeartbeat+" (power back)", failoverBudget)
	r.span(FaultReplayedHeartbeat, v.Name, SpanRegains, returnBudget)
	if err := r.l.StartNode(ctx, v.Name); err != nil {
		return "", err
	}
	r.reclaimAddr(v)
	time.Sleep(4 * time.Second)
	return fmt.Sprintf("replayed-heartbeat: %d captured datagrams (%d from %s) replayed %d times from %s, then %s cut and %d of its heartbeats replayed from its address on %s",
		len(caps), len(own), v.Name, sent, c.Name, v.Name, sentCut, c.Name), nil
}

// reclaimAddr has a node announce its own address again (gratuitous ARP from its namespace), so its
// peers' neighbour entries leave the client's MAC.
func (r *runner) reclaimAddr(h lab.Host) {
	a, err := attack.DialARP(h.Name, "eth0")
	if err != nil {
		return
	}
	defer a.Close()
	if fs, err := attack.ARPClaims(parseMAC(h.MAC), h.Addr, nil); err == nil {
		for _, f := range fs {
			_ = a.Send(f)
		}
	}
}

// forgedARP claims a probed address for the client's MAC: gratuitous ARP and replies to every node,
// every 20 ms for 4 s.
func (r *runner) forgedARP(ctx context.Context) (string, error) {
	c := r.l.Plan.Client
	r.mu.Lock()
	vip := probeAddrs[r.rng.IntN(len(probeAddrs))]
	r.mu.Unlock()
	var targets []attack.Target
	for _, n := range r.l.Plan.Nodes {
		targets = append(targets, attack.Target{Addr: n.Addr, MAC: parseMAC(n.MAC)})
	}
	fs, err := attack.ARPClaims(parseMAC(c.MAC), vip, targets)
	if err != nil {
		return "", err
	}
	a, err := attack.DialARP(c.Name, "eth0")
	if err != nil {
		return "", err
	}
	defer a.Close()
	from := time.Now()
	sent := 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, f := range fs {
			if a.Send(f) == nil {
				sent++
			}
		}
	}
	r.spanSince(FaultForgedARP, "", SpanAttack, from)
	time.Sleep(time.Second)
	return fmt.Sprintf("forged-arp: %d ARP packets claiming %s for %s's MAC %s", sent, vip, c.Name, c.MAC), nil
}

// pauseController SIGSTOPs the lease holder's controller for 20 s, longer than its lease (15 s, and a
// retry period of 2 s for another replica to see it expired), then
// SIGCONTs it: another replica takes over, and the paused one must notice it lost the lease before
// it writes anything.
func (r *runner) pauseController(ctx context.Context) (string, error) {
	// The holder may be a replica just killed, its lease not expired yet: wait for a running one.
	var leader string
	var procs []int
	var err error
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(time.Second) {
		if leader = r.leader(ctx); leader == "" {
			err = fmt.Errorf("no controller lease holder")
		} else if p, gerr := r.cs.CoreV1().Pods("metallb-system").Get(ctx, leader, metav1.GetOptions{}); gerr != nil {
			err = fmt.Errorf("the lease holder %q: %w", leader, gerr)
		} else if procs, err = r.containerProcs(*p, "controller"); err == nil {
			break
		}
		if time.Now().After(end) {
			return "", err
		}
	}
	r.mu.Lock()
	r.paused = append(r.paused, procs...)
	// Nothing reconciles until another replica takes the lease.
	r.track.ControlPlaneBack = time.Now().Add(20 * time.Second)
	r.mu.Unlock()
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	time.Sleep(20 * time.Second)
	during := r.leader(ctx) // another replica's, if the lease moved as it should
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	r.mu.Lock()
	r.paused = slices.DeleteFunc(r.paused, func(pid int) bool { return slices.Contains(procs, pid) })
	r.mu.Unlock()
	time.Sleep(time.Second)
	return fmt.Sprintf("pause-controller: %s (pid %v) stopped for 20 s; lease holder at its end: %s, 1 s later: %s", leader, procs, during, r.leader(ctx)), nil
}

// responderIface takes a worker's eth0 down in its namespace for 5 s, then up with its addresses
// and routes.
func (r *runner) responderIface(ctx context.Context, node string) (string, error) {
	r.window(FaultResponderIface, failoverBudget)
	r.span(FaultResponderIface, node, SpanLoses, 5*time.Second+returnBudget)
	r.span(FaultResponderIface, node, SpanRegains, 5*time.Second+returnBudget)
	defer r.spanSince(FaultResponderIface, node, SpanCutOff, time.Now())
	up := time.AfterFunc(5*time.Second, func() { r.window(FaultResponderIface+" (up)", failoverBudget) })
	defer up.Stop()
	if err := r.l.FlapIface(ctx, node, 5*time.Second); err != nil {
		return "", err
	}
	time.Sleep(3 * time.Second)
	return "responder-iface: eth0 of " + node + " down for 5 s", nil
}

// The nft-fail fault's objects: a chain of its own in the proxy's table and elements of service-ips
// going to it, for the addresses and ports the churn may give a Service next. The proxy's next
// commit adding one of them fails (the element exists with another verdict); its full resync
// flushes the map and the fault puts its elements back, for 6 s.
const rogueChain = "chaos-nft-hold"

// nftElems lists a node's service-ips map.
func nftElems(ctx context.Context, node string) ([]MapElem, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", node, "nft", "-j", "list", "map", "ip", "ironlb", "service-ips").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list map ip ironlb service-ips on %s: %w", node, err)
	}
	return ParseServiceIPs(out)
}

func nftRun(ctx context.Context, node, script string) error {
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", node, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f on %s: %w: %s", node, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// churnKeys are the address, protocol and port triples the churn may give a Service.
func churnKeys() []MapElem {
	var out []MapElem
	add := func(p netip.Prefix) {
		for a := p.Addr(); p.Contains(a); a = a.Next() {
			for port := int32(80); port <= 82; port++ {
				out = append(out, MapElem{Addr: a, Proto: "tcp", Port: port})
			}
		}
	}
	add(netip.MustParsePrefix("172.18.210.0/28"))
	add(netip.MustParsePrefix(poolBWide))
	return out
}

func (r *runner) nftFail(ctx context.Context, node string) (string, error) {
	if _, err := nftElems(ctx, node); err != nil {
		return "", fmt.Errorf("%w (the fault needs the lab's ironlb proxy: lab up --proxy=ironlb)", err)
	}
	r.mu.Lock()
	r.rogue = append(r.rogue, node)
	r.mu.Unlock()
	if err := nftRun(ctx, node, "add chain ip ironlb "+rogueChain+"\n"); err != nil {
		return "", err
	}
	added, wiped := 0, 0
	mine := map[MapElem]bool{} // rogue elements added and not seen flushed yet
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		elems, err := nftElems(ctx, node)
		if err != nil {
			continue
		}
		have := map[MapElem]bool{}
		for _, e := range elems {
			have[MapElem{Addr: e.Addr, Proto: e.Proto, Port: e.Port}] = true
		}
		for k := range mine {
			if !have[k] {
				wiped++ // the proxy's full resync flushed the map
				delete(mine, k)
			}
		}
		var b strings.Builder
		var adding []MapElem
		for _, k := range churnKeys() {
			if !have[k] {
				fmt.Fprintf(&b, "add element ip ironlb service-ips { %s . %s . %d : goto %s }\n", k.Addr, k.Proto, k.Port, rogueChain)
				adding = append(adding, k)
			}
		}
		// One batch: it fails as a whole when the proxy added one of its keys since the listing.
		if len(adding) > 0 && nftRun(ctx, node, b.String()) == nil {
			added += len(adding)
			for _, k := range adding {
				mine[k] = true
			}
		}
	}
	// The proxy must have replaced every rogue element a Service needs by now, and kept the probed
	// Services' rules.
	time.Sleep(3 * time.Second)
	elems, err := nftElems(ctx, node)
	if err == nil {
		if svcs, err := r.services(ctx); err == nil {
			r.record(CheckServiceIPs(node, svcs, []string{namespace + "/chaos-p1", namespace + "/chaos-p2"}, elems, rogueChain))
		}
	}
	if err := releaseNFT(ctx, node); err != nil {
		return "", err
	}
	r.mu.Lock()
	r.rogue = slices.DeleteFunc(r.rogue, func(n string) bool { return n == node })
	r.mu.Unlock()
	return fmt.Sprintf("nft-fail on %s: %d conflicting elements added over 6 s, %d flushed by the proxy's resyncs", node, added, wiped), nil
}

// releaseNFT removes the fault's elements and chain from a node's table.
func releaseNFT(ctx context.Context, node string) error {
	elems, err := nftElems(ctx, node)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range elems {
		if e.Target == rogueChain {
			fmt.Fprintf(&b, "delete element ip ironlb service-ips { %s . %s . %d }\n", e.Addr, e.Proto, e.Port)
		}
	}
	b.WriteString("delete chain ip ironlb " + rogueChain + "\n")
	return nftRun(ctx, node, b.String())
}

// ParseServiceIPs reads `nft -j list map ip ironlb service-ips`.
func ParseServiceIPs(b []byte) ([]MapElem, error) {
	var doc struct {
		Nftables []struct {
			Map *struct {
				Elem [][2]json.RawMessage `json:"elem"`
			} `json:"map"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	var out []MapElem
	for _, o := range doc.Nftables {
		if o.Map == nil {
			continue
		}
		for _, e := range o.Map.Elem {
			var key struct {
				Concat []json.RawMessage `json:"concat"`
			}
			var verdict map[string]struct {
				Target string `json:"target"`
			}
			if json.Unmarshal(e[0], &key) != nil || len(key.Concat) != 3 || json.Unmarshal(e[1], &verdict) != nil {
				continue
			}
			var addr, proto string
			var port int32
			if json.Unmarshal(key.Concat[0], &addr) != nil || json.Unmarshal(key.Concat[1], &proto) != nil || json.Unmarshal(key.Concat[2], &port) != nil {
				continue
			}
			a, err := netip.ParseAddr(addr)
			if err != nil {
				continue
			}
			m := MapElem{Addr: a, Proto: strings.ToLower(proto), Port: port}
			for _, v := range verdict {
				m.Target = v.Target
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// services lists the LoadBalancer Services as the invariants see them.
func (r *runner) services(ctx context.Context) ([]Svc, error) {
	sl, err := r.cs.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return lbServices(sl.Items), nil
}

// webhookSecretName is the controller's serving certificate Secret (internal/controller/webhook.go).
const webhookSecretName = "ironlb-webhook-cert"

// webhookSecretNS holds it, out of the speakers' reach (config/controller/01-webhook-namespace.yaml).
const webhookSecretNS = "metallb-system-webhook"

// webhookSecret deletes the webhook's Secret and restarts a controller replica (which makes a new
// one, with a new CA); from 3 s after the new Secret exists, for 5 s, a valid IPAddressPool update (a
// server-side dry run, which the webhook sees) must be admitted.
func (r *runner) webhookSecret(ctx context.Context) (string, error) {
	err := r.cs.CoreV1().Secrets(webhookSecretNS).Delete(ctx, webhookSecretName, metav1.DeleteOptions{})
	if err != nil && !errors.IsNotFound(err) {
		return "", err
	}
	what, err := r.killController(ctx)
	if err != nil {
		return "", err
	}
	// The restarted replica makes a new Secret (a new CA in the webhook configuration); from 3 s after
	// it exists, every replica must serve a certificate the apiserver trusts.
	recreated := false
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if _, err := r.cs.CoreV1().Secrets(webhookSecretNS).Get(ctx, webhookSecretName, metav1.GetOptions{}); err == nil {
			recreated = true
			break
		}
	}
	t0 := time.Now()
	var attempts []Attempt
	patch := []byte(`{"metadata":{"annotations":{"chaos.ironlb.io/webhook-check":"` + t0.Format("150405") + `"}}}`)
	for end := t0.Add(8 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		at := time.Now()
		_, err := r.dyn.Resource(v1beta1.IPAddressPoolGVR).Namespace("metallb-system").Patch(ctx, poolA, types.MergePatchType, patch,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		a := Attempt{At: at}
		if err != nil {
			a.Err = err.Error()
		}
		attempts = append(attempts, a)
	}
	if !recreated {
		attempts = append(attempts, Attempt{At: time.Now(), Err: "the restarted controller did not recreate " + webhookSecretName + " within 30 s"})
	}
	fs := JudgeWebhook(attempts, t0.Add(3*time.Second))
	r.record(fs)
	r.mu.Lock()
	r.webhookHit = true
	r.mu.Unlock()
	return fmt.Sprintf("webhook-secret: %s deleted, then %s; %d of %d pool updates refused once it was back", webhookSecretName, what, len(fs), len(attempts)), nil
}

// undoAttacks puts back what the attack faults changed, on every path: paused processes continue,
// the client gives back addresses it took over, rogue nftables objects go, and after a webhook-secret
// fault the controllers restart so that they serve one certificate again.
func (r *runner) undoAttacks(ctx context.Context) {
	r.mu.Lock()
	paused, taken, rogue, webhook := r.paused, r.taken, r.rogue, r.webhookHit
	r.paused, r.taken, r.rogue = nil, nil, nil
	r.mu.Unlock()
	for _, pid := range paused {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	for _, a := range taken {
		_ = r.l.ExtraAddr(ctx, r.l.Plan.Client.Name, a, false)
	}
	for _, n := range rogue {
		_ = releaseNFT(ctx, n)
	}
	if webhook {
		_, _ = r.kubectl(ctx, "", "-n", "metallb-system", "rollout", "restart", "deploy/ironlb-controller")
	}
}
