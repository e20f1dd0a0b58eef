package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// Agent runs one node. All fields are set by Run before any goroutine starts, except those under mu.
type Agent struct {
	lab       *lab.Lab
	host      lab.Host
	client    kubernetes.Interface
	log       *slog.Logger
	progs     Programs
	hostPorts *hostPorts   // the Pods' hostPorts, DNATed in the node's own table
	runc      *runcRuntime // lab up --runtime=runc (runc.go); nil runs every image as a host program
	realtime  bool         // the node's cgroups have their real-time CPU budget (setRealtimeBudget)

	mu     sync.Mutex // guards the following fields
	pods   map[types.UID]*podWorker
	ipam   []*IPAM           // one per family of the node's pod CIDRs, once assigned
	ready  bool              // podCIDR assigned and routes programmed
	routes map[string]string // destination CIDR -> next hop, as programmed

	podStore   cache.Store // this node's Pods, as the informer holds them
	podsSynced func() bool // the informer's first list has reached podChanged
}

// Run registers node and serves it until ctx ends.
func Run(ctx context.Context, l *lab.Lab, node string) error {
	h, ok := l.Plan.Host(node)
	if !ok || !h.IsNode() {
		return fmt.Errorf("agent: no node %q in the lab", node)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.State.InternalKubeconfig())
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "ironlb-lab-agent/" + node
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", node)
	a := &Agent{
		lab: l, host: h, client: cs,
		log:       log,
		hostPorts: newHostPorts(log),
		progs:     Programs{Self: l.Plan.Config.Self, K8sBin: l.Plan.Config.K8sBin, MetalLB: lab.DefaultMetalLBBin(), E2EBin: lab.DefaultE2EBin(), CoreDNS: l.Plan.Config.CoreDNSBin},
		pods:      map[types.UID]*podWorker{},
		routes:    map[string]string{},
	}
	if l.Plan.Config.Runtime == RuntimeRunc {
		if a.runc, err = newRuncRuntime(l, node); err != nil {
			return err
		}
	}
	a.cleanOrphans(ctx)
	a.setRealtimeBudget()
	if err := a.register(ctx); err != nil {
		return err
	}
	a.log.Info("node registered")
	go a.heartbeat(ctx)
	go func() {
		if err := a.serveKubeletAPI(ctx); err != nil {
			a.log.Error("kubelet API not served: kubectl exec, logs and port-forward will fail on this node", "err", err)
		}
	}()

	nodeInf := informers.NewSharedInformerFactory(cs, 0)
	nodeInf.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.syncNetwork(ctx, nodeInf) },
		UpdateFunc: func(any, any) { a.syncNetwork(ctx, nodeInf) },
		DeleteFunc: func(any) { a.syncNetwork(ctx, nodeInf) },
	})
	podInf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	podInformer := podInf.Core().V1().Pods().Informer()
	a.podStore = podInformer.GetStore()
	reg, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.podChanged(ctx, o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { a.podChanged(ctx, o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				a.podGone(p.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	a.podsSynced = reg.HasSynced
	nodeInf.Start(ctx.Done())
	podInf.Start(ctx.Done())
	<-ctx.Done()
	a.log.Info("agent stopping")
	return nil
}

// cleanOrphans removes what an earlier agent on this node left: container processes (they cannot be
// adopted) and Pod namespaces. The Pods are recreated from the API.
func (a *Agent) cleanOrphans(ctx context.Context) {
	if cg, err := a.lab.Cgroup(a.host.Name, "pods"); err == nil {
		_ = cg.Remove()
	}
	if a.runc != nil {
		if err := a.runc.cleanOrphans(); err != nil {
			a.log.Warn("removing runc containers left by an earlier agent", "err", err)
		}
	}
	for _, ns := range lab.ListNetNS() {
		if strings.HasPrefix(ns, lab.PodNetNSPrefix(a.host.Name)) {
			_ = lab.DeleteNetNS(ctx, ns)
		}
	}
	a.hostPorts.reset(ctx)
}

func (a *Agent) nodeObject() *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": a.host.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": runtime.GOARCH,
		"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": runtime.GOARCH,
	}
	for k, v := range a.host.Labels {
		labels[k] = v
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.host.Name, Labels: labels}}
	for _, t := range a.host.Taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return n
}

// register creates or updates the Node, retrying until the apiserver answers.
func (a *Agent) register(ctx context.Context) error {
	want := a.nodeObject()
	for {
		_, err := a.client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *corev1.Node
			cur, err = a.client.CoreV1().Nodes().Get(ctx, want.Name, metav1.GetOptions{})
			if err == nil {
				for k, v := range want.Labels {
					if cur.Labels == nil {
						cur.Labels = map[string]string{}
					}
					cur.Labels[k] = v
				}
				_, err = a.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
			}
		}
		if err == nil {
			return a.updateNodeStatus(ctx)
		}
		a.log.Info("waiting for the apiserver", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// updateNodeStatus writes addresses, capacity, node info and conditions. Ready follows network readiness
// (pod CIDR assigned and routes programmed), as a kubelet with a CNI reports it. It retries on conflicts
// (kube-controller-manager writes the Node's spec at the same time).
func (a *Agent) updateNodeStatus(ctx context.Context) error {
	var err error
	for try := 0; try < 5; try++ {
		if err = a.tryUpdateNodeStatus(ctx); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

func (a *Agent) tryUpdateNodeStatus(ctx context.Context) error {
	n, err := a.client.CoreV1().Nodes().Get(ctx, a.host.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	a.mu.Lock()
	ready := a.ready
	a.mu.Unlock()
	now := metav1.Now()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.host.Addr.String()}}
	if a.host.Addr6.IsValid() {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.host.Addr6.String()})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: a.host.Name})
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             *resource.NewQuantity(110, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
	}
	n.Status.Capacity, n.Status.Allocatable = capacity, capacity
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion: lab.KubeVersion, OperatingSystem: "linux", Architecture: runtime.GOARCH,
		OSImage: "ironlb lab (network namespace)", KernelVersion: kernelRelease(),
		ContainerRuntimeVersion: "ironlb://" + lab.KubeVersion, MachineID: a.host.Name, SystemUUID: a.host.Name, BootID: bootID,
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = KubeletPort
	set := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) {
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			if c.Type == t {
				if c.Status != s {
					c.LastTransitionTime = now
				}
				c.Status, c.Reason, c.Message, c.LastHeartbeatTime = s, reason, msg, now
				return
			}
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now})
	}
	set(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
	set(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
	set(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available")
	if ready {
		set(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
	} else {
		set(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", "container runtime network not ready: waiting for the pod CIDR")
	}
	_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

var bootID = fmt.Sprintf("%d", time.Now().UnixNano())

// heartbeat renews the node Lease every 10 s and the node status every 30 s, as a kubelet does.
func (a *Agent) heartbeat(ctx context.Context) {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renew := func() {
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, a.host.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, nerr := a.client.CoreV1().Nodes().Get(ctx, a.host.Name, metav1.GetOptions{})
			if nerr != nil {
				return
			}
			_, err = leases.Create(ctx, &coordv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: a.host.Name, OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
				Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(a.host.Name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
			}, metav1.CreateOptions{})
		} else if err == nil {
			l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(a.host.Name), &now
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn("renewing lease", "err", err)
		}
	}
	renew()
	lease := time.NewTicker(10 * time.Second)
	status := time.NewTicker(30 * time.Second)
	defer lease.Stop()
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			renew()
		case <-status.C:
			if err := a.updateNodeStatus(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("updating node status", "err", err)
			}
		}
	}
}

// syncNetwork does the CNI's node-level job: once this node has pod CIDRs, set up the allocator; route
// every other node's pod CIDRs via that node's address (kindnet's way).
func (a *Agent) syncNetwork(ctx context.Context, f informers.SharedInformerFactory) {
	nodes, err := f.Core().V1().Nodes().Lister().List(labels.Everything())
	if err != nil {
		return
	}
	want := map[string]string{}
	var mine []string
	for _, n := range nodes {
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		if n.Name == a.host.Name {
			mine = cidrs
			continue
		}
		for _, c := range cidrs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				continue
			}
			for _, ad := range n.Status.Addresses {
				if ip, err := netip.ParseAddr(ad.Address); err == nil && ad.Type == corev1.NodeInternalIP && ip.Is4() == p.Addr().Is4() {
					want[p.String()] = ip.String()
				}
			}
		}
	}
	a.mu.Lock()
	var changes []string
	for dst, via := range want {
		if a.routes[dst] != via {
			changes = append(changes, fmt.Sprintf("route replace %s via %s", dst, via))
		}
	}
	for dst := range a.routes {
		if _, ok := want[dst]; !ok {
			changes = append(changes, "route del "+dst)
		}
	}
	becameReady := false
	if a.ipam == nil && len(mine) > 0 {
		for _, c := range mine {
			if p, err := netip.ParsePrefix(c); err == nil {
				a.ipam = append(a.ipam, NewIPAM(p))
			}
		}
		becameReady = true
	}
	a.mu.Unlock()
	if len(changes) > 0 {
		cmd := exec.CommandContext(ctx, "ip", "-batch", "-")
		cmd.Stdin = strings.NewReader(strings.Join(changes, "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			a.log.Warn("programming pod routes", "err", err, "out", strings.TrimSpace(string(out)))
		} else {
			a.mu.Lock()
			a.routes = want
			a.mu.Unlock()
			a.log.Info("pod routes programmed", "routes", len(want))
		}
	}
	if becameReady {
		// Pods get addresses only once every Pod of this node is known, so that none is handed an
		// address another Pod still lists in its status (allocateIPs).
		if !cache.WaitForCacheSync(ctx.Done(), a.podsSynced) {
			return
		}
		a.mu.Lock()
		a.ready = true
		workers := make([]*podWorker, 0, len(a.pods))
		for _, w := range a.pods {
			workers = append(workers, w)
		}
		a.mu.Unlock()
		a.log.Info("pod CIDRs assigned", "podCIDRs", mine)
		if err := a.updateNodeStatus(ctx); err != nil {
			a.log.Warn("updating node status", "err", err)
		}
		for _, w := range workers {
			w.poke()
		}
	}
}

// allocateIPs takes one address per family for pod: the one it had before if it is free, else one no
// other Pod of this node lists in its status (IPAM.AllocateFor).
func (a *Agent) allocateIPs(pod *corev1.Pod) ([]netip.Addr, []netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ready {
		return nil, nil, errNetworkNotReady
	}
	var others []*corev1.Pod
	for _, o := range a.podStore.List() {
		if p, ok := o.(*corev1.Pod); ok {
			others = append(others, p)
		}
	}
	held := heldPodIPs(others, pod.UID)
	var ips, gws []netip.Addr
	for _, m := range a.ipam {
		var prev netip.Addr
		for _, s := range pod.Status.PodIPs {
			if ip, err := netip.ParseAddr(s.IP); err == nil && m.Prefix().Contains(ip) {
				prev = ip
			}
		}
		ip, err := m.AllocateFor(prev, func(x netip.Addr) bool { return held[x] })
		if err != nil {
			for i, got := range ips {
				a.ipam[i].Release(got)
			}
			return nil, nil, err
		}
		ips, gws = append(ips, ip), append(gws, m.Gateway())
	}
	return ips, gws, nil
}

// heldPodIPs returns the addresses the Pods other than self list in their status, but for Pods that
// have finished (their addresses are free in a kubelet too) or use the host's network.
func heldPodIPs(pods []*corev1.Pod, self types.UID) map[netip.Addr]bool {
	held := map[netip.Addr]bool{}
	for _, p := range pods {
		if p.UID == self || p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, s := range p.Status.PodIPs {
			if ip, err := netip.ParseAddr(s.IP); err == nil {
				held[ip] = true
			}
		}
	}
	return held
}

func (a *Agent) releaseIPs(ips []netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ip := range ips {
		for _, m := range a.ipam {
			if m.Prefix().Contains(ip) {
				m.Release(ip)
			}
		}
	}
}

// podChanged hands the latest version of a Pod to its worker, starting one for a new Pod.
func (a *Agent) podChanged(ctx context.Context, p *corev1.Pod) {
	a.mu.Lock()
	w, ok := a.pods[p.UID]
	if !ok {
		w = newPodWorker(a, p)
		a.pods[p.UID] = w
		go func() {
			w.run(ctx)
			a.mu.Lock()
			delete(a.pods, p.UID)
			a.mu.Unlock()
		}()
	}
	a.mu.Unlock()
	w.update(p)
}

// podGone tells a worker its Pod no longer exists in the API (force-deleted, or we finished deleting it).
func (a *Agent) podGone(uid types.UID) {
	a.mu.Lock()
	w := a.pods[uid]
	a.mu.Unlock()
	if w != nil {
		w.gone()
	}
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// setRealtimeBudget gives the node's cgroup and its pods' cgroup their real-time CPU budget out of the
// lab's (lab/rtbudget.go), for the containers that ask for CAP_SYS_NICE.
func (a *Agent) setRealtimeBudget() {
	for _, parts := range [][]string{{a.host.Name}, {a.host.Name, "pods"}} {
		cg, err := a.lab.Cgroup(parts...)
		if err != nil {
			return
		}
		switch err := cg.SetRealtime(lab.NodeRealtimeUS); {
		case errors.Is(err, lab.ErrNoRealtimeGroups):
			return
		case err != nil:
			a.log.Warn("no real-time CPU budget on this node: containers asking for CAP_SYS_NICE will be refused SCHED_FIFO", "err", err)
			return
		}
	}
	a.realtime = true
}

// podRealtime gives a Pod's cgroup its real-time budget (lab.PodRealtimeUS) and reports whether its
// container may have lab.ContainerRealtimeUS of it; when it may not, it says why in the Pod's events.
func (a *Agent) podRealtime(ctx context.Context, pod *corev1.Pod, c corev1.Container) bool {
	if !a.realtime || !lab.WantsRealtime(c) {
		return false
	}
	cg, err := a.lab.Cgroup(a.host.Name, "pods", string(pod.UID))
	if err == nil {
		err = cg.SetRealtime(lab.PodRealtimeUS(pod))
	}
	if err != nil {
		a.log.Warn("container asks for CAP_SYS_NICE but gets no real-time CPU budget: SCHED_FIFO will be refused in it",
			"pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "err", err)
		a.event(ctx, pod, corev1.EventTypeWarning, "NoRealtimeBudget",
			fmt.Sprintf("container %s asks for CAP_SYS_NICE but the node has no real-time CPU budget left for it: %v", c.Name, err))
		return false
	}
	return true
}
