package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// The runc runtime (`lab up --runtime=runc`): a container is its image, pulled from the lab's
// registry (pull.go), run by runc from the OCI runtime spec ocispec.go writes, instead of a host
// program standing in for it (images.go, the host runtime's).
//
// Per node, under <state>/nodes/<node>/:
//
//	images/      the image store (pull.go)
//	runc/        runc's state (--root)
//	containers/<pod uid>/<container>-<run>/  the bundle: config.json, rootfs/ (an overlay), upper/, work/
//
// The rootfs is an overlay: the image's unpacked rootfs as its lower layer, the bundle's upper/ and
// work/ for what the container writes. A copy per container would cost the image's size and its
// copying time for each (ironlb's binary is over 100 MB unstripped); the overlay costs neither, and
// the image's files stay as pulled for the next container. The overlay is mounted in the agent's
// mount namespace (the host's), so it is unmounted on teardown, by the agent's start after a power
// cut (cleanOrphans), and by `lab down` (lab.UnmountUnder).
//
// `runc run` runs in the foreground, in a cgroup of its own beside the container's
// (pods/<uid>/runc-<container>-<run> and pods/<uid>/<container>-<run>, both under the node's lab
// cgroup, so a power cut kills both): its stdout and stderr are the container's (runc passes its
// stdio through), written to the container's log files; it forwards signals to the container
// (teardown's SIGTERM) and exits with the container's code. Once it exits, `runc delete --force`
// removes the container and kills what is left of it (runc itself was killed: a liveness failure).
// kubectl exec is `runc exec` (kubeletexec.go).

// Runtimes of `lab up --runtime`.
const (
	RuntimeHost = lab.RuntimeHost
	RuntimeRunc = lab.RuntimeRunc
)

// In runc mode no container runs as a host program: lab up pushes an image for every image the lab's
// Pods and the e2e suites run (lab.pushRuntimeImages: ironlb, whoami, kube-proxy, CoreDNS,
// MetalLB, agnhost, pause, busybox, nginx, httpd, glibc-dns-testing), and an image the registry
// lacks fails to pull with the registry's error. The host mapping (images.go) is --runtime=host's.

// runcRuntime is one node's runc runtime. Its fields are set once; mu guards backoff.
type runcRuntime struct {
	runc       string // the runc binary
	root       string // runc --root
	bundles    string // containers/
	cgroupRoot string // the cgroup v2 mount point, which cgroupsPath is relative to
	images     *imageStore
	hostCaps   []string // the agent's effective capabilities: a privileged container's (OCIInput.HostCaps)

	mu      sync.Mutex
	backoff map[string]pullBackoff // "<pod uid>_<image>" -> pull back-off, as the kubelet keys it
	hold    map[string]time.Time   // same key -> no new attempt before (pullSyncPeriod after a failure)
}

// pullSyncPeriod is how long a container whose pull failed (or is backing off) keeps its state before
// the worker looks at it again: the kubelet syncs a Pod whose sync failed 10 s later (jittered, and
// sooner on other events), so ErrImagePull and ImagePullBackOff each show for a while; the lab's pod
// worker would otherwise look every second.
const pullSyncPeriod = 5 * time.Second

// newRuncRuntime prepares node's runc runtime. The agent runs in the node's network namespace, so
// its pulls reach the registry on the bridge as a node's do.
func newRuncRuntime(l *lab.Lab, node string) (*runcRuntime, error) {
	bin, err := exec.LookPath("runc")
	if err != nil {
		return nil, fmt.Errorf("--runtime=runc: %w (apt-get install runc; hack/deps.sh)", err)
	}
	if !l.Plan.RegistryAddr().IsValid() {
		return nil, errors.New("--runtime=runc needs the lab's registry (--registry)")
	}
	cg, err := l.Cgroup()
	if err != nil {
		return nil, err
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	hostCaps, err := ProcessCaps(status)
	if err != nil {
		return nil, fmt.Errorf("the agent's capabilities (/proc/self/status): %w", err)
	}
	dir := filepath.Join(l.State.Dir, "nodes", node)
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, ResponseHeaderTimeout: 30 * time.Second}
	return &runcRuntime{
		runc: bin, root: filepath.Join(dir, "runc"), bundles: filepath.Join(dir, "containers"),
		cgroupRoot: filepath.Dir(string(cg)),
		images:     newImageStore(filepath.Join(dir, "images"), l.Plan.RegistryAddr().String(), tr, v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		hostCaps:   hostCaps,
		backoff:    map[string]pullBackoff{},
		hold:       map[string]time.Time{},
	}, nil
}

// cleanOrphans removes what runc containers of an earlier agent left (their processes died with the
// node's cgroup): runc's state and the bundles, their overlays unmounted first.
func (r *runcRuntime) cleanOrphans() error {
	_ = os.RemoveAll(r.root)
	if err := lab.UnmountUnder(r.bundles); err != nil {
		return err
	}
	return os.RemoveAll(r.bundles)
}

// runcExec is how kubectl exec enters a runc container.
type runcExec struct {
	Runc, Root, ID string
}

// command is `runc exec`: the container's namespaces, cgroup, user, capabilities, environment and
// working directory (runc takes them from the container's config.json), a terminal if tty.
func (x *runcExec) command(argv []string, tty bool) *exec.Cmd {
	args := []string{"--root", x.Root, "exec"}
	if tty {
		args = append(args, "--tty")
	}
	// no "--" after the id: runc takes every word after it as the command (a "--" would be run)
	cmd := exec.Command(x.Runc, append(append(args, x.ID), argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

// startRunc is podWorker.start for a container the runc runtime runs: pull (with the kubelet's
// back-off), bundle, `runc run`. fail puts the container in a waiting reason with a message.
func (w *podWorker) startRunc(ctx context.Context, pod *corev1.Pod, c *ctr, env *Env, fail func(string, error)) {
	a, r := w.a, w.a.runc
	image := c.spec.Image
	key := string(pod.UID) + "_" + image
	now := time.Now()
	r.mu.Lock()
	bo, hold := r.backoff[key], r.hold[key]
	r.mu.Unlock()
	if now.Before(hold) {
		return
	}
	if waiting, msg := bo.waiting(now, image); waiting {
		r.mu.Lock()
		r.hold[key] = now.Add(pullSyncPeriod)
		r.mu.Unlock()
		fail("ImagePullBackOff", errors.New(msg))
		return
	}
	img, st, err := r.images.get(ctx, image, c.spec.ImagePullPolicy)
	if err != nil {
		if errors.Is(err, ErrImageNeverPull) {
			fail("ErrImageNeverPull", errors.New(strings.TrimPrefix(err.Error(), ErrImageNeverPull.Error()+": ")))
			return
		}
		r.mu.Lock()
		r.backoff[key] = bo.failed(time.Now(), err)
		r.hold[key] = time.Now().Add(pullSyncPeriod)
		r.mu.Unlock()
		a.event(ctx, pod, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Failed to pull image %q: %v", image, err))
		fail("ErrImagePull", err)
		return
	}
	r.mu.Lock()
	delete(r.backoff, key)
	delete(r.hold, key)
	r.mu.Unlock()
	if st.Pulled {
		a.event(ctx, pod, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %s. Image size: %d bytes.", image, st.Total.Round(time.Millisecond), img.Size))
		a.log.Info("image pulled", "pod", pod.Namespace+"/"+pod.Name, "image", image, "imageID", img.ImageID,
			"seconds", st.Total.Seconds(), "unpacked", st.Unpacked, "unpackSeconds", st.Unpack.Seconds(), "bytes", img.Size)
	} else if c.st.ImageID != img.ImageID {
		a.event(ctx, pod, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", image))
	}
	c.st.ImageID = img.ImageID

	hostname, _ := PodHostname(pod, lab.ClusterDomain)
	netns := lab.NetNSPath(w.netns)
	if pod.Spec.HostNetwork {
		hostname = a.host.Name
	}
	binds, err := w.bindMounts(ctx, pod, c.spec, false)
	if err != nil {
		fail("CreateContainerConfigError", err)
		return
	}
	if m, err := w.hostnameFile(hostname); err == nil { // as containerd gives every container one
		binds = append(binds, m)
	} else {
		fail("CreateContainerError", err)
		return
	}
	passwd, group := imageFile(img.Rootfs, "etc/passwd"), imageFile(img.Rootfs, "etc/group")
	run := c.gen + 1
	ctrCg, err := a.lab.Cgroup(a.host.Name, "pods", string(w.uid), fmt.Sprintf("%s-%d", c.spec.Name, run))
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	bundle := filepath.Join(r.bundles, string(w.uid), fmt.Sprintf("%s-%d", c.spec.Name, run))
	spec, err := OCISpec(OCIInput{
		Pod: pod, Container: c.spec, Image: img.Config.Config, Env: kubeEnv(env, c.spec),
		Passwd: passwd, Group: group, Rootfs: filepath.Join(bundle, "rootfs"), Mounts: binds,
		NetNS: netns, Hostname: hostname, CgroupsPath: strings.TrimPrefix(string(ctrCg), r.cgroupRoot), HostCaps: r.hostCaps,
	})
	switch {
	case errors.Is(err, ErrContainerConfig):
		fail("CreateContainerConfigError", err)
		return
	case err != nil:
		fail("CreateContainerError", err)
		return
	}
	if a.podRealtime(ctx, pod, c.spec) { // runc writes it into the container's cpu cgroup
		rt := int64(lab.ContainerRealtimeUS)
		spec.Linux.Resources.CPU = &specs.LinuxCPU{RealtimeRuntime: &rt}
	}
	// The previous run's container and cgroups go first (a fresh cgroup per run, as in start).
	id := fmt.Sprintf("%s-%s-%d", w.uid, c.spec.Name, run)
	r.remove(fmt.Sprintf("%s-%s-%d", w.uid, c.spec.Name, c.gen), filepath.Join(r.bundles, string(w.uid), fmt.Sprintf("%s-%d", c.spec.Name, c.gen)))
	for _, n := range []string{fmt.Sprintf("%s-%d", c.spec.Name, c.gen), fmt.Sprintf("runc-%s-%d", c.spec.Name, c.gen)} {
		if prev, err := a.lab.Cgroup(a.host.Name, "pods", string(w.uid), n); err == nil {
			_ = prev.Remove()
		}
	}
	if err := r.bundle(bundle, img.Rootfs, spec); err != nil {
		fail("CreateContainerError", err)
		return
	}
	runcCg, err := a.lab.Cgroup(a.host.Name, "pods", string(w.uid), fmt.Sprintf("runc-%s-%d", c.spec.Name, run))
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	fd, err := runcCg.Open()
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	defer fd.Close()
	pidFile := filepath.Join(bundle, "pid")
	cmd := exec.Command(r.runc, "--root", r.root, "--log", filepath.Join(bundle, "runc.log"), "run", "--bundle", bundle, "--pid-file", pidFile, id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	lw, logDir, err := w.startLogged(cmd, pod, c)
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid, err := waitPIDFile(pidFile, exited, 10*time.Second)
	if err != nil { // runc failed before the container's process ran: its own error is in runc.log
		msg := runcError(filepath.Join(bundle, "runc.log"))
		r.remove(id, bundle)
		fail("RunContainerError", fmt.Errorf("runc run: %v: %s", err, msg))
		return
	}
	w.publishRun(ctrRun{PodNamespace: pod.Namespace, PodName: pod.Name, PodUID: string(pod.UID), Container: c.spec.Name, Image: c.spec.Image,
		Run: int(c.st.Restarts), LogDir: logDir, PID: pid, Exec: execSpec{Cgroup: ctrCg, Runc: &runcExec{Runc: r.runc, Root: r.root, ID: id}}, LogDone: lw.done})
	w.track(ctx, pod, c, cmd, pid, exited, func() { r.remove(id, "") }, strings.Join(spec.Process.Args, " "))
}

// kubeEnv is the environment the kubelet gives a container (service links, envFrom, env) without
// the lab's defaults for host programs (PATH, HOSTNAME), which the image and the runtime set.
func kubeEnv(env *Env, c corev1.Container) []string {
	own := map[string]bool{}
	for _, e := range c.Env {
		own[e.Name] = true
	}
	var out []string
	for _, kv := range env.List() {
		k, _, _ := strings.Cut(kv, "=")
		if (k == "PATH" || k == "HOSTNAME") && !own[k] {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// imageFile reads a file of an image's rootfs (nil when it has none), confined to the rootfs.
func imageFile(rootfs, name string) []byte {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return b
}

// bundle writes the container's bundle: the overlay rootfs over the image's and config.json.
func (r *runcRuntime) bundle(dir, lower string, spec any) error {
	for _, d := range []string{"rootfs", "upper", "work"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if err := unix.Mount("overlay", filepath.Join(dir, "rootfs"), "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the container's rootfs (overlay %s): %w", opts, err)
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}

// remove deletes container id (killing what is left of it) and, when bundle is given, unmounts its
// rootfs and removes the bundle.
func (r *runcRuntime) remove(id, bundle string) {
	_ = exec.Command(r.runc, "--root", r.root, "delete", "--force", id).Run()
	if bundle != "" {
		_ = lab.UnmountUnder(bundle)
		_ = os.RemoveAll(bundle)
	}
}

// removePod removes every container bundle of a Pod (after its cgroups were killed).
func (r *runcRuntime) removePod(uid string) {
	dir := filepath.Join(r.bundles, uid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if i := strings.LastIndex(e.Name(), "-"); i > 0 {
			r.remove(uid+"-"+e.Name(), "")
		}
	}
	_ = lab.UnmountUnder(dir)
	_ = os.RemoveAll(dir)
}

// waitPIDFile waits until runc wrote the container's pid (the process runs) or runc exited.
func waitPIDFile(path string, exited chan error, timeout time.Duration) (int, error) {
	deadline := time.After(timeout)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
				return pid, nil
			}
		}
		select {
		case err := <-exited:
			// it may have run and ended at once: then the pid file is there, and the exit goes back
			// to the channel for the caller's wait
			if b, rerr := os.ReadFile(path); rerr == nil && len(b) > 0 {
				var pid int
				if _, serr := fmt.Sscan(string(b), &pid); serr == nil && pid > 0 {
					exitedBack(exited, err)
					return pid, nil
				}
			}
			if err == nil {
				err = errors.New("exited")
			}
			return 0, err
		case <-deadline:
			return 0, fmt.Errorf("no pid after %s", timeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func exitedBack(ch chan error, err error) { ch <- err }

// runcError is the last error runc logged (its --log is JSON lines: {"level":"error","msg":...}).
func runcError(path string) string {
	b, _ := os.ReadFile(path)
	var last string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &e) == nil && (e.Level == "error" || e.Level == "fatal") {
			last = e.Msg
		}
	}
	if last == "" {
		return "see " + path
	}
	return last
}
