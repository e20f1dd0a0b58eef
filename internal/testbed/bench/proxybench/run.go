package proxybench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"golang.org/x/sys/unix"

	manifests "github.com/ironlb/ironlb/config"
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
	metricsPort     = 10249                   // both proxies' metrics (kube-proxy: metricsBindAddress 0.0.0.0; ironlb: $(POD_IP), the node's address)
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
	cs     *kubernetes.Clientset
	kp, il proxy

	ips []netip.Addr // ClusterIP of Service i

	mu   sync.Mutex // guards undo
	undo []undoStep
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

// setup moves kube-proxy off ironlb's node, runs ironlb's proxy there, and makes the namespace
// (and, if the lab's service CIDR is too small for maxServices, a ServiceCIDR). Each change
// registers its undo before it is made.
func (b *bench) setup(ctx context.Context, maxServices int) error {
	if !b.o.SkipWrk {
		if _, err := exec.LookPath("wrk"); err != nil {
			return errors.New("wrk is not installed (apt-get install wrk), or pass --skip-wrk")
		}
	}
	if err := b.removeLeftovers(ctx); err != nil {
		return fmt.Errorf("removing an earlier run's leftovers: %w", err)
	}

	// kube-proxy: only on nodes without the bench label. The original affinity is restored at the
	// end (one more rolling restart of kube-proxy on every node).
	ds, err := b.cs.AppsV1().DaemonSets(kubeProxyNS).Get(ctx, kubeProxyDS, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kube-proxy's DaemonSet: %w", err)
	}
	orig := ds.Spec.Template.Spec.Affinity.DeepCopy()
	if mentionsBenchLabel(orig) { // an earlier run's patch, never undone: the manifest has no affinity
		orig = nil
	}
	b.push("restoring kube-proxy's DaemonSet to every node", func(ctx context.Context) error {
		if err := b.updateDaemonSet(ctx, kubeProxyNS, kubeProxyDS, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Affinity = orig }); err != nil {
			return err
		}
		return b.waitDaemonSet(ctx, kubeProxyNS, kubeProxyDS, 5*time.Minute)
	})
	b.push("removing the bench's node labels", b.unlabelNodes)
	if err := b.setLabel(ctx, b.il.node, labelRunsIronLB); err != nil {
		return err
	}
	uids, err := b.uidsOn(ctx, &b.kp, b.il.node)
	if err != nil {
		return err
	}
	b.o.Log("kube-proxy: only on nodes without the %s label (rolling restart of every kube-proxy)", benchLabel)
	if err := b.updateDaemonSet(ctx, kubeProxyNS, kubeProxyDS, func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: benchLabel, Operator: corev1.NodeSelectorOpDoesNotExist}},
			}}},
		}}
	}); err != nil {
		return err
	}
	if err := b.waitDaemonSet(ctx, kubeProxyNS, kubeProxyDS, 5*time.Minute); err != nil {
		return err
	}
	if err := b.waitGone(ctx, &b.kp, b.il.node, uids, 2*time.Minute); err != nil {
		return err
	}
	// ironlb's proxy on its node, from the node's empty dataplane.
	if err := deleteTables(lab.NetNSPath(b.il.node), b.kp.table); err != nil {
		return err
	}
	err = b.installIronLB(ctx)
	// Pushed after installIronLB's own undo steps (its RBAC and ConfigMap), so that it runs first.
	b.push("removing ironlb's proxy and its tables on "+b.il.node, b.removeIronLB)
	if err != nil {
		return err
	}
	if err := b.waitDaemonSet(ctx, ironlbNS, ironlbDS, 3*time.Minute); err != nil {
		return err
	}
	b.o.Log("ironlb proxy running on %s, kube-proxy (nftables) on the other nodes; measuring kube-proxy on %s", b.il.node, b.kp.node)

	if need := maxServices + 64; CIDRCapacity(b.l.Plan.Config.ServiceCIDR) < need {
		if err := b.addServiceCIDR(ctx); err != nil {
			return err
		}
	}
	b.push("deleting namespace "+Namespace+" (Services, EndpointSlices, Pods)", b.deleteNamespace)
	_, err = b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: map[string]string{benchLabel: "true"}}}, metav1.CreateOptions{})
	return err
}

func mentionsBenchLabel(a *corev1.Affinity) bool {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == benchLabel {
				return true
			}
		}
	}
	return false
}

// removeLeftovers undoes what an interrupted earlier run may have left: its namespace, its
// ironlb-proxy DaemonSet and node labels (kube-proxy's affinity is handled by setup).
func (b *bench) removeLeftovers(ctx context.Context) error {
	if _, err := b.cs.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); err == nil {
		b.o.Log("namespace %s is left from an earlier run: deleting it", Namespace)
		if err := b.deleteNamespace(ctx); err != nil {
			return err
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	ds, err := b.cs.AppsV1().DaemonSets(ironlbNS).Get(ctx, ironlbDS, metav1.GetOptions{})
	switch {
	case err == nil && ds.Annotations[ownerAnnotation] == "":
		return fmt.Errorf("DaemonSet %s/%s exists and is not the benchmark's: the lab must run kube-proxy (lab up --proxy=nftables)", ironlbNS, ironlbDS)
	case err == nil:
		b.o.Log("ironlb's proxy is left from an earlier run: removing it")
		if err := b.removeIronLB(ctx); err != nil {
			return err
		}
	case !apierrors.IsNotFound(err):
		return err
	}
	return b.unlabelNodes(ctx)
}

// installIronLB creates config/proxy's objects with client-go: the RBAC as it is, the DaemonSet
// only on the node labelled for it, and the ConfigMap ironlb-proxy giving it the apiserver's
// real address (as `lab up --proxy=ironlb` does). Objects that already exist are left alone, and
// not deleted at the end.
func (b *bench) installIronLB(ctx context.Context) error {
	bundle, err := manifests.Bundle("proxy")
	if err != nil {
		return err
	}
	objs, err := decodeBundle(bundle)
	if err != nil {
		return err
	}
	cp := b.l.Plan.ControlPlane()
	u := strings.TrimPrefix(b.l.Plan.APIServerURL(), "https://")
	ap, err := netip.ParseAddrPort(u)
	if err != nil {
		return fmt.Errorf("apiserver address %q: %w", u, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ironlbDS, Namespace: ironlbNS, Annotations: map[string]string{ownerAnnotation: "bench-proxy"}},
		Data: map[string]string{"apiServerHost": cp.Addr.String(), "apiServerPort": fmt.Sprint(ap.Port())}}
	objs = append([]any{cm}, objs...)
	for _, o := range objs {
		var err error
		var kind, name string
		switch o := o.(type) {
		case *corev1.ConfigMap:
			kind, name = "configmap", o.Name
			_, err = b.cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			b.pushDelete(err, kind, name, func(ctx context.Context) error {
				return b.cs.CoreV1().ConfigMaps(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		case *corev1.ServiceAccount:
			kind, name = "serviceaccount", o.Name
			_, err = b.cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			b.pushDelete(err, kind, name, func(ctx context.Context) error {
				return b.cs.CoreV1().ServiceAccounts(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		case *rbacv1.ClusterRole:
			kind, name = "clusterrole", o.Name
			_, err = b.cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			b.pushDelete(err, kind, name, func(ctx context.Context) error {
				return b.cs.RbacV1().ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		case *rbacv1.ClusterRoleBinding:
			kind, name = "clusterrolebinding", o.Name
			_, err = b.cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			b.pushDelete(err, kind, name, func(ctx context.Context) error {
				return b.cs.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{})
			})
		case *appsv1.DaemonSet:
			kind, name = "daemonset", o.Name
			onlyOn(o, benchLabel, labelRunsIronLB)
			// removeIronLB (pushed by setup) deletes it, waits for its Pod and deletes its tables.
			_, err = b.cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("config/proxy: unexpected object %T", o)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", kind, name, err)
		}
	}
	return nil
}

// pushDelete registers the deletion of an object that this run created (err is the creation's).
func (b *bench) pushDelete(err error, kind, name string, del func(context.Context) error) {
	if err != nil {
		return
	}
	b.push("deleting "+kind+" "+name, func(ctx context.Context) error {
		if err := del(ctx); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
}

// onlyOn marks ds as the benchmark's and restricts it to nodes labelled key=value.
func onlyOn(ds *appsv1.DaemonSet, key, value string) {
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[ownerAnnotation] = "bench-proxy"
	ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}},
		}}},
	}}
}

// decodeBundle decodes a multi-document YAML bundle into typed objects, skipping documents that
// hold only comments.
func decodeBundle(bundle string) ([]any, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(bundle)))
	var out []any
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if !hasContent(doc) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding %.60q: %w", doc, err)
		}
		out = append(out, obj)
	}
}

func hasContent(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return true
		}
	}
	return false
}

// removeIronLB deletes the benchmark's ironlb-proxy DaemonSet, waits for its Pod to be gone, and
// deletes the tables it leaves on its node.
func (b *bench) removeIronLB(ctx context.Context) error {
	uids := map[string][]types.UID{}
	for _, h := range b.l.Plan.Nodes {
		u, err := b.uidsOn(ctx, &b.il, h.Name)
		if err != nil {
			return err
		}
		uids[h.Name] = u
	}
	err := b.cs.AppsV1().DaemonSets(ironlbNS).Delete(ctx, ironlbDS, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var errs []error
	for _, h := range b.l.Plan.Nodes {
		if err := b.waitGone(ctx, &b.il, h.Name, uids[h.Name], 2*time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, deleteTables(lab.NetNSPath(b.il.node), b.il.table))
	}
	return errors.Join(errs...)
}

func (b *bench) updateDaemonSet(ctx context.Context, ns, name string, change func(*appsv1.DaemonSet)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := b.cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(ds)
		_, err = b.cs.AppsV1().DaemonSets(ns).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
}

// waitDaemonSet waits until a DaemonSet's rollout is complete: every wanted Pod updated and ready.
func (b *bench) waitDaemonSet(ctx context.Context, ns, name string, timeout time.Duration) error {
	return poll(ctx, timeout, 200*time.Millisecond, func() (bool, string, error) {
		ds, err := b.cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		s := ds.Status
		msg := fmt.Sprintf("daemonset %s/%s: %d wanted, %d updated, %d ready", ns, name, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady)
		return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled > 0 && s.UpdatedNumberScheduled == s.DesiredNumberScheduled &&
			s.NumberReady == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled, msg, nil
	})
}

// setLabel sets the bench label on a node to value, or removes it if value is "".
func (b *bench) setLabel(ctx context.Context, node, value string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := b.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if value == "" {
			if _, ok := n.Labels[benchLabel]; !ok {
				return nil
			}
			delete(n.Labels, benchLabel)
		} else {
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels[benchLabel] = value
		}
		_, err = b.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func (b *bench) unlabelNodes(ctx context.Context) error {
	var errs []error
	for _, h := range b.l.Plan.Nodes {
		errs = append(errs, b.setLabel(ctx, h.Name, ""))
	}
	return errors.Join(errs...)
}

// pods returns p's Pods on node that are not being deleted, and whether any is being deleted.
func (b *bench) pods(ctx context.Context, p *proxy, node string) (live []corev1.Pod, terminating bool, err error) {
	l, err := b.cs.CoreV1().Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, false, err
	}
	for _, pod := range l.Items {
		if pod.DeletionTimestamp != nil {
			terminating = true
			continue
		}
		live = append(live, pod)
	}
	return live, terminating, nil
}

// uidsOn returns the UIDs of p's Pods on node, terminating ones included.
func (b *bench) uidsOn(ctx context.Context, p *proxy, node string) ([]types.UID, error) {
	l, err := b.cs.CoreV1().Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	var out []types.UID
	for _, pod := range l.Items {
		out = append(out, pod.UID)
	}
	return out, nil
}

// waitGone waits until p has no Pod on node, not even a terminating one, and the processes of
// the Pods uids had there are gone (the agent removes a Pod's cgroup once it has killed it).
func (b *bench) waitGone(ctx context.Context, p *proxy, node string, uids []types.UID, timeout time.Duration) error {
	return poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
		live, terminating, err := b.pods(ctx, p, node)
		if err != nil {
			return false, err.Error(), nil
		}
		if len(live) > 0 || terminating {
			return false, fmt.Sprintf("%s still has a Pod on %s", p.name, node), nil
		}
		for _, uid := range uids {
			cg, err := b.l.Cgroup(node, "pods", string(uid))
			if err != nil {
				return false, "", err
			}
			if n := len(cg.Procs()); n > 0 {
				return false, fmt.Sprintf("%d processes of %s's Pod %s still run on %s", n, p.name, uid, node), nil
			}
		}
		return true, "", nil
	})
}

// currentPod returns p's running Pod on its node.
func (b *bench) currentPod(ctx context.Context, p *proxy) (corev1.Pod, error) {
	live, _, err := b.pods(ctx, p, p.node)
	if err != nil {
		return corev1.Pod{}, err
	}
	if len(live) != 1 {
		return corev1.Pod{}, fmt.Errorf("%s has %d Pods on %s, want 1", p.name, len(live), p.node)
	}
	return live[0], nil
}

// restart stops p, deletes its tables, starts it again and times its first full sync with n
// Services present.
func (b *bench) restart(ctx context.Context, p *proxy, n int) (SyncTrial, error) {
	tr := SyncTrial{Services: n, Sync: -1, OwnFull: -1, OwnLast: -1, PeakRSS: -1}
	old, err := b.currentPod(ctx, p)
	if err != nil {
		return tr, err
	}
	if err := b.setLabel(ctx, p.node, labelNoProxy); err != nil {
		return tr, err
	}
	if err := b.waitGone(ctx, p, p.node, []types.UID{old.UID}, 2*time.Minute); err != nil {
		return tr, err
	}
	netns := lab.NetNSPath(p.node)
	if err := deleteTables(netns, p.table); err != nil {
		return tr, err
	}
	probe, err := NewElementProbe(netns, p.table, serviceIPsMap, ServiceKey(b.ips[n-1], servicePort))
	if err != nil {
		return tr, err
	}
	defer probe.Close()
	if ok, err := probe.Present(); err != nil || ok {
		return tr, fmt.Errorf("the last Service's element is still in %s's table after deleting it (err %v)", p.name, err)
	}
	if err := b.setLabel(ctx, p.node, p.on); err != nil {
		return tr, err
	}

	var (
		podCg lab.Cgroup
		uid   types.UID
		start time.Time
		done  time.Time
	)
	deadline := time.Now().Add(syncTimeout)
	tick := time.NewTicker(syncPoll)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return tr, ctx.Err()
		case <-tick.C:
		}
		if uid == "" && i%rssEvery == 0 {
			if live, _, err := b.pods(ctx, p, p.node); err == nil && len(live) == 1 && live[0].UID != old.UID {
				uid = live[0].UID
				if podCg, err = b.l.Cgroup(p.node, "pods", string(uid)); err != nil {
					return tr, err
				}
			}
		}
		if podCg != "" && start.IsZero() {
			start = containerStart(podCg, p.container)
		}
		if podCg != "" && i%rssEvery == 0 {
			tr.PeakRSS = max(tr.PeakRSS, podCg.RSS())
		}
		if done.IsZero() {
			ok, err := probe.Present()
			if err != nil {
				return tr, err
			}
			if ok {
				done = time.Now()
			}
		} else if time.Since(done) > time.Second && !start.IsZero() {
			break // RSS sampled for a second after the sync
		}
		if time.Now().After(deadline) {
			return tr, fmt.Errorf("%s on %s: no full sync with %d Services after %s (Pod %q, started %v)", p.name, p.node, n, syncTimeout, uid, !start.IsZero())
		}
	}
	tr.Sync = done.Sub(start)
	own, err := b.waitOwn(ctx, p, func(o Own) bool { return o.FullCount >= 1 && o.Last > 0 }, 10*time.Second)
	if err != nil {
		b.o.Log("%s's own metrics: %v", p.name, err)
	} else {
		tr.OwnFull = seconds(own.FullSum / own.FullCount)
		tr.OwnLast = time.Unix(0, int64(own.Last*1e9)).Sub(start)
	}
	return tr, b.waitPodReady(ctx, p, uid, 2*time.Minute)
}

// containerStart returns when the first process of the container's cgroup (<pod>/<container>-<run>)
// started, or the zero time if it has none yet.
func containerStart(podCg lab.Cgroup, container string) time.Time {
	dirs, _ := filepath.Glob(filepath.Join(string(podCg), container+"-*"))
	var first time.Time
	for _, d := range dirs {
		for _, pid := range lab.Cgroup(d).Procs() {
			if t, err := procStart(pid); err == nil && (first.IsZero() || t.Before(first)) {
				first = t
			}
		}
	}
	return first
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every Linux architecture the
// lab runs on.
const clockTicks = 100

// procStart returns when a process started (10 ms resolution).
func procStart(pid int) (time.Time, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, err
	}
	ticks, err := ProcStartTicks(string(b))
	if err != nil {
		return time.Time{}, err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	sinceStart := time.Duration(ts.Nano()) - time.Duration(ticks)*time.Second/clockTicks
	return now.Add(-sinceStart), nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (b *bench) waitPodReady(ctx context.Context, p *proxy, uid types.UID, timeout time.Duration) error {
	return poll(ctx, timeout, 100*time.Millisecond, func() (bool, string, error) {
		live, _, err := b.pods(ctx, p, p.node)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, pod := range live {
			if pod.UID != uid {
				continue
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, "", nil
				}
			}
		}
		return false, fmt.Sprintf("%s's Pod on %s is not Ready", p.name, p.node), nil
	})
}

// metrics reads p's metrics from inside its node.
func (b *bench) metrics(ctx context.Context, p *proxy) (Own, error) {
	return scrapeOwn(ctx, p.name, p.node, fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(p.addr, metricsPort)))
}

// scrapeOwn reads a proxy's sync metrics at url from inside the named network namespace.
func scrapeOwn(ctx context.Context, name, netns, url string) (Own, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: lab.Dialer(netns), DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Own{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return Own{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Own{}, fmt.Errorf("%s metrics: %s", name, resp.Status)
	}
	ss, err := ParseMetrics(resp.Body)
	if err != nil {
		return Own{}, err
	}
	return OwnMetrics(name, ss), nil
}

// waitOwn reads p's metrics until ok accepts them.
func (b *bench) waitOwn(ctx context.Context, p *proxy, ok func(Own) bool, timeout time.Duration) (Own, error) {
	return waitOwn(ctx, func(ctx context.Context) (Own, error) { return b.metrics(ctx, p) }, ok, timeout)
}

// waitOwn reads a proxy's metrics until ok accepts them.
func waitOwn(ctx context.Context, metrics func(context.Context) (Own, error), ok func(Own) bool, timeout time.Duration) (Own, error) {
	var own Own
	var last error
	err := poll(ctx, timeout, 100*time.Millisecond, func() (bool, string, error) {
		var err error
		own, err = metrics(ctx)
		if err != nil {
			last = err
			return false, err.Error(), nil
		}
		return ok(own), fmt.Sprintf("%+v", own), nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last error: %v)", err, last)
	}
	return own, err
}

func svcName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// ensureServices creates Services (ClusterIP, no selector) and their EndpointSlices (2 fake
// endpoints each) until there are n.
func (b *bench) ensureServices(ctx context.Context, n int) error {
	ips, err := createServices(ctx, []kubernetes.Interface{b.cs}, b.ips, n, b.o.Log)
	if err != nil {
		return err
	}
	b.ips = ips
	return nil
}

// createServices creates Services len(have)..n-1 in Namespace (ClusterIP, no selector) and their
// EndpointSlices (2 fake endpoints each) with proxyWorkers concurrent writers spread over
// clients, and returns the ClusterIPs of all n.
func createServices(ctx context.Context, clients []kubernetes.Interface, have []netip.Addr, n int, log func(string, ...any)) ([]netip.Addr, error) {
	from := len(have)
	if from >= n {
		return have, nil
	}
	ips := make([]netip.Addr, n)
	copy(ips, have)
	log("creating Services %d..%d with their EndpointSlices (%d writers)", from, n-1, proxyWorkers)
	var next, done atomic.Int64
	next.Store(int64(from))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for w := range proxyWorkers {
		cs := clients[w%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				ip, err := createService(ctx, cs, i)
				if err != nil {
					cancel(fmt.Errorf("Service %s: %w", svcName(i), err))
					return
				}
				ips[i] = ip
				done.Add(1)
			}
		}()
	}
	stop := make(chan struct{})
	t0 := time.Now()
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				d := done.Load()
				log("  %d/%d Services created (%.0f/s)", from+int(d), n, float64(d)/time.Since(t0).Seconds())
			}
		}
	}()
	wg.Wait()
	close(stop)
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	log("  %d Services, %d endpoints (%.0f Services/s)", n, 2*n, float64(n-from)/time.Since(t0).Seconds())
	return ips, nil
}

// createService creates Service i and its EndpointSlice (either may exist) and returns its ClusterIP.
func createService(ctx context.Context, cs kubernetes.Interface, i int) (netip.Addr, error) {
	name := svcName(i)
	svcs := cs.CoreV1().Services(Namespace)
	var svc *corev1.Service
	err := withRetry(ctx, func() error {
		var err error
		svc, err = svcs.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{benchLabel: "true"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{
				Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(servicePort),
			}}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			svc, err = svcs.Get(ctx, name, metav1.GetOptions{})
		}
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ClusterIP %q: %w", svc.Spec.ClusterIP, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: managedBy, benchLabel: "true",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](servicePort)}},
	}
	for j := range 2 {
		slice.Endpoints = append(slice.Endpoints, endpoint(EndpointAddr(i, j)))
	}
	err = withRetry(ctx, func() error {
		_, err := cs.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, slice, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	return ip, err
}

func endpoint(a netip.Addr) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{a.String()},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
}

// withRetry retries an API write a few times on errors that may pass (throttling, timeouts).
func withRetry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		err = fn()
		if err == nil || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return err
}

// waitSynced waits until both proxies have the n-th Service, so that restarts and changes start
// from a settled node.
func (b *bench) waitSynced(ctx context.Context, n int) error {
	t := time.Now()
	for _, p := range []*proxy{&b.kp, &b.il} {
		probe, err := NewElementProbe(lab.NetNSPath(p.node), p.table, serviceIPsMap, ServiceKey(b.ips[n-1], servicePort))
		if err != nil {
			return err
		}
		err = poll(ctx, syncTimeout, 100*time.Millisecond, func() (bool, string, error) {
			ok, err := probe.Present()
			return ok, fmt.Sprintf("%s on %s has not programmed %s (Service %d)", p.name, p.node, b.ips[n-1], n-1), err
		})
		probe.Close()
		if err != nil {
			return err
		}
	}
	b.o.Log("both proxies have the %d Services (%.1fs after the last was created)", n, time.Since(t).Seconds())
	return nil
}

// changes moves one endpoint of a different Service each time and times, on both nodes at once,
// the kernel's announcement of the new endpoint's chain; both proxies see the same change.
func (b *bench) changes(ctx context.Context, n int, res *Result) error {
	var ts []changeTarget
	for _, p := range []*proxy{&b.kp, &b.il} {
		ts = append(ts, changeTarget{name: p.name, where: p.node, netns: lab.NetNSPath(p.node), table: p.table,
			metrics: func(ctx context.Context) (Own, error) { return b.metrics(ctx, p) }})
	}
	return measureChanges(ctx, b.cs, ts, n, b.o.Changes, b.o.Log, res)
}

// changeTarget is one proxy whose endpoint changes are timed.
type changeTarget struct {
	name    string // KubeProxy or IronLB
	where   string // its node, for messages
	netns   string // path of its network namespace
	table   string
	metrics func(context.Context) (Own, error)
}

// measureChanges moves one endpoint of a different Service among n each time, count times, and
// times, on every target at once, the kernel's announcement of the new endpoint's chain; all
// targets see the same change.
func measureChanges(ctx context.Context, cs kubernetes.Interface, ts []changeTarget, n, count int, log func(string, ...any), res *Result) error {
	var addrs []netip.Addr
	for k := range count {
		addrs = append(addrs, ChangeAddr(k))
	}
	watchers := map[string]*ChainWatcher{}
	for _, p := range ts {
		w, err := WatchChains(p.netns, addrs...)
		if err != nil {
			return err
		}
		defer w.Close()
		watchers[p.name] = w
	}
	eps := cs.DiscoveryV1().EndpointSlices(Namespace)
	for k := range count {
		i := ChangeService(k, n)
		addr := ChangeAddr(k)
		before := map[string]Own{}
		for _, p := range ts {
			own, err := p.metrics(ctx)
			if err != nil {
				own = Own{PartialCount: -1}
			}
			before[p.name] = own
		}
		s, err := eps.Get(ctx, svcName(i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Endpoints[0] = endpoint(addr)
		t0 := time.Now()
		if _, err := eps.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
		markers := []string{EndpointMarker(netip.AddrPortFrom(addr, servicePort)), AddrEvent(addr)}
		line := fmt.Sprintf("change %2d/%d (%s: endpoint -> %s):", k+1, count, svcName(i), addr)
		for _, p := range ts {
			ct := ChangeTrial{Ruleset: -1, Own: -1}
			at, err := watchers[p.name].WaitForAny(ctx, p.table, markers, t0, 30*time.Second)
			if err != nil {
				return fmt.Errorf("%s on %s: %w (%s)", p.name, p.where, err, grepTable(p.netns, p.table, addr.String()))
			}
			ct.Ruleset = at.Sub(t0)
			if before[p.name].PartialCount >= 0 {
				if after, err := waitOwn(ctx, p.metrics, func(o Own) bool { return o.PartialCount > before[p.name].PartialCount }, 5*time.Second); err == nil {
					if s := PartialSince(before[p.name], after); s >= 0 {
						ct.Own = seconds(s)
					}
				}
			}
			res.Changes[p.name] = append(res.Changes[p.name], ct)
			line += fmt.Sprintf("  %s %s (own %s)", p.name, fmtDur(ct.Ruleset), fmtDur(ct.Own))
		}
		log("%s", line)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(changeSpacing):
		}
	}
	return nil
}

// wrk runs wrk from the client against a NodePort Service (externalTrafficPolicy Local) on each
// proxy's node, and against the Pod behind it directly.
//
// The client has no route to the pod network (its default route is the bridge's, which has
// none), so the benchmark adds a /32 route to each target Pod via that Pod's node, and removes it
// at the end. Direct and NodePort traffic then take the same path, client -> node -> Pod, and the
// only difference is the proxy's DNAT on the node.
func (b *bench) wrk(ctx context.Context, res *Result) error {
	client := b.l.Plan.Client
	podIPs := map[string]netip.Addr{}
	for _, p := range []*proxy{&b.kp, &b.il} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + p.node, Labels: map[string]string{"app": webApp, benchLabel: "true"}},
			// No service links: the namespace holds up to 30,000 Services, whose variables would
			// not fit in a process's environment.
			Spec: corev1.PodSpec{NodeName: p.node, EnableServiceLinks: ptr.To(false), Containers: []corev1.Container{{
				Name: "whoami", Image: "traefik/whoami", Ports: []corev1.ContainerPort{{ContainerPort: servicePort}},
			}}},
		}
		if _, err := b.cs.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	svc, err := b.cs.CoreV1().Services(Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{benchLabel: "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector: map[string]string{"app": webApp},
			Ports:    []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(servicePort)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	nodePort := svc.Spec.Ports[0].NodePort
	for _, p := range []*proxy{&b.kp, &b.il} {
		err := poll(ctx, 2*time.Minute, 200*time.Millisecond, func() (bool, string, error) {
			pod, err := b.cs.CoreV1().Pods(Namespace).Get(ctx, "web-"+p.node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			a, err := netip.ParseAddr(pod.Status.PodIP)
			if err != nil || pod.Status.Phase != corev1.PodRunning {
				return false, fmt.Sprintf("Pod %s: %s", pod.Name, pod.Status.Phase), nil
			}
			podIPs[p.name] = a
			return true, "", nil
		})
		if err != nil {
			return err
		}
		route := []string{"-n", client.Name, "route", "replace", podIPs[p.name].String() + "/32", "via", p.addr.String()}
		b.push(fmt.Sprintf("removing %s's route to %s", client.Name, podIPs[p.name]), func(ctx context.Context) error {
			return run(ctx, "ip", "-n", client.Name, "route", "del", podIPs[p.name].String()+"/32")
		})
		if err := run(ctx, "ip", route...); err != nil {
			return err
		}
	}
	targets := []struct{ name, url string }{
		{TargetDirectIronLB, fmt.Sprintf("http://%s/", netip.AddrPortFrom(podIPs[IronLB], servicePort))},
		{TargetIronLB, fmt.Sprintf("http://%s/", netip.AddrPortFrom(b.il.addr, uint16(nodePort)))},
		{TargetDirectKube, fmt.Sprintf("http://%s/", netip.AddrPortFrom(podIPs[KubeProxy], servicePort))},
		{TargetKubeProxy, fmt.Sprintf("http://%s/", netip.AddrPortFrom(b.kp.addr, uint16(nodePort)))},
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: lab.Dialer(client.Name), DisableKeepAlives: true}}
	for _, t := range targets {
		err := poll(ctx, time.Minute, 200*time.Millisecond, func() (bool, string, error) {
			resp, err := hc.Get(t.url)
			if err != nil {
				return false, err.Error(), nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status, nil
		})
		if err != nil {
			return fmt.Errorf("%s from %s: %w", t.url, client.Name, err)
		}
	}
	secs := max(1, int(b.o.WrkDuration.Seconds()))
	args := []string{"-t2", "-c50", fmt.Sprintf("-d%ds", secs), "--latency"}
	res.WrkSpec = strings.Join(args[:3], " ") + " from " + client.Name
	for r := 1; r <= b.o.WrkRounds; r++ {
		for _, t := range targets {
			cmd := exec.CommandContext(ctx, b.o.Self, append(append([]string{"lab", "exec", client.Name, "--", "wrk"}, args...), t.url)...)
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("wrk %s: %w\n%s", t.url, err, out)
			}
			w, err := ParseWrk(bytes.NewReader(out))
			if err != nil {
				return fmt.Errorf("wrk %s: %w\n%s", t.url, err, out)
			}
			res.Wrk[t.name] = append(res.Wrk[t.name], w)
			b.o.Log("wrk round %d/%d %-16s %s: %.0f req/s, p50 %s, p99 %s, %d errors", r, b.o.WrkRounds, t.name, t.url, w.RPS, fmtDur(w.P50), fmtDur(w.P99), w.Errors)
		}
	}
	return nil
}

// grepTable says which lines of `nft list table ip TABLE` in the network namespace at netnsPath
// mention s: what the ruleset holds when a change was not seen.
func grepTable(netnsPath, table, s string) string {
	out, err := exec.Command("nsenter", "--net="+netnsPath, "nft", "list", "table", "ip", table).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("nft list table ip %s: %v: %s", table, err, bytes.TrimSpace(out))
	}
	var hits []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, s) {
			hits = append(hits, strings.TrimSpace(l))
		}
	}
	return fmt.Sprintf("the table's lines with %s: %q", s, hits)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// addServiceCIDR adds o.ServiceCIDR as a ServiceCIDR (networking.k8s.io/v1): the lab's service
// CIDR (the seed's /24) holds 254 ClusterIPs, the benchmark needs up to 30,000. The apiserver
// allocates from it once the default range is full.
func (b *bench) addServiceCIDR(ctx context.Context) error {
	c := b.l.Plan.Config
	p := b.o.ServiceCIDR.Masked()
	for _, other := range []netip.Prefix{c.NodeCIDR, c.PodCIDR, c.ServiceCIDR, c.RouterCIDR} {
		if other.IsValid() && other.Overlaps(p) {
			return fmt.Errorf("--service-cidr %s overlaps the lab's %s", p, other)
		}
	}
	b.o.Log("the lab's service CIDR %s is too small: adding ServiceCIDR %s (%s)", c.ServiceCIDR, serviceCIDRName, p)
	b.push("deleting ServiceCIDR "+serviceCIDRName, func(ctx context.Context) error {
		err := b.cs.NetworkingV1().ServiceCIDRs().Delete(ctx, serviceCIDRName, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	_, err := b.cs.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: serviceCIDRName, Labels: map[string]string{benchLabel: "true"}},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{p.String()}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("adding ServiceCIDR %s (or bring the lab up with a larger --service-cidr): %w", p, err)
	}
	return poll(ctx, time.Minute, 200*time.Millisecond, func() (bool, string, error) {
		sc, err := b.cs.NetworkingV1().ServiceCIDRs().Get(ctx, serviceCIDRName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, cond := range sc.Status.Conditions {
			if cond.Type == networkingv1.ServiceCIDRConditionReady && cond.Status == metav1.ConditionTrue {
				return true, "", nil
			}
		}
		return false, "ServiceCIDR " + serviceCIDRName + " is not Ready", nil
	})
}

// deleteNamespace deletes the benchmark's EndpointSlices, Services (many writers: the namespace
// controller would delete 30,000 Services at its own 20 requests per second) and Pods, then the
// namespace, and waits until it is gone.
func (b *bench) deleteNamespace(ctx context.Context) error {
	sel := metav1.ListOptions{LabelSelector: benchLabel + "=true"}
	if err := b.cs.DiscoveryV1().EndpointSlices(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var names []string
	opts := sel
	opts.Limit = 5000
	for {
		l, err := b.cs.CoreV1().Services(Namespace).List(ctx, opts)
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			names = append(names, s.Name)
		}
		if opts.Continue = l.Continue; opts.Continue == "" {
			break
		}
	}
	if len(names) > 0 {
		b.o.Log("  deleting %d Services", len(names))
		var next, done atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		stop := make(chan struct{})
		go func() {
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					b.o.Log("  %d/%d Services deleted", done.Load(), len(names))
				}
			}
		}()
		for range proxyWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= len(names) || ctx.Err() != nil {
						return
					}
					err := withRetry(ctx, func() error {
						return b.cs.CoreV1().Services(Namespace).Delete(ctx, names[i], metav1.DeleteOptions{})
					})
					if err != nil && !apierrors.IsNotFound(err) {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		close(stop)
		if len(errs) > 0 {
			return fmt.Errorf("deleting Services: %d errors, the first: %w", len(errs), errs[0])
		}
	}
	if err := b.cs.CoreV1().Pods(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := b.cs.CoreV1().Namespaces().Delete(ctx, Namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	b.ips = nil
	return poll(ctx, 5*time.Minute, 500*time.Millisecond, func() (bool, string, error) {
		_, err := b.cs.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "namespace " + Namespace + " is still terminating", nil
	})
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
