package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// This file ties the kubelet API to the agent: pod workers publish what the API needs (the sandbox's
// network namespace, each container's latest run), and the agent serves it on :10250.

// kubeletView is what a pod worker publishes for the kubelet API; guarded by podWorker.mu.
type kubeletView struct {
	netns      string
	runs       map[string]ctrRun // container name -> latest run
	backingOff map[string]bool   // containers waiting to restart, from the pod's status (filled by find)
}

func (w *podWorker) publishNetNS(netns string) {
	w.mu.Lock()
	w.view.netns = netns
	w.mu.Unlock()
}

func (w *podWorker) publishRun(r ctrRun) {
	w.mu.Lock()
	if w.view.runs == nil {
		w.view.runs = map[string]ctrRun{}
	}
	w.view.runs[r.Container] = r
	w.mu.Unlock()
}

func (w *podWorker) publishExit(container string) {
	w.mu.Lock()
	if r, ok := w.view.runs[container]; ok {
		r.PID = 0
		w.view.runs[container] = r
	}
	w.mu.Unlock()
}

// ctrLogDir is a container's log directory, the kubelet's /var/log/pods/<ns>_<pod>_<uid>/<container>
// under the node's lab logs.
func (a *Agent) ctrLogDir(pod *corev1.Pod, container string) string {
	return filepath.Join(filepath.Dir(a.lab.State.LogFile(a.host.Name, "agent")), "pods",
		fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container)
}

// hostnameMount writes the pod's /etc/hostname for a container the host runtime runs (on the
// host's root file system, whose /etc/hostname the bind mount needs as its target).
func (w *podWorker) hostnameMount(hostname string) (lab.Mount, error) {
	if _, err := os.Stat("/etc/hostname"); err != nil { // a bind mount needs its target
		return lab.Mount{}, err
	}
	return w.hostnameFile(hostname)
}

// hostnameFile writes the pod's /etc/hostname, as container runtimes give every container one, and
// returns its bind mount.
func (w *podWorker) hostnameFile(hostname string) (lab.Mount, error) {
	path := filepath.Join(w.a.lab.State.PodDir(string(w.uid)), "etc-hostname")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return lab.Mount{}, err
	}
	if err := os.WriteFile(path, []byte(hostname+"\n"), 0o644); err != nil {
		return lab.Mount{}, err
	}
	return lab.Mount{Source: path, Target: "/etc/hostname"}, nil
}

// agentPods is the agent's podSource.
type agentPods struct{ a *Agent }

func (s agentPods) workers() []*podWorker {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	out := make([]*podWorker, 0, len(s.a.pods))
	for _, w := range s.a.pods {
		out = append(out, w)
	}
	return out
}

func (s agentPods) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, w := range s.workers() {
		if p, _ := w.snapshot(); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// find returns the worker of a pod and its published view; of two pods with the same name (one being
// deleted) the one not being deleted wins.
func (s agentPods) find(namespace, name, uid string) (kubeletView, error) {
	var best *podWorker
	for _, w := range s.workers() {
		p, removed := w.snapshot()
		if p == nil || removed || p.Namespace != namespace || p.Name != name || uid != "" && string(p.UID) != uid {
			continue
		}
		if best == nil || p.DeletionTimestamp == nil {
			best = w
		}
	}
	if best == nil {
		return kubeletView{}, fmt.Errorf("%w: %s/%s on this node", errNoPod, namespace, name)
	}
	best.mu.Lock()
	defer best.mu.Unlock()
	v := kubeletView{netns: best.view.netns, runs: make(map[string]ctrRun, len(best.view.runs)), backingOff: map[string]bool{}}
	for k, r := range best.view.runs {
		v.runs[k] = r
	}
	pod := best.latest
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil {
			v.backingOff[cs.Name] = true
		}
	}
	return v, nil
}

func (s agentPods) Container(namespace, pod, uid, container string) (ctrRun, error) {
	v, err := s.find(namespace, pod, uid)
	if err != nil {
		return ctrRun{}, err
	}
	r, ok := v.runs[container]
	if !ok {
		return ctrRun{}, fmt.Errorf("%w: %q in pod %s/%s (not started yet, or no such container)", errNoContainer, container, namespace, pod)
	}
	r.BackingOff = r.PID == 0 && v.backingOff[container]
	return r, nil
}

func (s agentPods) PodNetNS(namespace, pod, uid string) (string, error) {
	v, err := s.find(namespace, pod, uid)
	if err != nil {
		return "", err
	}
	if v.netns == "" {
		return "", fmt.Errorf("%w: pod %s/%s has no sandbox yet", errBadRequest, namespace, pod)
	}
	return v.netns, nil
}

// serveKubeletAPI issues the node's serving certificate and serves the kubelet API on :10250 in the
// node's network namespace (where the agent runs) until ctx ends.
func (a *Agent) serveKubeletAPI(ctx context.Context) error {
	pki := a.lab.State.PKI()
	ips := []net.IP{net.IP(a.host.Addr.AsSlice())}
	if a.host.Addr6.IsValid() {
		ips = append(ips, net.IP(a.host.Addr6.AsSlice()))
	}
	if err := pki.IssueKubeletServing(a.host.Name, ips); err != nil {
		return fmt.Errorf("kubelet serving certificate: %w", err)
	}
	tc, err := kubeletTLS(pki.KubeletServingCert(a.host.Name), pki.KubeletServingKey(a.host.Name), pki.CACert())
	if err != nil {
		return err
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("kubelet API exec needs nsenter (util-linux): %w", err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", fmt.Sprintf(":%d", KubeletPort))
	if err != nil {
		return err
	}
	a.log.Info("kubelet API serving", "addr", ln.Addr().String())
	s := newKubeletServer(agentPods{a}, execRunner{Self: a.lab.Plan.Config.Self, NSEnter: nsenter, Progs: a.progs}, a.log)
	return s.serve(ctx, ln, tc)
}
