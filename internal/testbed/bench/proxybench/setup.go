package proxybench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	manifests "github.com/ironlb/ironlb/config"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

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
		switch o := o.(type) {
		case *corev1.ConfigMap:
			c := b.cs.CoreV1().ConfigMaps(o.Namespace)
			err = createOwned(ctx, b, "configmap", o, c.Create, c.Delete)
		case *corev1.ServiceAccount:
			c := b.cs.CoreV1().ServiceAccounts(o.Namespace)
			err = createOwned(ctx, b, "serviceaccount", o, c.Create, c.Delete)
		case *rbacv1.ClusterRole:
			c := b.cs.RbacV1().ClusterRoles()
			err = createOwned(ctx, b, "clusterrole", o, c.Create, c.Delete)
		case *rbacv1.ClusterRoleBinding:
			c := b.cs.RbacV1().ClusterRoleBindings()
			err = createOwned(ctx, b, "clusterrolebinding", o, c.Create, c.Delete)
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			// It narrows the proxy's nodes/status writes to its own Node's ironlb.io/dsr-macs.
			c := b.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies()
			err = createOwned(ctx, b, "validatingadmissionpolicy", o, c.Create, c.Delete)
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			c := b.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
			err = createOwned(ctx, b, "validatingadmissionpolicybinding", o, c.Create, c.Delete)
		case *appsv1.DaemonSet:
			onlyOn(o, benchLabel, labelRunsIronLB)
			// removeIronLB (pushed by setup) deletes it, waits for its Pod and deletes its tables.
			err = createOwned(ctx, b, "daemonset", o, b.cs.AppsV1().DaemonSets(o.Namespace).Create, nil)
		default:
			return fmt.Errorf("config/proxy: unexpected object %T", o)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// createOwned creates o with create unless it exists (then it is left alone), and, if it created it
// and del is not nil, registers o's deletion with del. An error names the kind and o.
func createOwned[T interface{ GetName() string }](ctx context.Context, b *bench, kind string, o T,
	create func(context.Context, T, metav1.CreateOptions) (T, error), del func(context.Context, string, metav1.DeleteOptions) error) error {
	_, err := create(ctx, o, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("creating %s %s: %w", kind, o.GetName(), err)
	}
	if del != nil {
		b.push("deleting "+kind+" "+o.GetName(), func(ctx context.Context) error {
			if err := del(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	return nil
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
