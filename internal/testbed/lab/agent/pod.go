package agent

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

var errNetworkNotReady = errors.New("network not ready: waiting for the node's pod CIDR")

// podWorker owns one Pod: its sandbox, volumes and container processes. Only run's goroutine touches the
// fields below the mutex-guarded ones.
type podWorker struct {
	a   *Agent
	uid types.UID

	mu      sync.Mutex // guards latest, removed and view
	latest  *corev1.Pod
	removed bool
	view    kubeletView // for the kubelet API (kubeletnode.go)
	wake    chan struct{}

	events     chan ctrEvent
	sandbox    bool
	sandboxErr string
	netns      string
	ips        []netip.Addr
	volumes    map[string]volume
	tokens     map[string]token // projected token (volume/path) -> last token
	ctrs       map[string]*ctr
	order      []string // init containers first, then containers
	initDone   bool     // the Pod is initialized: init containers completed, sidecars started (planContainers)
	startTime  time.Time
	lastStatus *corev1.PodStatus
	dnsWarned  bool // DNSConfigForming events sent
}

type volume struct {
	path    string
	isFile  bool
	refresh func(ctx context.Context) error // rewrites contents (configMap, secret, projected, downwardAPI)
}

// token is a service-account token written into a projected volume.
type token struct {
	value     []byte
	refreshAt time.Time
}

type ctr struct {
	spec        corev1.Container
	init        bool
	st          ctrState
	cmd         *exec.Cmd
	gen         int // incremented per start; events carry it
	cancel      context.CancelFunc
	nextStart   time.Time
	probeOK     map[string]int // consecutive successes/failures per probe kind (+ for ok, - for fail)
	exitPending bool
	stopAt      time.Time // when a sidecar had SIGTERM because the Pod's containers are done
}

type ctrEvent struct {
	name  string
	gen   int
	exit  *int32 // process ended
	probe string // "readiness", "liveness", "startup"
	ok    bool
	msg   string
}

func newPodWorker(a *Agent, p *corev1.Pod) *podWorker {
	w := &podWorker{a: a, uid: p.UID, wake: make(chan struct{}, 1), events: make(chan ctrEvent, 64),
		ctrs: map[string]*ctr{}, tokens: map[string]token{}}
	for _, c := range p.Spec.InitContainers {
		w.ctrs[c.Name] = &ctr{spec: c, init: true, st: ctrState{Name: c.Name, Image: c.Image, Init: true, Sidecar: IsSidecar(c), Waiting: true, WaitReason: "PodInitializing"}}
		w.order = append(w.order, c.Name)
	}
	for _, c := range p.Spec.Containers {
		w.ctrs[c.Name] = &ctr{spec: c, st: ctrState{Name: c.Name, Image: c.Image, Waiting: true, WaitReason: "ContainerCreating"}}
		w.order = append(w.order, c.Name)
	}
	w.initDone = len(p.Spec.InitContainers) == 0
	return w
}

func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	w.latest = p
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) gone() {
	w.mu.Lock()
	w.removed = true
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *podWorker) snapshot() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest, w.removed
}

// run is the Pod's owner loop.
func (w *podWorker) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return // the agent is stopping; its cgroup goes with the node
		case <-w.wake:
		case ev := <-w.events:
			w.handle(ctx, ev)
		case <-tick.C:
		}
		pod, removed := w.snapshot()
		if pod == nil {
			continue
		}
		if removed {
			w.teardown(ctx, pod, 0)
			return
		}
		if pod.DeletionTimestamp != nil {
			grace := int64(30)
			if pod.DeletionGracePeriodSeconds != nil {
				grace = *pod.DeletionGracePeriodSeconds
			} else if pod.Spec.TerminationGracePeriodSeconds != nil {
				grace = *pod.Spec.TerminationGracePeriodSeconds
			}
			w.teardown(ctx, pod, time.Duration(grace)*time.Second)
			err := w.a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				w.a.log.Warn("deleting pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			}
			return
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			if w.lastStatus == nil { // finished before we came: nothing to run
				continue
			}
		}
		if !w.sandbox {
			if err := w.setup(ctx, pod); err != nil {
				if w.sandboxErr != err.Error() {
					w.sandboxErr = err.Error()
					if !errors.Is(err, errNetworkNotReady) {
						w.a.event(ctx, pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", err.Error())
						w.a.log.Warn("pod sandbox", "pod", pod.Namespace+"/"+pod.Name, "err", err)
					}
				}
			}
		}
		if w.sandbox {
			w.refreshVolumes(ctx, pod)
			w.reconcileContainers(ctx, pod)
		}
		w.writeStatus(ctx, pod)
	}
}

// setup creates the Pod's network namespace (or uses the node's for hostNetwork) and its volumes.
func (w *podWorker) setup(ctx context.Context, pod *corev1.Pod) error {
	a := w.a
	if w.startTime.IsZero() {
		w.startTime = time.Now()
	}
	if pod.Spec.HostNetwork {
		w.netns = a.host.Name
		w.ips = []netip.Addr{a.host.Addr}
		if a.host.Addr6.IsValid() {
			w.ips = append(w.ips, a.host.Addr6)
		}
	} else if w.netns == "" {
		ips, gws, err := a.allocateIPs(pod)
		if err != nil {
			return err
		}
		ns := lab.PodNetNSPrefix(a.host.Name) + shortUID(pod.UID)
		if err := w.createSandbox(ctx, ns, ips, gws); err != nil {
			_ = lab.DeleteNetNS(context.WithoutCancel(ctx), ns)
			a.releaseIPs(ips)
			return fmt.Errorf("creating pod network: %w", err)
		}
		w.netns, w.ips = ns, ips
		a.log.Info("pod network created", "pod", pod.Namespace+"/"+pod.Name, "ips", ips, "before", pod.Status.PodIPs)
	}
	if err := a.hostPorts.set(ctx, pod, w.ips); err != nil {
		return err
	}
	vols, err := w.prepareVolumes(ctx, pod)
	if err != nil {
		return err
	}
	w.volumes = vols
	w.sandbox, w.sandboxErr = true, ""
	w.publishNetNS(w.netns)
	return nil
}

func shortUID(u types.UID) string {
	s := strings.ReplaceAll(string(u), "-", "")
	if len(s) > 8 {
		s = s[:8]
	}
	return s
}

func (w *podWorker) createSandbox(ctx context.Context, ns string, ips, gws []netip.Addr) error {
	veth := "lxc" + ns[len(ns)-8:]
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	// A link of this name is this Pod's own from before a power cut: `lab stop-node` deleted the
	// Pod's namespace, but the kernel keeps a namespace (and so the veth pair) alive while sockets
	// of the killed processes still hold it (a TCP connection retransmitting its FIN over the cut
	// link holds it for minutes). Deleting our end deletes the pair.
	if _, err := net.InterfaceByName(veth); err == nil {
		if err := run(ctx, "ip", "link", "del", veth); err != nil {
			return err
		}
		w.a.log.Info("removed the Pod's veth left from before the node stopped", "veth", veth, "netns", ns)
	}
	if err := run(ctx, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
		return err
	}
	var node, pod []string
	pod = append(pod, "link set lo up")
	for i, ipa := range ips {
		bits, nodad := 32, ""
		if ipa.Is6() {
			bits, nodad = 128, " nodad"
		}
		node = append(node, fmt.Sprintf("addr add %s/%d dev %s%s", gws[i], bits, veth, nodad))
		pod = append(pod, fmt.Sprintf("addr add %s/%d dev eth0%s", ipa, bits, nodad))
	}
	node = append(node, "link set "+veth+" up")
	pod = append(pod, "link set eth0 up")
	for i, ipa := range ips {
		bits := 32
		if ipa.Is6() {
			bits = 128
		}
		node = append(node, fmt.Sprintf("route replace %s/%d dev %s", ipa, bits, veth))
		pod = append(pod, fmt.Sprintf("route add %s dev eth0 scope link", gws[i]), fmt.Sprintf("route add default via %s dev eth0", gws[i]))
	}
	if err := batch(ctx, "", node); err != nil {
		return err
	}
	return batch(ctx, ns, pod)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func batch(ctx context.Context, ns string, lines []string) error {
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// teardown runs the preStop hooks, stops every container (SIGTERM, the sidecars once the other
// containers have exited; SIGKILL for what is left when grace is up) and removes the sandbox. Until the
// containers have stopped, readiness probes go on and the Pod's status follows them, as the kubelet does
// (terminatingEvent).
func (w *podWorker) teardown(ctx context.Context, pod *corev1.Pod, grace time.Duration) {
	grace = w.preStop(ctx, pod, grace)
	// the containers first, then the sidecars (stopOrder)
	var in []planCtr
	for _, name := range w.order {
		if c := w.ctrs[name]; c.cmd != nil && c.st.Running {
			in = append(in, planCtr{Name: name, Sidecar: c.st.Sidecar, Running: true})
		}
	}
	first, sidecars := stopOrder(in)
	signal := func(names []string) {
		for _, n := range names {
			if c := w.ctrs[n]; c.cmd != nil && c.st.Running {
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
	}
	running, firstLeft := len(first)+len(sidecars), len(first)
	if running > 0 {
		w.a.event(ctx, pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping %d container(s) (grace period %s)", running, grace))
	}
	signal(first)
	if firstLeft == 0 {
		signal(sidecars)
		sidecars = nil
	}
	deadline := time.After(grace)
wait:
	for running > 0 {
		select {
		case ev := <-w.events:
			if ev.exit != nil {
				running--
				if c := w.ctrs[ev.name]; c != nil && ev.gen == c.gen && !c.st.Sidecar {
					firstLeft--
				}
			}
			w.terminatingEvent(ctx, ev)
			if firstLeft <= 0 && sidecars != nil {
				signal(sidecars)
				sidecars = nil
			}
		case <-deadline:
			break wait
		}
	}
	for _, c := range w.ctrs {
		if c.cancel != nil {
			c.cancel() // the probes of what is left: it is killed with the Pod's cgroup below
		}
	}
	if cg, err := w.a.lab.Cgroup(w.a.host.Name, "pods", string(w.uid)); err == nil {
		_ = cg.Remove()
	}
	w.a.hostPorts.remove(ctx, w.uid)
	if w.a.runc != nil {
		w.a.runc.removePod(string(w.uid))
	}
	if w.netns != "" && w.netns != w.a.host.Name {
		if err := lab.DeleteNetNS(context.WithoutCancel(ctx), w.netns); err != nil {
			w.a.log.Warn("removing pod network", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
		w.a.releaseIPs(w.ips)
	}
	_ = os.RemoveAll(w.a.lab.State.PodDir(string(w.uid)))
	w.a.log.Info("pod removed", "pod", pod.Namespace+"/"+pod.Name)
}

// terminatingEvent applies a container event that came while the Pod terminates (its preStop hooks run,
// or its containers have had SIGTERM and not stopped yet) and writes the status it leads to. The kubelet
// goes on probing a terminating Pod's readiness until its containers stop: a server that fails its
// readiness probe once it has had SIGTERM (agnhost netexec --delay-shutdown) turns the Pod unready, and
// the EndpointSlice controller marks its endpoint serving=false, terminating=true. Liveness and startup
// probes stop (probeRunsWhileTerminating).
func (w *podWorker) terminatingEvent(ctx context.Context, ev ctrEvent) {
	w.handle(ctx, ev)
	if pod, removed := w.snapshot(); pod != nil && !removed {
		w.writeStatus(ctx, pod)
	}
}

// probeRunsWhileTerminating says whether a probe of this kind goes on once the Pod is being deleted: as
// in the kubelet's prober, readiness does; liveness and startup stop (a terminating container is not
// restarted for failing them).
func probeRunsWhileTerminating(kind string) bool { return kind == "readiness" }

// handle applies a container event.
func (w *podWorker) handle(ctx context.Context, ev ctrEvent) {
	c := w.ctrs[ev.name]
	if c == nil || ev.gen != c.gen {
		return
	}
	pod, _ := w.snapshot()
	if ev.exit != nil {
		if c.cancel != nil {
			c.cancel()
		}
		c.st.Running, c.st.Ready, c.st.Terminated = false, false, true
		c.st.ExitCode, c.st.FinishedAt, c.st.LastStartedAt = *ev.exit, time.Now(), c.st.StartedAt
		c.st.TermReason = "Completed"
		if *ev.exit != 0 {
			c.st.TermReason = "Error"
		}
		c.cmd = nil
		w.publishExit(ev.name)
		if pod != nil && pod.DeletionTimestamp == nil {
			w.a.log.Info("container exited", "pod", pod.Namespace+"/"+pod.Name, "container", ev.name, "exitCode", *ev.exit)
		}
		return
	}
	if !c.st.Running || pod == nil || pod.DeletionTimestamp != nil && !probeRunsWhileTerminating(ev.probe) {
		return
	}
	probe := probeFor(c.spec, ev.probe)
	if probe == nil {
		return
	}
	if ev.ok {
		if c.probeOK[ev.probe] < 0 {
			c.probeOK[ev.probe] = 0
		}
		c.probeOK[ev.probe]++
		if c.probeOK[ev.probe] >= max(1, int(probe.SuccessThreshold)) {
			switch ev.probe {
			case "readiness":
				c.st.Ready = c.st.Started
			case "startup":
				c.st.Started = true
				c.st.Ready = c.st.Ready || c.spec.ReadinessProbe == nil
			}
		}
		return
	}
	if c.probeOK[ev.probe] > 0 {
		c.probeOK[ev.probe] = 0
	}
	c.probeOK[ev.probe]--
	w.a.event(ctx, pod, corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe failed: %s", strings.ToUpper(ev.probe[:1])+ev.probe[1:], ev.msg))
	failures := max(3, int(probe.FailureThreshold))
	if probe.FailureThreshold > 0 {
		failures = int(probe.FailureThreshold)
	}
	if -c.probeOK[ev.probe] >= failures {
		switch ev.probe {
		case "readiness":
			c.st.Ready = false
		case "liveness", "startup":
			w.a.event(ctx, pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Container %s failed %s probe, will be restarted", c.spec.Name, ev.probe))
			if c.cmd != nil {
				_ = c.cmd.Process.Kill()
			}
		}
	}
}

func probeFor(c corev1.Container, kind string) *corev1.Probe {
	switch kind {
	case "readiness":
		return c.ReadinessProbe
	case "liveness":
		return c.LivenessProbe
	case "startup":
		return c.StartupProbe
	}
	return nil
}

// reconcileContainers starts what should run (planContainers decides: init containers in order, with
// sidecars kept running, then the containers), restarts exited ones with the kubelet's back-off, and
// stops the sidecars once the containers are done.
func (w *podWorker) reconcileContainers(ctx context.Context, pod *corev1.Pod) {
	in := make([]planCtr, 0, len(w.order))
	for _, name := range w.order {
		c := w.ctrs[name]
		in = append(in, planCtr{Name: name, Init: c.init, Sidecar: c.st.Sidecar, Running: c.st.Running, Started: c.st.Started,
			Terminated: c.st.Terminated, ExitCode: c.st.ExitCode, Restarts: c.st.Restarts, NextStart: c.nextStart})
	}
	now := time.Now()
	plan := planContainers(pod.Spec.RestartPolicy, w.initDone, in, now)
	w.initDone = plan.InitDone
	for _, act := range plan.Actions {
		c := w.ctrs[act.Name]
		switch act.Kind {
		case actStart:
			if act.Restart {
				c.st.Restarts++
			}
			c.stopAt = time.Time{}
			w.start(ctx, pod, c)
		case actBackOff:
			c.nextStart = now.Add(act.Delay)
			c.st.Waiting, c.st.WaitReason = true, "CrashLoopBackOff"
			c.st.WaitMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s", act.Delay, act.Name, pod.Name, pod.Namespace)
		case actStop:
			w.stopSidecar(ctx, pod, c, now)
		}
	}
}

// stopSidecar stops a sidecar once the Pod's containers are done, as the kubelet does: SIGTERM, then
// SIGKILL when it is still running after the Pod's termination grace period.
func (w *podWorker) stopSidecar(ctx context.Context, pod *corev1.Pod, c *ctr, now time.Time) {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	if c.stopAt.IsZero() {
		c.stopAt = now
		w.a.event(ctx, pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping container %s (the Pod's containers are done)", c.spec.Name))
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		return
	}
	grace := 30 * time.Second
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	if now.Sub(c.stopAt) > grace {
		_ = c.cmd.Process.Kill()
	}
}

// start launches one container.
func (w *podWorker) start(ctx context.Context, pod *corev1.Pod, c *ctr) {
	a := w.a
	c.nextStart = time.Time{}
	fail := func(reason string, err error) {
		if c.st.WaitReason != reason || c.st.WaitMessage != err.Error() {
			a.event(ctx, pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Error: %s: %v", reason, err))
			a.log.Warn("container not started", "pod", pod.Namespace+"/"+pod.Name, "container", c.spec.Name, "reason", reason, "err", err)
		}
		c.st.Waiting, c.st.WaitReason, c.st.WaitMessage = true, reason, err.Error()
		c.nextStart = time.Now().Add(10 * time.Second) // try again later (the image or config may appear)
		c.st.Terminated = false
	}
	env, err := w.containerEnv(ctx, pod, c.spec)
	if err != nil {
		fail("CreateContainerConfigError", err)
		return
	}
	if a.runc != nil { // lab up --runtime=runc: every container is its image, run by runc (runc.go)
		w.startRunc(ctx, pod, c, env, fail)
		return
	}
	expand := func(in []string) []string {
		out := make([]string, len(in))
		for i, s := range in {
			out[i] = Expand(s, env.Lookup)
		}
		return out
	}
	argv, err := Argv(a.progs, c.spec.Image, expand(c.spec.Command), expand(c.spec.Args))
	if errors.Is(err, ErrImageUnknown) {
		fail("ErrImagePull", err)
		return
	}
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	mounts, err := w.mounts(ctx, pod, c.spec)
	if err != nil {
		fail("CreateContainerConfigError", err)
		return
	}
	mounts = append(w.imageFileMounts(pod, c.spec.Image), mounts...) // the image's files first, volumes over them
	hostname, _ := PodHostname(pod, lab.ClusterDomain)
	if pod.Spec.HostNetwork {
		hostname = a.host.Name
	}
	if m, err := w.hostnameMount(hostname); err == nil { // kubectl exec ... cat /etc/hostname
		mounts = append(mounts, m)
	}
	spec := lab.ExecSpec{NetNS: w.netns, Hostname: hostname, MountNS: true, Mounts: mounts, Argv: argv, Env: env.List(), Dir: c.spec.WorkingDir}
	if sc := c.spec.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		spec.Caps, spec.DropCaps = unprivilegedCaps(sc), true
	}
	if uid := runAsUser(pod, c.spec); uid != nil {
		v := int(*uid)
		spec.UID = &v
		if gid := runAsGroup(pod, c.spec); gid != nil {
			g := int(*gid)
			spec.GID = &g
		}
	}
	// Each run gets a fresh cgroup: the previous run's is killed and removed (a cgroup that has seen
	// cgroup.kill can SIGKILL a process cloned into it later on some kernels, so none is reused).
	if prev, err := a.lab.Cgroup(a.host.Name, "pods", string(w.uid), fmt.Sprintf("%s-%d", c.spec.Name, c.gen)); err == nil {
		_ = prev.Remove()
	}
	cg, err := a.lab.Cgroup(a.host.Name, "pods", string(w.uid), fmt.Sprintf("%s-%d", c.spec.Name, c.gen+1))
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	fd, err := cg.Open()
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	defer fd.Close()
	cmd, err := lab.Command(a.lab.Plan.Config.Self, spec, fd)
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	lw, logDir, err := w.startLogged(cmd, pod, c)
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	w.publishRun(ctrRun{PodNamespace: pod.Namespace, PodName: pod.Name, PodUID: string(pod.UID), Container: c.spec.Name, Image: c.spec.Image,
		Run: int(c.st.Restarts), LogDir: logDir, PID: cmd.Process.Pid, Exec: execSpec{Spec: spec, Cgroup: cg}, LogDone: lw.done})
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	w.track(ctx, pod, c, cmd, cmd.Process.Pid, exited, nil, strings.Join(argv, " "))
}

// imageFileMounts binds the image's programs at their paths (ImageFiles: agnhost's /agnhost) in the
// container's mount namespace, where the container and `kubectl exec` into it find them; outside it the
// target is an empty file the agent makes on the host, as for a volume's mount point (EnsurePath; lab
// down removes it). A program the lab has not built is left out (then the path is not found, as
// without this), as is a target the host has as something other than a file.
func (w *podWorker) imageFileMounts(pod *corev1.Pod, image string) []lab.Mount {
	var out []lab.Mount
	for _, f := range ImageFiles(w.a.progs, image) {
		if st, err := os.Stat(f.Source); err != nil || !st.Mode().IsRegular() {
			continue
		}
		err := w.a.lab.State.EnsurePath(f.Path, false)
		if err == nil {
			if st, serr := os.Lstat(f.Path); serr != nil || !st.Mode().IsRegular() {
				err = fmt.Errorf("%s is not a regular file on the host", f.Path)
			}
		}
		if err != nil {
			w.a.log.Warn("image file not bound in the container", "pod", pod.Namespace+"/"+pod.Name, "image", image, "path", f.Path, "err", err)
			continue
		}
		out = append(out, lab.Mount{Source: f.Source, Target: f.Path, ReadOnly: true})
	}
	return out
}

// startLogged starts a container run's process with its output going to the run's CRI log file
// (for the kubelet API) and appended to the node's combined log for the container. It returns the
// log's writer and the container's log directory.
func (w *podWorker) startLogged(cmd *exec.Cmd, pod *corev1.Pod, c *ctr) (*ctrLogWriter, string, error) {
	a := w.a
	rawLog := a.lab.State.LogFile(a.host.Name, fmt.Sprintf("pods/%s_%s_%s", pod.Namespace, pod.Name, c.spec.Name))
	logDir := a.ctrLogDir(pod, c.spec.Name)
	lw, stdout, stderr, err := openCtrLog(logDir, int(c.st.Restarts), rawLog, time.Now)
	if err != nil {
		return nil, "", err
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Start()
	stdout.Close()
	stderr.Close()
	if err != nil {
		return nil, "", err
	}
	return lw, logDir, nil
}

// track records a started container run: its status, its exit (exited delivers the process's Wait;
// after, if set, runs once it came) and its probes.
func (w *podWorker) track(ctx context.Context, pod *corev1.Pod, c *ctr, cmd *exec.Cmd, pid int, exited <-chan error, after func(), argv string) {
	a := w.a
	c.gen++
	gen, name := c.gen, c.spec.Name
	c.cmd = cmd
	c.st.Running, c.st.Waiting, c.st.WaitReason, c.st.WaitMessage = true, false, "", ""
	c.st.StartedAt = time.Now()
	c.st.ContainerID = fmt.Sprintf("ironlb://%s-%s-%d", shortUID(w.uid), name, c.st.Restarts)
	c.st.Started = c.spec.StartupProbe == nil
	c.st.Ready = c.spec.ReadinessProbe == nil && c.st.Started && (!c.init || c.st.Sidecar)
	c.probeOK = map[string]int{}
	go func() {
		err := <-exited
		if after != nil {
			after()
		}
		code := int32(0)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = int32(ee.ExitCode())
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int32(ws.Signal())
			}
		} else if err != nil {
			code = 128
		}
		w.events <- ctrEvent{name: name, gen: gen, exit: &code}
	}()
	pctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	for _, kind := range []string{"startup", "readiness", "liveness"} {
		if p := probeFor(c.spec, kind); p != nil {
			go w.probeLoop(pctx, pod, c.spec, pid, kind, p, gen)
		}
	}
	a.event(ctx, pod, corev1.EventTypeNormal, "Started", fmt.Sprintf("Started container %s", name))
	a.log.Info("container started", "pod", pod.Namespace+"/"+pod.Name, "container", name, "pid", pid, "argv", argv)
}

func runAsUser(pod *corev1.Pod, c corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsUser
	}
	return nil
}

func runAsGroup(pod *corev1.Pod, c corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsGroup != nil {
		return c.SecurityContext.RunAsGroup
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsGroup
	}
	return nil
}

// probeLoop runs one probe of a container on its schedule and reports each result.
func (w *podWorker) probeLoop(ctx context.Context, pod *corev1.Pod, c corev1.Container, pid int, kind string, p *corev1.Probe, gen int) {
	period := time.Duration(max(1, p.PeriodSeconds)) * time.Second
	if p.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	timeout := time.Duration(max(1, p.TimeoutSeconds)) * time.Second
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if cur, _ := w.snapshot(); cur != nil && cur.DeletionTimestamp != nil && !probeRunsWhileTerminating(kind) {
			return
		}
		ok, msg := w.probeOnce(ctx, pod, c, pid, p, timeout)
		select {
		case w.events <- ctrEvent{name: c.Name, gen: gen, probe: kind, ok: ok, msg: msg}:
		case <-ctx.Done():
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *podWorker) probeOnce(ctx context.Context, pod *corev1.Pod, c corev1.Container, pid int, p *corev1.Probe, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	host := ""
	if len(w.ips) > 0 {
		host = w.ips[0].String()
	}
	switch {
	case p.HTTPGet != nil:
		g := p.HTTPGet
		port, err := resolvePort(g.Port, c)
		if err != nil {
			return false, err.Error()
		}
		if g.Host != "" {
			host = g.Host
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err.Error()
		}
		req.Header.Set("User-Agent", "kube-probe/"+strings.TrimPrefix(lab.KubeVersion, "v"))
		for _, h := range g.HTTPHeaders {
			req.Header.Set(h.Name, h.Value)
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return false, fmt.Sprintf("Get %q: %v", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 400 {
			return true, ""
		}
		return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, c)
		if err != nil {
			return false, err.Error()
		}
		if p.TCPSocket.Host != "" {
			host = p.TCPSocket.Host
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	case p.Exec != nil:
		args := append([]string{"-t", strconv.Itoa(pid), "-n", "-m", "-u", "--"}, p.Exec.Command...)
		out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return true, ""
	case p.GRPC != nil:
		return false, "gRPC probes are not supported by the lab agent"
	}
	return false, "probe has no handler"
}

// probeClient does not verify an HTTPS probe's certificate, as the kubelet does not (the speaker's
// /readyz is HTTPS with a self-signed certificate).
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}

func resolvePort(p intstr.IntOrString, c corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("port %q not found in container %s", p.StrVal, c.Name)
}

// writeStatus sends the Pod's status when it changed.
func (w *podWorker) writeStatus(ctx context.Context, pod *corev1.Pod) {
	s := podState{Sandbox: w.sandbox, SandboxReason: w.sandboxErr, InitDone: w.initDone, StartTime: w.startTime, RestartPolicy: pod.Spec.RestartPolicy}
	if s.SandboxReason == "" && !s.Sandbox {
		s.SandboxReason = "ContainerCreating"
	}
	s.HostIPs = []string{w.a.host.Addr.String()}
	if w.a.host.Addr6.IsValid() {
		s.HostIPs = append(s.HostIPs, w.a.host.Addr6.String())
	}
	if w.sandbox {
		for _, ip := range w.ips {
			s.PodIPs = append(s.PodIPs, ip.String())
		}
	}
	for _, n := range w.order {
		s.Containers = append(s.Containers, w.ctrs[n].st)
	}
	for i := 0; i < 5; i++ {
		st := BuildStatus(pod.Status, pod.Spec.ReadinessGates, s, time.Now())
		if w.lastStatus != nil && statusEqual(*w.lastStatus, st) && statusEqual(pod.Status, st) {
			return
		}
		cp := pod.DeepCopy()
		cp.Status = st
		_, err := w.a.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
		if err == nil {
			w.lastStatus = &st
			return
		}
		if !apierrors.IsConflict(err) {
			if !apierrors.IsNotFound(err) && ctx.Err() == nil {
				w.a.log.Warn("updating pod status", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			}
			return
		}
		fresh, gerr := w.a.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr != nil || fresh.UID != pod.UID {
			return
		}
		pod = fresh
	}
}

// statusEqual compares statuses ignoring condition timestamps' sub-second noise.
func statusEqual(a, b corev1.PodStatus) bool {
	norm := func(s corev1.PodStatus) corev1.PodStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
			s.Conditions[i].LastProbeTime = metav1.Time{}
			s.Conditions[i].ObservedGeneration = 0
		}
		if s.StartTime != nil {
			s.StartTime = &metav1.Time{Time: s.StartTime.Truncate(time.Second)}
		}
		tr := func(cs []corev1.ContainerStatus) {
			for i := range cs {
				if r := cs[i].State.Running; r != nil {
					r.StartedAt = metav1.Time{Time: r.StartedAt.Truncate(time.Second)}
				}
				for _, t := range []*corev1.ContainerStateTerminated{cs[i].State.Terminated, cs[i].LastTerminationState.Terminated} {
					if t != nil {
						t.StartedAt = metav1.Time{Time: t.StartedAt.Truncate(time.Second)}
						t.FinishedAt = metav1.Time{Time: t.FinishedAt.Truncate(time.Second)}
					}
				}
				cs[i].AllocatedResources, cs[i].Resources, cs[i].VolumeMounts, cs[i].User = nil, nil, nil, nil
			}
		}
		tr(s.ContainerStatuses)
		tr(s.InitContainerStatuses)
		s.ObservedGeneration = 0
		return s
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// event records a Kubernetes Event about the Pod, as the kubelet does.
func (a *Agent) event(ctx context.Context, pod *corev1.Pod, typ, reason, msg string) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	now := metav1.Now()
	_, err := a.client.CoreV1().Events(pod.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: pod.Name + "." + hex.EncodeToString(b), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: typ, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "kubelet", Host: a.host.Name},
	}, metav1.CreateOptions{})
	if err != nil && ctx.Err() == nil {
		a.log.Debug("recording event", "err", err)
	}
}

// tokenRequest asks the apiserver for a service-account token bound to the Pod.
func (a *Agent) tokenRequest(ctx context.Context, pod *corev1.Pod, audience string, seconds int64) (string, time.Time, error) {
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &seconds,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if audience != "" {
		tr.Spec.Audiences = []string{audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	out, err := a.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("requesting a token for service account %s/%s: %w", pod.Namespace, sa, err)
	}
	return out.Status.Token, out.Status.ExpirationTimestamp.Time, nil
}
