package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/bench/proxybench"
	"github.com/ironlb/ironlb/internal/testbed/connprobe"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// Fault kinds.
const (
	FaultKillController = "kill-controller" // SIGKILL of one controller replica (three run)
	FaultKillSpeaker    = "kill-speaker"    // SIGKILL of one node's speaker
	FaultStopNode       = "stop-node"       // a worker's power cut, power back after a while
	FaultPartition      = "partition"       // a worker's link to the bridge cut, then restored
	FaultLoss           = "loss"            // 5% random drop on a worker's link, each direction
	FaultAPIServer      = "apiserver"       // kube-apiserver SIGKILLed and started again

	// Issue 18: the soak attacks too.
	FaultForgedHeartbeat   = "forged-heartbeat"   // heartbeats forged from the client: the announcer leaving, not ready; hundreds of unknown names
	FaultReplayedHeartbeat = "replayed-heartbeat" // captured heartbeats replayed from the client, then from a cut worker's address the client took over
	FaultForgedARP         = "forged-arp"         // ARP replies and gratuitous ARP for a probed address with the client's MAC
	FaultPauseController   = "pause-controller"   // the leading controller SIGSTOPped for longer than its lease, then SIGCONT
	FaultResponderIface    = "responder-iface"    // a worker's eth0 set down in its namespace, then up with its routes
	FaultNFTFail           = "nft-fail"           // a worker's proxy commits made to fail by conflicting map elements, then released
	FaultWebhookSecret     = "webhook-secret"     // the webhook's serving Secret deleted, then a controller replica restarted
)

// AllFaults in the table's order.
var AllFaults = []string{FaultKillController, FaultKillSpeaker, FaultStopNode, FaultPartition, FaultLoss, FaultAPIServer,
	FaultForgedHeartbeat, FaultReplayedHeartbeat, FaultForgedARP, FaultPauseController, FaultResponderIface, FaultNFTFail, FaultWebhookSecret}

// AttackFaults are the kinds whose packets must change nothing (SpanAttack).
var AttackFaults = []string{FaultForgedHeartbeat, FaultReplayedHeartbeat, FaultForgedARP}

// Options of a chaos run.
type Options struct {
	Self     string        // the ironlb binary (runs kubectl and the probes in the lab)
	Duration time.Duration // how long faults are injected
	Every    time.Duration // mean time between two faults' starts
	Seed     uint64
	Faults   []string // kinds to inject (default AllFaults)
	RawDir   string   // keep the probes' logs here ("" = a temporary directory, removed)
	// MinChecks is the fewest allocation checks a run must make (0: one per 3 s of Duration); fewer,
	// or a kind of Faults never injected, is a violation.
	MinChecks int
	// ConnMode is the ironlb.io/external-mode of the probed Service that holds connections
	// (chaos-p2): "dsr" (the e2e suite's Chaos subtest), or "snat" to see the connection invariant
	// fail; "off" (the default, the only mode with kube-proxy) holds no connections and leaves
	// chaos-p2 as kube-proxy would serve it (docs/benchmarks.md, "The dsr soak, after the loop
	// guard's fix"; issue 19).
	ConnMode string
	Log      func(format string, args ...any)
}

// Result is what a run counted.
type Result struct {
	Duration        time.Duration
	Seed            uint64
	Faults          map[string]int // injected, by kind
	ChurnOps        int
	ChurnErrors     int // API calls of the churn loop that failed (apiserver down, conflicts)
	Checks          int // allocation checks made
	MinChecks       int // the fewest checks the run had to make
	Violations      map[string][]string
	Requests        int
	Failed          int
	FailedInWindows int
	LongestFailover time.Duration
	Probes          []ProbeReport
	Conns           ConnReport // the connections held to chaos-p2 (issue 19)
}

// The run's fixed objects: pools on the node subnet (layer 2), a Deployment behind every Service, and
// three probed Services at fixed addresses: two with externalTrafficPolicy Cluster, one Local.
const (
	namespace = "default"
	probePool = "chaos-probe"
	poolA     = "chaos-a"
	poolB     = "chaos-b"
	churnN    = 12
)

// connProbe is the index in probeAddrs of the Service the client holds keep-alive connections to
// (chaos-p2, externalTrafficPolicy Cluster, in Options.ConnMode), and these are the connections:
// few and slow enough not to load the machine, a request every 200 ms each; one unanswered for
// connTimeout is broken (as `lab bench-connections` counts it).
const (
	connProbe   = 1
	connFlows   = 20
	connEvery   = 200 * time.Millisecond
	connTimeout = 5 * time.Second
	// connSlack is how long after a cut-off span's end a held connection may still break of it: the
	// node's pods restart, and its endpoints return to every node's tables (node liveness) before
	// the flows hashed to it are served there again.
	connSlack = 5 * time.Second
)

var (
	probeAddrs  = []netip.Addr{netip.MustParseAddr("172.18.212.1"), netip.MustParseAddr("172.18.212.2"), netip.MustParseAddr("172.18.212.3")}
	poolBWide   = "172.18.211.0/29"
	poolBNarrow = "172.18.211.0/30"
)

// ConnOff is the ConnMode that holds no connections.
const ConnOff = "off"

func setupYAML(connMode string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: %s, namespace: metallb-system}
spec: {addresses: [172.18.212.0/29], autoAssign: false}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: %s, namespace: metallb-system}
spec: {addresses: [172.18.210.0/28]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: %s, namespace: metallb-system}
spec: {addresses: [%s], autoAssign: false}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: chaos, namespace: metallb-system}
spec: {ipAddressPools: [%s, %s, %s]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: chaos-web, namespace: %s}
spec:
  replicas: 4
  selector: {matchLabels: {app: chaos-web}}
  template:
    metadata: {labels: {app: chaos-web}}
    spec:
      terminationGracePeriodSeconds: 0
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: chaos-web}}}
      containers:
      - name: whoami
        image: traefik/whoami
        readinessProbe: {tcpSocket: {port: 80}, periodSeconds: 1}
`, probePool, poolA, poolB, poolBWide, probePool, poolA, poolB, namespace)
	for i, a := range probeAddrs {
		etp := "Cluster"
		if i == 2 {
			etp = "Local"
		}
		mode := ""
		if i == connProbe && connMode != ConnOff {
			mode = fmt.Sprintf(", ironlb.io/external-mode: %s", connMode)
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: chaos-p%d, namespace: %s, annotations: {metallb.io/loadBalancerIPs: "%s"%s}}
spec: {type: LoadBalancer, externalTrafficPolicy: %s, selector: {app: chaos-web}, ports: [{port: 80}]}
`, i+1, namespace, a, mode, etp)
	}
	return b.String()
}

type runner struct {
	o      Options
	l      *lab.Lab
	cs     kubernetes.Interface
	dyn    dynamic.Interface
	rng    *rand.Rand
	mu     sync.Mutex
	res    Result
	wins   []Window
	killed map[types.UID]int // injected kills per pod
	stops  map[string]int    // power cuts per node (each restarts the node's containers)
	track  Tracker
	spans  []Span     // what each fault allows or forbids (failovers, peer views, elections)
	elects []Election // the probed Services' announcers, sampled every second
	// Undone by cleanup on every path: paused processes, addresses the client took over, rogue
	// nftables objects.
	paused     []int
	taken      []netip.Addr
	rogue      []string // nodes holding nft-fail's objects
	webhookHit bool     // webhook-secret ran: the replicas may serve different certificates
	// metricsToken reads the controller's and the speakers' metrics (lab.MetricsToken), once got.
	metricsToken string
	// podNodesAtSetup: chaos-web's pods and their nodes once the Deployment rolled out (with the
	// end's listing, JudgeConnections' podNode).
	podNodesAtSetup map[string]string
}

// Run makes one chaos run in the lab and returns its counts. The lab should run ironlb's proxy
// (`lab up --proxy=ironlb`): with kube-proxy, the endpoints of a dead node keep taking requests until the
// node controller reacts (40-50 s), and those failures would be counted.
func Run(ctx context.Context, l *lab.Lab, o Options) (res Result, err error) {
	if o.Every <= 0 {
		o.Every = 15 * time.Second
	}
	if len(o.Faults) == 0 {
		o.Faults = AllFaults
	}
	if o.MinChecks == 0 {
		o.MinChecks = max(1, int(o.Duration/(3*time.Second)))
	}
	if o.ConnMode == "" {
		o.ConnMode = ConnOff
	}
	if o.ConnMode != "dsr" && o.ConnMode != "snat" && o.ConnMode != ConnOff {
		return res, fmt.Errorf("connection mode %q: want dsr, snat or off", o.ConnMode)
	}
	if need := MinDuration(o.Faults, o.Every); o.Duration < need {
		o.Log("chaos: %s may be too short to inject every kind of %d with faults every %s (about %s needed)", o.Duration, len(o.Faults), o.Every, need.Round(time.Second))
	}
	for _, f := range o.Faults {
		if !slices.Contains(AllFaults, f) {
			return res, fmt.Errorf("fault %q: want one of %s", f, strings.Join(AllFaults, ", "))
		}
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if l.Plan.Config.ProxyMode != lab.ProxyIronLB && o.ConnMode != ConnOff {
		o.Log("chaos: the lab's proxy is kube-proxy, which ignores ironlb.io/external-mode: the connections held to %s are snat, and the power cut of their entry node breaks them (lab up --proxy=ironlb)", probeAddrs[connProbe])
	}
	cs, err := l.Client()
	if err != nil {
		return res, err
	}
	rc, err := l.RESTConfig()
	if err != nil {
		return res, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return res, err
	}
	r := &runner{o: o, l: l, cs: cs, dyn: dyn, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		killed: map[types.UID]int{}, stops: map[string]int{}, track: Tracker{Grace: 10 * time.Second}}
	r.res = Result{Duration: o.Duration, Seed: o.Seed, Faults: map[string]int{}, Violations: map[string][]string{}, MinChecks: o.MinChecks}
	raw := o.RawDir
	if raw == "" {
		if raw, err = os.MkdirTemp("", "ironlb-chaos-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(raw)
	} else if err := os.MkdirAll(raw, 0o755); err != nil {
		return res, err
	}
	// Whatever happens: power, links and loss back, the churned Services and the setup gone.
	defer r.cleanup(context.WithoutCancel(ctx))

	o.Log("chaos: setting up (3 controller replicas, pools, chaos-web, probed Services %v)", probeAddrs)
	if err := r.setup(ctx); err != nil {
		return r.res, err
	}
	before, err := r.sample(ctx)
	if err != nil {
		return r.res, err
	}
	// Probes from the client, one per probed address: ARP who-has and an HTTP request every 100 ms.
	probeFor := o.Duration + 15*time.Second
	var probes []*exec.Cmd
	var logs []string
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	for _, a := range probeAddrs {
		f := filepath.Join(raw, "probe-"+a.String()+".log")
		out, err := os.Create(f)
		if err != nil {
			return r.res, err
		}
		defer out.Close()
		cmd := exec.CommandContext(pctx, o.Self, "lab", "exec", l.Plan.Config.ClientName, "--", o.Self, "probe",
			"--addr", a.String(), "--url", "http://"+a.String()+"/", "--every", "100ms", "--for", probeFor.String(), "--timeout", "1s")
		cmd.Stdout = out
		if err := cmd.Start(); err != nil {
			return r.res, err
		}
		probes = append(probes, cmd)
		logs = append(logs, f)
	}
	// Keep-alive connections to the connection probe's Service, held for as long.
	connLog := filepath.Join(raw, "conns-"+probeAddrs[connProbe].String()+".log")
	if o.ConnMode != ConnOff {
		out, err := os.Create(connLog)
		if err != nil {
			return r.res, err
		}
		defer out.Close()
		cmd := exec.CommandContext(pctx, o.Self, "lab", "exec", l.Plan.Config.ClientName, "--", o.Self, "connprobe",
			"--addr", probeAddrs[connProbe].String(), "--tcp", strconv.Itoa(connFlows), "--udp", "0", "--every", connEvery.String(),
			"--for", probeFor.String(), "--timeout", connTimeout.String(), "--gap", "1s")
		cmd.Stdout = out
		if err := cmd.Start(); err != nil {
			return r.res, err
		}
		probes = append(probes, cmd)
	}
	start := time.Now()
	time.Sleep(2 * time.Second) // the probes' first answers
	end := start.Add(o.Duration)
	o.Log("chaos: %s of churn and faults (one every ~%s; seed %d)", o.Duration, o.Every, o.Seed)

	var wg sync.WaitGroup
	lctx, lcancel := context.WithDeadline(ctx, end)
	defer lcancel()
	wg.Add(4)
	go func() { defer wg.Done(); r.churn(lctx) }()
	go func() { defer wg.Done(); r.checkLoop(lctx) }()
	go func() { defer wg.Done(); r.faults(lctx, end) }()
	go func() { defer wg.Done(); r.electionLoop(lctx) }()
	wg.Wait()
	if ctx.Err() != nil {
		return r.res, ctx.Err()
	}
	// Settle: the last fault has been undone; allocations must be clean after one more reconcile.
	o.Log("chaos: settling")
	time.Sleep(12 * time.Second)
	r.check(ctx)
	for _, p := range probes {
		_ = p.Wait()
	}
	probeEnd := time.Now()
	pods, err := r.podNodes(ctx)
	if err != nil {
		return r.res, err
	}
	after, err := r.sample(ctx)
	if err != nil {
		return r.res, err
	}
	r.judgeProcesses(before, after)
	for _, v := range r.track.Violations {
		r.res.Violations[v.Invariant] = append(r.res.Violations[v.Invariant], v.Detail)
	}
	r.mu.Lock()
	spans, elects := slices.Clone(r.spans), slices.Clone(r.elects)
	r.mu.Unlock()
	macNode := map[string]string{}
	for _, n := range l.Plan.Nodes {
		macNode[strings.ToLower(n.MAC)] = n.Name
	}
	r.record(JudgeElections(elects, spans, spanSlack))
	r.record(JudgePeerEvents(r.peerEvents(start, probeEnd), l.Plan.NodeNames(), spans, spanSlack))
	r.record(CheckCoverage(o.Faults, r.res.Faults, r.res.Checks, o.MinChecks))
	if o.ConnMode == ConnOff {
		// no connections held
	} else if b, err := os.ReadFile(connLog); err != nil {
		return r.res, err
	} else if cr, err := connprobe.Parse(bytes.NewReader(b)); err != nil {
		return r.res, fmt.Errorf("%s: %w", connLog, err)
	} else {
		for k, v := range r.podNodesAtSetup {
			if _, ok := pods[k]; !ok {
				pods[k] = v
			}
		}
		r.res.Conns = JudgeConnections(probeAddrs[connProbe], o.ConnMode, cr, pods, spans, connSlack)
		if r.res.Conns.Held == 0 {
			r.res.Conns.Findings = append(r.res.Conns.Findings, Finding{InvConnection, "none held", "the client held no connection to " + probeAddrs[connProbe].String()})
		}
		r.record(r.res.Conns.Findings)
	}
	for i, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			return r.res, err
		}
		ev, err := failover.Parse(bytes.NewReader(b))
		if err != nil {
			return r.res, err
		}
		// The client's own forged ARP (forged-arp, the address it takes over in replayed-heartbeat) is
		// the attack, not an answer.
		ev = WithoutMACs(ev, l.Plan.Client.MAC)
		pend := ProbeEnd(ev, probeEnd.Add(-time.Second))
		r.record(JudgeFailovers(Failovers(probeAddrs[i], ev, start, pend, 100*time.Millisecond), macNode, spans, spanSlack))
		r.record(JudgeDisturbances(Disturbances(probeAddrs[i], ev, start, pend, 100*time.Millisecond), macNode, spans, spanSlack, probeJitter, time.Second))
		pr := AnalyzeProbe(probeAddrs[i], ev, start, pend, 100*time.Millisecond, time.Second, r.wins)
		r.res.Probes = append(r.res.Probes, pr)
		r.res.Requests += pr.Sent
		r.res.Failed += pr.Failed
		r.res.FailedInWindows += pr.FailedInWindows
		r.res.LongestFailover = max(r.res.LongestFailover, pr.LongestFailover)
		for _, f := range pr.Findings {
			r.res.Violations[f.Invariant] = append(r.res.Violations[f.Invariant], f.Detail)
		}
	}
	return r.res, nil
}

func (r *runner) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	return failover.Kubectl(ctx, r.o.Self, stdin, args...)
}

func (r *runner) setup(ctx context.Context) error {
	if _, err := r.kubectl(ctx, "", "-n", "metallb-system", "scale", "deploy/ironlb-controller", "--replicas=3"); err != nil {
		return err
	}
	if _, err := r.kubectl(ctx, setupYAML(r.o.ConnMode), "apply", "-f", "-"); err != nil {
		return err
	}
	for _, d := range []string{"-n metallb-system deploy/ironlb-controller", "-n " + namespace + " deploy/chaos-web"} {
		if _, err := r.kubectl(ctx, "", append(strings.Fields(d)[:2], "rollout", "status", strings.Fields(d)[2], "--timeout=180s")...); err != nil {
			return err
		}
	}
	pods, err := r.podNodes(ctx)
	if err != nil {
		return err
	}
	r.podNodesAtSetup = pods
	// Every probed address answers HTTP from the client.
	deadline := time.Now().Add(90 * time.Second)
	for _, a := range probeAddrs {
		for {
			out, err := exec.CommandContext(ctx, r.o.Self, "lab", "exec", r.l.Plan.Config.ClientName, "--", "curl", "-s",
				"--connect-timeout", "1", "--max-time", "2", "http://"+a.String()+"/").CombinedOutput()
			if err == nil && strings.Contains(string(out), "Hostname") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("probed Service at %s does not answer from %s: %v %s", a, r.l.Plan.Config.ClientName, err, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	// Then until every probed Service lists all of chaos-web's pods ready, and a settle time more:
	// the speakers elect the Local Service's announcer among the nodes whose endpoint is ready, so
	// a pod that becomes ready after the first answer moves it (the soak of 2026-11-27 21:59 judged
	// such a move, 0.5 s after setup, a failover no fault explains).
	for i := range probeAddrs {
		svc := fmt.Sprintf("chaos-p%d", i+1)
		for {
			ready, err := r.readyEndpoints(ctx, svc)
			if err == nil && ready >= len(pods) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("Service %s lists %d ready endpoints of chaos-web's %d pods (%v)", svc, ready, len(pods), err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(setupSettle)
	return nil
}

// setupSettle is how long setup waits, once every probed Service lists every pod ready, for the
// speakers' elections to follow.
const setupSettle = 3 * time.Second

// readyEndpoints counts the ready endpoints in a Service's EndpointSlices.
func (r *runner) readyEndpoints(ctx context.Context, svc string) (int, error) {
	l, err := r.cs.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, es := range l.Items {
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}

// podNodes maps chaos-web's pods to their nodes: the pods' names are whoami's Hostname in the
// answers the connection probe reads.
func (r *runner) podNodes(ctx context.Context) (map[string]string, error) {
	pl, err := r.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=chaos-web"})
	if err != nil {
		return nil, fmt.Errorf("listing chaos-web's pods: %w", err)
	}
	out := map[string]string{}
	for _, p := range pl.Items {
		if p.Spec.NodeName != "" {
			out[p.Name] = p.Spec.NodeName
		}
	}
	return out, nil
}

func (r *runner) cleanup(ctx context.Context) {
	r.undoAttacks(ctx)
	for _, n := range r.workers() {
		_ = r.l.SetLink(ctx, n, true)
		if _, procs := r.nodeUp(n); !procs {
			_ = r.l.StartNode(ctx, n)
		}
	}
	failover.RemoveLoss(r.l.Plan.NodeNames()...)
	for i := range churnN {
		_ = r.cs.CoreV1().Services(namespace).Delete(ctx, fmt.Sprintf("chaos-c%d", i), metav1.DeleteOptions{})
	}
	_, _ = r.kubectl(ctx, setupYAML(r.o.ConnMode), "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	_, _ = r.kubectl(ctx, "", "-n", "metallb-system", "scale", "deploy/ironlb-controller", "--replicas=2")
}

func (r *runner) workers() []string {
	var out []string
	for _, h := range r.l.Plan.Nodes {
		if h.Role == lab.RoleWorker {
			out = append(out, h.Name)
		}
	}
	return out
}

// nodeUp says whether the node's agent runs (false after StopNode).
func (r *runner) nodeUp(node string) (string, bool) {
	cg, err := r.l.Cgroup(node)
	if err != nil {
		return "", false
	}
	return string(cg), len(cg.Procs()) > 0 || hasProcs(string(cg))
}

func hasProcs(dir string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "cgroup.procs" {
			if b, _ := os.ReadFile(p); len(bytes.TrimSpace(b)) > 0 {
				found = true
				return filepath.SkipAll
			}
		}
		return nil
	})
	return found
}

// churn creates, updates and deletes Services chaos-c0..c11 at random: pools by annotation, requested
// addresses, sharing keys with clashing or distinct ports, externalTrafficPolicy Local or Cluster.
func (r *runner) churn(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	poolFlip := time.NewTicker(20 * time.Second)
	defer poolFlip.Stop()
	narrow := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-poolFlip.C:
			narrow = !narrow
			cidr := poolBWide
			if narrow {
				cidr = poolBNarrow
			}
			err := r.patchPool(ctx, poolB, cidr)
			r.count(err)
		case <-t.C:
			r.count(r.churnOne(ctx))
		}
	}
}

func (r *runner) count(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.ChurnOps++
	if err != nil {
		r.res.ChurnErrors++
	}
}

func (r *runner) patchPool(ctx context.Context, name, cidr string) error {
	patch := fmt.Sprintf(`{"spec":{"addresses":[%q]}}`, cidr)
	_, err := r.dyn.Resource(v1beta1.IPAddressPoolGVR).Namespace("metallb-system").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func (r *runner) churnOne(ctx context.Context) error {
	r.mu.Lock()
	name := fmt.Sprintf("chaos-c%d", r.rng.IntN(churnN))
	op := r.rng.IntN(10)
	spec := r.randomService(name)
	r.mu.Unlock()
	svcs := r.cs.CoreV1().Services(namespace)
	cur, err := svcs.Get(ctx, name, metav1.GetOptions{})
	switch {
	case errors.IsNotFound(err):
		_, err = svcs.Create(ctx, spec, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	case op < 3:
		return svcs.Delete(ctx, name, metav1.DeleteOptions{})
	default:
		cur.Annotations = spec.Annotations
		cur.Spec.ExternalTrafficPolicy = spec.Spec.ExternalTrafficPolicy
		cur.Spec.Ports = spec.Spec.Ports
		_, err = svcs.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}
}

// randomService draws a churned Service; r.mu is held.
func (r *runner) randomService(name string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "chaos-web"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster},
	}
	if r.rng.IntN(4) == 0 {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	switch r.rng.IntN(4) {
	case 0:
		s.Annotations["metallb.io/address-pool"] = poolB
	case 1:
		s.Annotations["metallb.io/address-pool"] = poolA
	}
	if r.rng.IntN(3) == 0 { // a requested address: in pool A, or in pool B's part that comes and goes
		ip := fmt.Sprintf("172.18.210.%d", 1+r.rng.IntN(14))
		if r.rng.IntN(2) == 0 {
			ip = fmt.Sprintf("172.18.211.%d", 1+r.rng.IntN(6))
		}
		s.Annotations["metallb.io/loadBalancerIPs"] = ip
	}
	if r.rng.IntN(2) == 0 {
		s.Annotations["metallb.io/allow-shared-ip"] = fmt.Sprintf("key-%d", r.rng.IntN(2))
	}
	port := int32(80 + r.rng.IntN(3)) // clashing ports now and then
	s.Spec.Ports = []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: port}}
	return s
}

func (r *runner) checkLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.check(ctx)
		}
	}
}

// check reads Services and pools and records the allocation findings (nothing while the apiserver is
// down).
func (r *runner) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sl, err := r.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	pl, err := r.dyn.Resource(v1beta1.IPAddressPoolGVR).Namespace("metallb-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	var pools []Pool
	for _, u := range pl.Items {
		p := Pool{Name: u.GetName()}
		addrs, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "addresses")
		for _, a := range addrs {
			rs, err := allocator.ParseRange(a)
			if err != nil {
				continue
			}
			for _, x := range rs {
				p.Ranges = append(p.Ranges, Range{x.First, x.Last})
			}
		}
		pools = append(pools, p)
	}
	svcs := lbServices(sl.Items)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Checks++
	r.track.Observe(time.Now(), CheckAllocations(svcs, pools))
}

// lbServices converts the LoadBalancer Services among items to the invariants' view (the others are
// left out; an ingress IP that does not parse is skipped): the one conversion the allocation check and
// the nft-fail attack's dataplane check share.
func lbServices(items []corev1.Service) []Svc {
	var out []Svc
	for _, s := range items {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		v := Svc{Key: s.Namespace + "/" + s.Name, Pool: s.Annotations["metallb.io/address-pool"],
			SharingKey: s.Annotations["metallb.io/allow-shared-ip"], Local: s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
			Selector: labels.Set(s.Spec.Selector).String()}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				v.IPs = append(v.IPs, a)
			}
		}
		for _, p := range s.Spec.Ports {
			v.Ports = append(v.Ports, Port{string(p.Protocol), p.Port})
		}
		out = append(out, v)
	}
	return out
}

// faults injects one fault at a time, at random intervals, until end: the kinds in shuffled rounds
// (every kind once per round), each only if it can be undone before the end.
func (r *runner) faults(ctx context.Context, end time.Time) {
	r.mu.Lock()
	rounds := NewRounds(r.o.Faults, r.rng)
	r.mu.Unlock()
	for {
		r.mu.Lock()
		wait := r.o.Every/2 + time.Duration(r.rng.Int64N(int64(r.o.Every)))
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		r.mu.Lock()
		kind := rounds.NextFitting(func(k string) bool { return !time.Now().Add(FaultTime(k)).After(end) })
		r.mu.Unlock()
		if kind == "" {
			return // no fault of this round could be undone before the end
		}
		what, err := r.inject(context.WithoutCancel(ctx), kind)
		if err != nil {
			r.o.Log("chaos: %s failed: %v", kind, err)
			r.mu.Lock()
			rounds.Retry(kind)
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		r.res.Faults[kind]++
		r.mu.Unlock()
		r.o.Log("chaos: %s %s", time.Now().Format("15:04:05"), what)
	}
}

// window records that traffic may fail from now for d.
func (r *runner) window(fault string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.wins = append(r.wins, Window{From: now, To: now.Add(d), Fault: fault})
}

// failoverBudget is the time an address or an endpoint may be lost after a fault (issue 9: at most 1 s
// of failover), plus a request's own timeout.
const failoverBudget = 2 * time.Second

func (r *runner) inject(ctx context.Context, kind string) (string, error) {
	r.mu.Lock()
	workers := r.workers()
	node := workers[r.rng.IntN(len(workers))]
	r.mu.Unlock()
	switch kind {
	case FaultKillController:
		return r.killController(ctx)
	case FaultKillSpeaker:
		r.window(kind, failoverBudget)
		// The speaker restarts, turns ready and takes its addresses back after its hold-down.
		r.span(kind, node, SpanLoses, returnBudget)
		r.span(kind, node, SpanRegains, returnBudget)
		what, err := r.killPod(ctx, "component=speaker", "speaker", node)
		return what, err
	case FaultStopNode:
		r.window(kind, failoverBudget)
		r.span(kind, node, SpanLoses, 8*time.Second+returnBudget)
		r.noteCut(ctx, node)
		cut := time.Now()
		// Its pods are killed; the connections they served may break until they run again.
		defer r.spanSince(kind, node, SpanCutOff, cut)
		if err := r.l.StopNode(ctx, node); err != nil {
			return "", err
		}
		r.mu.Lock()
		r.stops[node]++
		r.mu.Unlock()
		time.Sleep(8 * time.Second)
		r.window(kind+" (power back)", failoverBudget)
		r.span(kind, node, SpanRegains, returnBudget)
		if err := r.l.StartNode(ctx, node); err != nil {
			return "", err
		}
		time.Sleep(5 * time.Second)
		return "stop-node " + node + ", back after 8 s", nil
	case FaultPartition:
		r.window(kind, failoverBudget)
		// Cut off, the node claims every address; healed, the claims are settled by rank.
		r.span(kind, node, SpanLoses, 5*time.Second+returnBudget)
		r.span(kind, node, SpanRegains, 5*time.Second+returnBudget)
		defer r.spanSince(kind, node, SpanCutOff, time.Now())
		if err := r.l.SetLink(ctx, node, false); err != nil {
			return "", err
		}
		time.Sleep(5 * time.Second)
		r.window(kind+" (healed)", failoverBudget)
		if err := r.l.SetLink(ctx, node, true); err != nil {
			return "", err
		}
		time.Sleep(3 * time.Second)
		return "partition of " + node + " for 5 s", nil
	case FaultLoss:
		r.window(kind, 10*time.Second+failoverBudget)
		r.span(kind, node, SpanLoses, 10*time.Second+returnBudget)
		r.span(kind, node, SpanRegains, 10*time.Second+returnBudget)
		// Its peers may declare it dead under loss (SpanLoses) and stop using its endpoints.
		defer r.spanSince(kind, node, SpanCutOff, time.Now())
		if err := failover.SetLoss(node, 5); err != nil {
			return "", err
		}
		time.Sleep(10 * time.Second)
		failover.RemoveLoss(node)
		return "5% loss on " + node + "'s link for 10 s", nil
	case FaultAPIServer:
		t0 := time.Now()
		// Nothing reconciles while the apiserver is away, however long its return takes (minutes on a
		// loaded machine, and a failed restart is tried again): no allocation finding ages meanwhile.
		r.mu.Lock()
		r.track.ControlPlaneBack = t0.Add(24 * time.Hour)
		r.mu.Unlock()
		err := r.l.RestartAPIServer(ctx)
		// Allocation findings age from the control plane's return: the apiserver, then the controller's
		// leader re-elected (a lease of 15 s at worst).
		r.mu.Lock()
		r.track.ControlPlaneBack = time.Now().Add(15 * time.Second)
		r.mu.Unlock()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("kube-apiserver killed, ready again after %.1f s", time.Since(t0).Seconds()), nil
	case FaultForgedHeartbeat:
		return r.forgedHeartbeat(ctx)
	case FaultReplayedHeartbeat:
		return r.replayedHeartbeat(ctx)
	case FaultForgedARP:
		return r.forgedARP(ctx)
	case FaultPauseController:
		return r.pauseController(ctx)
	case FaultResponderIface:
		return r.responderIface(ctx, node)
	case FaultNFTFail:
		return r.nftFail(ctx, node)
	case FaultWebhookSecret:
		return r.webhookSecret(ctx)
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}

// returnBudget is how long after a fault is undone its node may still take its addresses back: the
// agent restarts its containers, the speaker syncs and turns ready, then its hold-down (5 s) runs.
const returnBudget = 30 * time.Second

// probeJitter is the longest silence that is the probe's timing on a loaded machine (an answer in
// the next 100 ms bucket), not a change.
const probeJitter = 500 * time.Millisecond

// spanSlack is how long after a span's end a failover, an election or a peer's state change is still
// the span's doing (detection, status writes, the last forged packets' effect).
const spanSlack = 3 * time.Second

// span records from now for d what a fault allows (or, for SpanAttack, forbids) on node.
func (r *runner) span(fault, node string, kind SpanKind, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.spans = append(r.spans, Span{From: now, To: now.Add(d), Fault: fault, Node: node, Kind: kind})
}

// spanSince records a span from from to now (an attack's, once its last packet went).
func (r *runner) spanSince(fault, node string, kind SpanKind, from time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, Span{From: from, To: time.Now(), Fault: fault, Node: node, Kind: kind})
}

// record adds findings that are violations as they are (no grace).
func (r *runner) record(fs []Finding) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range fs {
		r.res.Violations[f.Invariant] = append(r.res.Violations[f.Invariant], f.Detail)
	}
}

// killController SIGKILLs a random controller replica's container. Killing the leader leaves no
// reconciler until another replica takes the lease (it is not released by a SIGKILL: up to
// LeaseDuration, 15 s): allocation findings age from then.
func (r *runner) killController(ctx context.Context) (string, error) {
	leader := r.leader(ctx)
	what, err := r.killPod(ctx, "component=controller", "controller", "")
	if err == nil && leader != "" && strings.Contains(what, leader+"/") {
		r.mu.Lock()
		r.track.ControlPlaneBack = time.Now().Add(17 * time.Second)
		r.mu.Unlock()
		what += " (the leader)"
	}
	return what, err
}

// noteCut ages allocation findings from the controller's return when a node about to lose power runs
// the leading controller: the lease is not released, another replica takes it after LeaseDuration.
func (r *runner) noteCut(ctx context.Context, node string) {
	leader := r.leader(ctx)
	if leader == "" {
		return
	}
	if p, err := r.cs.CoreV1().Pods("metallb-system").Get(ctx, leader, metav1.GetOptions{}); err == nil && p.Spec.NodeName == node {
		r.mu.Lock()
		r.track.ControlPlaneBack = time.Now().Add(17 * time.Second)
		r.mu.Unlock()
	}
}

// leader returns the controller lease's holder ("" if unknown).
func (r *runner) leader(ctx context.Context) string {
	if l, err := r.cs.CoordinationV1().Leases("metallb-system").Get(ctx, "ironlb-controller", metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
		return *l.Spec.HolderIdentity
	}
	return ""
}

// killPod SIGKILLs the container of a random pod of metallb-system matching selector (on node, when
// set), as a crash would: the lab's agent restarts it.
func (r *runner) killPod(ctx context.Context, selector, container, node string) (string, error) {
	opts := metav1.ListOptions{LabelSelector: "app=ironlb," + selector}
	if node != "" {
		opts.FieldSelector = "spec.nodeName=" + node
	}
	pl, err := r.cs.CoreV1().Pods("metallb-system").List(ctx, opts)
	if err != nil {
		return "", err
	}
	var running []corev1.Pod
	for _, p := range pl.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		return "", fmt.Errorf("no running pod %s on %q", selector, node)
	}
	r.mu.Lock()
	p := running[r.rng.IntN(len(running))]
	r.mu.Unlock()
	procs, err := r.containerProcs(p, container)
	if err != nil {
		return "", err
	}
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	r.mu.Lock()
	r.killed[p.UID]++
	r.mu.Unlock()
	return fmt.Sprintf("SIGKILL %s/%s on %s (pid %v)", p.Name, container, p.Spec.NodeName, procs), nil
}

// containerProcs returns the processes of the pod's running container (its latest generation).
func (r *runner) containerProcs(p corev1.Pod, container string) ([]int, error) {
	podCG, err := r.l.Cgroup(p.Spec.NodeName, "pods", string(p.UID))
	if err != nil {
		return nil, err
	}
	dirs, _ := filepath.Glob(filepath.Join(string(podCG), container+"-*"))
	sort.Slice(dirs, func(i, j int) bool { return genOf(dirs[i]) < genOf(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if procs := lab.Cgroup(dirs[i]).Procs(); len(procs) > 0 {
			return procs, nil
		}
	}
	return nil, fmt.Errorf("pod %s: no running %s container under %s", p.Name, container, podCG)
}

func genOf(dir string) int {
	n, _ := strconv.Atoi(dir[strings.LastIndexByte(dir, '-')+1:])
	return n
}

// procSample is one ironlb container's restarts and metrics.
type procSample struct {
	pod, node string
	uid       types.UID
	restarts  int32
	m         Sample
	ok        bool // metrics read
}

// sample reads every ironlb pod's restart count and, over HTTPS from the control-plane node, its
// go_goroutines and process_resident_memory_bytes.
func (r *runner) sample(ctx context.Context) (map[string]procSample, error) {
	pl, err := r.cs.CoreV1().Pods("metallb-system").List(ctx, metav1.ListOptions{LabelSelector: "app=ironlb"})
	if err != nil {
		return nil, err
	}
	// Every role's metrics (the controller's and the speakers' port "monitoring", the proxies'
	// "metrics") are HTTPS for a token allowed to get /metrics (docs/security.md).
	if r.metricsToken == "" {
		if r.metricsToken, err = r.l.MetricsToken(ctx); err != nil {
			return nil, err
		}
	}
	client := &http.Client{Transport: &http.Transport{DialContext: lab.Dialer(r.l.Plan.ControlPlane().Name),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 3 * time.Second}
	out := map[string]procSample{}
	for _, p := range pl.Items {
		s := procSample{pod: p.Name, node: p.Spec.NodeName, uid: p.UID}
		for _, c := range p.Status.ContainerStatuses {
			s.restarts += c.RestartCount
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if (port.Name != "monitoring" && port.Name != "metrics") || p.Status.PodIP == "" {
					continue
				}
				m, err := scrape(ctx, client, fmt.Sprintf("https://%s:%d/metrics", p.Status.PodIP, port.ContainerPort), r.metricsToken)
				if err == nil {
					s.m, s.ok = m, true
				}
			}
		}
		out[p.Name] = s
	}
	return out, nil
}

func scrape(ctx context.Context, c *http.Client, url, token string) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	ms, err := proxybench.ParseMetrics(resp.Body)
	if err != nil {
		return Sample{}, fmt.Errorf("%s: %w", url, err)
	}
	var s Sample
	for _, m := range ms {
		switch m.Name {
		case "go_goroutines":
			s.Goroutines = m.Value
		case "process_resident_memory_bytes":
			s.RSS = m.Value
		}
	}
	if s.Goroutines == 0 {
		return s, fmt.Errorf("%s: no go_goroutines", url)
	}
	return s, nil
}

// judgeProcesses counts restarts nobody injected (a kill, or the power cut of the pod's node) and
// processes that grew.
func (r *runner) judgeProcesses(before, after map[string]procSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, a := range after {
		b, ok := before[name]
		if !ok || b.uid != a.uid {
			continue // a new pod (none expected; the Deployments' pods survive)
		}
		expected := int32(r.killed[a.uid]) + int32(r.stops[a.node])
		if extra := a.restarts - b.restarts - expected; extra > 0 {
			r.res.Violations[InvCrash] = append(r.res.Violations[InvCrash],
				fmt.Sprintf("%s on %s restarted %d times, %d injected", name, a.node, a.restarts-b.restarts, expected))
		}
		if a.restarts == b.restarts && a.ok && b.ok && Leaking(b.m, a.m) {
			r.res.Violations[InvLeak] = append(r.res.Violations[InvLeak], fmt.Sprintf("%s: goroutines %.0f -> %.0f, RSS %.0f -> %.0f MiB",
				name, b.m.Goroutines, a.m.Goroutines, b.m.RSS/(1<<20), a.m.RSS/(1<<20)))
		}
	}
}

// JSON is the result for machines (kept beside the table).
func (res Result) JSON() ([]byte, error) { return json.MarshalIndent(res, "", "  ") }
