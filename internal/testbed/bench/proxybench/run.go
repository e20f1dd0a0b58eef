package proxybench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// Options choose what a run measures.
type Options struct {
	Self          string // the ironlb binary (lab exec for wrk)
	Services      []int  // Service counts for the full syncs (each Service has 2 endpoints)
	SyncTrials    int    // restarts of each proxy per count
	Changes       int    // endpoint changes at the count closest to 10,000 (0: none)
	WrkDuration   time.Duration
	WrkRounds     int // wrk runs per target, interleaved
	SkipWrk       bool
	SkipSync      bool
	KubeProxyNode string       // the node whose kube-proxy is measured
	IronLBNode    string       // the node that runs ironlb's proxy instead of kube-proxy
	ServiceCIDR   netip.Prefix // added as a ServiceCIDR when the lab's own is too small for the Services
	Log           func(format string, args ...any)
}

// Objects the benchmark makes; everything it creates carries the label or the annotation.
const (
	Namespace       = "ironlb-bench-proxy"
	benchLabel      = "bench.ironlb.io/proxy" // on its objects ("true") and on nodes (which proxy runs there)
	ownerAnnotation = "bench.ironlb.io/owner" // on the ironlb-proxy DaemonSet it creates
	managedBy       = "bench.ironlb.io"       // the EndpointSlices' endpointslice.kubernetes.io/managed-by
	serviceCIDRName = "ironlb-bench-proxy"    // the extra ServiceCIDR
	webApp          = "bench-proxy-web"       // the wrk target Pods' app label
	labelRunsIronLB = "ironlb"                // node label value: ironlb's proxy runs here
	labelNoProxy    = "off"                   // node label value: no proxy runs here
	ironlbNS        = "metallb-system"
	ironlbDS        = "ironlb-proxy"
	kubeProxyNS     = "kube-system"
	kubeProxyDS     = "kube-proxy"
	servicePort     = 80                      // every Service's port and its endpoints' port
	metricsPort     = 10249                   // both proxies' metrics (kube-proxy: metricsBindAddress 0.0.0.0, HTTP; ironlb: $(POD_IP), the node's address, HTTPS)
	serviceIPsMap   = "service-ips"           // both layouts: `daddr . l4proto . dport` -> goto service chain
	proxyWorkers    = 32                      // concurrent API writers
	syncPoll        = 20 * time.Millisecond   // probe for the full sync's last element
	rssEvery        = 5                       // RSS sampled every rssEvery polls: 100 ms
	changeSpacing   = 1500 * time.Millisecond // between endpoint changes: kube-proxy's minSyncPeriod is 1 s
	syncTimeout     = 15 * time.Minute
	cleanupTimeout  = 20 * time.Minute
)

// proxy is how the benchmark finds, restarts and reads one proxy.
//
// A proxy is stopped and started again with a node label rather than by deleting its Pod: the
// DaemonSet controller would recreate a deleted Pod at once, while the node's old ruleset must be
// deleted in between (or the new process would find it complete before it synced anything). With
// the label, the controller deletes the Pod, the agent kills it, the benchmark deletes the
// proxy's tables (the node is as after a reboot), and the label's removal brings the Pod back.
type proxy struct {
	name      string // KubeProxy or IronLB
	node      string
	addr      netip.Addr // the node's address
	namespace string
	selector  string // the Pods' labels
	container string
	table     string // its nftables table (family ip; ip6 is deleted too)
	on        string // node label value under which the DaemonSet runs here ("" = no label)
}

type bench struct {
	l      *lab.Lab
	o      Options
	cs     kubernetes.Interface
	kp, il proxy

	ips []netip.Addr // ClusterIP of Service i

	mu    sync.Mutex // guards undo and token
	undo  []undoStep
	token string // the lab's metrics reader token, for ironlb's HTTPS metrics; "" until got
}

type undoStep struct {
	what string
	fn   func(context.Context) error
}

// push registers an undo step; cleanup runs them last-in first-out.
func (b *bench) push(what string, fn func(context.Context) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.undo = append(b.undo, undoStep{what, fn})
}

// cleanup runs every undo step, even after failures, and joins their errors.
func (b *bench) cleanup(ctx context.Context) error {
	b.mu.Lock()
	steps := slices.Clone(b.undo)
	b.undo = nil
	b.mu.Unlock()
	var errs []error
	for i := len(steps) - 1; i >= 0; i-- {
		t := time.Now()
		b.o.Log("cleanup: %s", steps[i].what)
		if err := steps[i].fn(ctx); err != nil {
			b.o.Log("cleanup: %s: %v", steps[i].what, err)
			errs = append(errs, fmt.Errorf("%s: %w", steps[i].what, err))
			continue
		}
		b.o.Log("cleanup: %s done (%.1fs)", steps[i].what, time.Since(t).Seconds())
	}
	return errors.Join(errs...)
}

// Run sets the lab up (ironlb's proxy on one node, kube-proxy on the others), measures, and puts
// everything back, also when ctx is cancelled. The result holds what was measured before any error.
func Run(ctx context.Context, l *lab.Lab, o Options) (res Result, err error) {
	res = Result{Sync: map[string][]SyncTrial{}, Changes: map[string][]ChangeTrial{}, Wrk: map[string][]Wrk{}}
	sizes, err := CheckSizes(o.Services)
	if err != nil {
		return res, err
	}
	if o.Changes > maxChanges {
		return res, fmt.Errorf("--changes %d: at most %d", o.Changes, maxChanges)
	}
	changeAt := 0
	if o.Changes > 0 {
		changeAt = ChangeSize(sizes)
	}
	if o.SkipSync {
		sizes = nil
		if changeAt > 0 {
			sizes = []int{changeAt}
		}
	}
	b, err := newBench(l, o)
	if err != nil {
		return res, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if cerr := b.cleanup(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
		}
	}()
	if err := b.setup(ctx, slices.Max(append([]int{1}, sizes...))); err != nil {
		return res, err
	}
	for _, n := range sizes {
		if err := b.ensureServices(ctx, n); err != nil {
			return res, err
		}
		if err := b.waitSynced(ctx, n); err != nil {
			return res, err
		}
		if !o.SkipSync {
			for t := 1; t <= o.SyncTrials; t++ {
				for _, p := range []*proxy{&b.kp, &b.il} {
					tr, err := b.restart(ctx, p, n)
					if err != nil {
						return res, fmt.Errorf("restarting %s with %d Services: %w", p.name, n, err)
					}
					res.Sync[p.name] = append(res.Sync[p.name], tr)
					o.Log("%d Services, trial %d/%d, %s on %s: start -> rules %s (own: full sync %s, start -> last sync %s), peak RSS %s",
						n, t, o.SyncTrials, p.name, p.node, fmtDur(tr.Sync), fmtDur(tr.OwnFull), fmtDur(tr.OwnLast), fmtMiB(tr.PeakRSS))
				}
			}
		}
		if n == changeAt {
			res.ChangeAt = n
			if err := b.changes(ctx, n, &res); err != nil {
				return res, fmt.Errorf("endpoint changes at %d Services: %w", n, err)
			}
		}
	}
	if !o.SkipWrk {
		if err := b.wrk(ctx, &res); err != nil {
			return res, fmt.Errorf("wrk: %w", err)
		}
	}
	return res, nil
}

func newBench(l *lab.Lab, o Options) (*bench, error) {
	if l.Plan.Config.ProxyMode != lab.ProxyNFTables {
		return nil, fmt.Errorf("the lab's dataplane is %q: the benchmark compares against kube-proxy's nftables mode; bring the lab up with `ironlb lab up --proxy=nftables`", l.Plan.Config.ProxyMode)
	}
	if o.KubeProxyNode == o.IronLBNode {
		return nil, fmt.Errorf("kube-proxy and ironlb must be measured on different nodes (both are %s)", o.KubeProxyNode)
	}
	host := func(name string) (lab.Host, error) {
		h, ok := l.Plan.Host(name)
		if !ok || h.Role != lab.RoleWorker {
			return h, fmt.Errorf("no worker node %q in lab %s", name, l.Plan.Config.Name)
		}
		return h, nil
	}
	kh, err := host(o.KubeProxyNode)
	if err != nil {
		return nil, err
	}
	ih, err := host(o.IronLBNode)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.State.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &bench{
		l: l, o: o, cs: cs,
		kp: proxy{name: KubeProxy, node: kh.Name, addr: kh.Addr, namespace: kubeProxyNS, selector: "k8s-app=kube-proxy",
			container: "kube-proxy", table: "kube-proxy"},
		il: proxy{name: IronLB, node: ih.Name, addr: ih.Addr, namespace: ironlbNS, selector: "app=ironlb,component=proxy",
			container: "proxy", table: "ironlb", on: labelRunsIronLB},
	}, nil
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// poll calls check every interval until it is done, fails, or timeout passes (its last message
// is reported).
func poll(ctx context.Context, timeout, interval time.Duration, check func() (bool, string, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, msg, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s: %s", timeout, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
