package proxybench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ironlb/ironlb/internal/testbed/apiserver"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// ScaleOptions choose what RunScale measures.
type ScaleOptions struct {
	Self       string // the ironlb binary (runs `ironlb proxy`)
	K8sBin     string // the Kubernetes binaries: etcd, kube-apiserver, kube-proxy
	Services   []int  // Service counts for the full syncs (each Service has 2 endpoints)
	SyncTrials int    // starts of each proxy per count
	Changes    int    // endpoint changes at the count closest to 10,000 (0: none)
	Dir        string // work directory (apiserver data, logs); "" = a temporary one, removed at the end
	Log        func(format string, args ...any)
}

// ScaleNetNSPrefix starts the names of the network namespaces RunScale makes:
// ironlb-pb-PID-kp and ironlb-pb-PID-il.
const ScaleNetNSPrefix = "ironlb-pb-"

const (
	scaleWriters   = 4 // API clients, each with its own connection, shared by the proxyWorkers writers
	scaleNodeKP    = "pb-kube-proxy"
	scaleNodeIL    = "pb-ironlb"
	scaleStopGrace = 10 * time.Second
)

// scaleProxy is one proxy of RunScale: a process started in its own network namespace.
type scaleProxy struct {
	name  string // KubeProxy or IronLB
	netns string // namespace name
	table string
	args  []string // the command, run with `ip netns exec NETNS`
	logf  string   // its output

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

func (p *scaleProxy) path() string { return lab.NetNSPath(p.netns) }

func (p *scaleProxy) metrics(ctx context.Context) (Own, error) {
	return scrapeOwn(ctx, p.name, p.netns, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), "")
}

// start runs the proxy from an empty ruleset.
func (p *scaleProxy) start() error {
	if err := deleteTables(p.path(), p.table); err != nil {
		return err
	}
	out, err := os.OpenFile(p.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Fprintf(out, "--- %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(p.args, " "))
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.netns}, p.args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return nil
}

// stop ends the proxy (SIGTERM, then SIGKILL to its process group) and deletes its tables.
func (p *scaleProxy) stop() error {
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(scaleStopGrace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.cmd = nil
	return deleteTables(p.path(), p.table)
}

func (p *scaleProxy) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// RunScale compares kube-proxy (nftables mode) with `ironlb proxy` without the lab: a real etcd
// and kube-apiserver on loopback (internal/testbed/apiserver), Services (ClusterIP, no selector) and
// two-endpoint EndpointSlices written directly, and each proxy in a network namespace of its own
// that RunScale makes and always deletes (ironlb-pb-PID-kp, -il). The proxies reach the apiserver
// through a relay listening on 127.0.0.1 inside their namespace; nothing is added to the root
// namespace but that relay's sockets.
//
// For each Service count and trial it starts each proxy in turn from an empty ruleset and
// times, from the process start, until the last Service's ClusterIP is in the namespace's
// service-ips map (read over netlink every 20 ms); it reads the proxy's own full-sync metric and
// samples the resident memory of the proxy and its children (nft) every 100 ms. At the count
// closest to 10,000 it runs both proxies and times endpoint changes as the lab's benchmark does.
func RunScale(ctx context.Context, o ScaleOptions) (res Result, err error) {
	res = Result{Sync: map[string][]SyncTrial{}, Changes: map[string][]ChangeTrial{}}
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
	for _, f := range []string{filepath.Join(o.K8sBin, "kube-apiserver"), filepath.Join(o.K8sBin, "kube-proxy"), o.Self} {
		if _, err := os.Stat(f); err != nil {
			return res, fmt.Errorf("%w (hack/k8s-binaries.sh builds the Kubernetes binaries)", err)
		}
	}
	removeDeadScaleNetNS(ctx, o.Log)

	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ironlb-pb-"); err != nil {
			return res, err
		}
		undo = append(undo, func() { os.RemoveAll(dir) })
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	o.Log("starting etcd and kube-apiserver (%s; logs in %s)", o.K8sBin, dir)
	env, err := apiserver.Launch(o.K8sBin, filepath.Join(dir, "k8s"))
	if err != nil {
		return res, err
	}
	undo = append(undo, env.Stop)
	apiPort, err := portOf(env.URL)
	if err != nil {
		return res, err
	}
	var clients []kubernetes.Interface
	for range scaleWriters {
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = 5000, 10000
		cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext // a connection (transport) of its own
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return res, err
		}
		clients = append(clients, cs)
	}
	cs := clients[0]
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	for i, n := range []string{scaleNodeKP, scaleNodeIL} {
		// The node addresses are in the benchmark range (RFC 2544) and exist nowhere: the proxies
		// only read them from the Node objects.
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.18.0.%d", i+2)}}}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return res, err
		}
	}

	kpConf := filepath.Join(dir, "kube-proxy.yaml")
	if err := os.WriteFile(kpConf, []byte(kubeProxyConfig(env.Kubeconfig, scaleNodeKP)), 0o644); err != nil {
		return res, err
	}
	pid := os.Getpid()
	kp := &scaleProxy{name: KubeProxy, netns: fmt.Sprintf("%s%d-kp", ScaleNetNSPrefix, pid), table: "kube-proxy",
		args: []string{filepath.Join(o.K8sBin, "kube-proxy"), "--config=" + kpConf, "--v=1"}, logf: filepath.Join(dir, "kube-proxy.log")}
	il := &scaleProxy{name: IronLB, netns: fmt.Sprintf("%s%d-il", ScaleNetNSPrefix, pid), table: "ironlb",
		args: []string{o.Self, "proxy", "--node=" + scaleNodeIL, "--kubeconfig=" + env.Kubeconfig,
			// Plain HTTP on the loopback of its own namespace, as kube-proxy's here (nothing else reaches it).
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort), "--metrics-secure=false", "--healthz-bind-address=127.0.0.1:10256",
			"--node-liveness=false"},
		logf: filepath.Join(dir, "ironlb-proxy.log")}
	proxies := []*scaleProxy{kp, il}
	for _, p := range proxies {
		undo = append(undo, func() {
			if err := lab.DeleteNetNS(context.WithoutCancel(ctx), p.netns); err != nil {
				o.Log("deleting network namespace %s: %v", p.netns, err)
			}
		})
		if err := addNetNS(ctx, p.netns); err != nil {
			return res, err
		}
		r, err := startRelay(p.netns, apiPort)
		if err != nil {
			return res, err
		}
		undo = append(undo, r.close)
		undo = append(undo, func() {
			if err := p.stop(); err != nil {
				o.Log("stopping %s: %v", p.name, err)
			}
		})
	}
	o.Log("proxies in network namespaces %s and %s; apiserver relayed to 127.0.0.1:%d in each", kp.netns, il.netns, apiPort)

	var ips []netip.Addr
	for _, n := range sizes {
		if ips, err = createServices(ctx, clients, ips, n, o.Log); err != nil {
			return res, err
		}
		for t := 1; t <= o.SyncTrials; t++ {
			for _, p := range proxies {
				tr, err := scaleSync(ctx, p, ips[n-1], n)
				if err != nil {
					return res, fmt.Errorf("%s with %d Services: %w", p.name, n, err)
				}
				res.Sync[p.name] = append(res.Sync[p.name], tr)
				o.Log("%d Services, trial %d/%d, %s: start -> rules %s (own: full sync %s, start -> last sync %s), peak RSS %s",
					n, t, o.SyncTrials, p.name, fmtDur(tr.Sync), fmtDur(tr.OwnFull), fmtDur(tr.OwnLast), fmtMiB(tr.PeakRSS))
			}
		}
		if n != changeAt {
			continue
		}
		res.ChangeAt = n
		var ts []changeTarget
		for _, p := range proxies {
			if err := p.start(); err != nil {
				return res, err
			}
			ts = append(ts, changeTarget{name: p.name, where: p.netns, netns: p.path(), table: p.table, metrics: p.metrics})
		}
		for _, p := range proxies {
			if err := waitElement(ctx, p, ips[n-1], syncTimeout); err != nil {
				return res, err
			}
		}
		o.Log("both proxies have the %d Services: %d endpoint changes", n, o.Changes)
		if err := measureChanges(ctx, cs, ts, n, o.Changes, o.Log, &res); err != nil {
			return res, fmt.Errorf("endpoint changes at %d Services: %w", n, err)
		}
		for _, p := range proxies {
			if err := p.stop(); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// scaleSync starts p from an empty ruleset with n Services present and times its first full sync.
func scaleSync(ctx context.Context, p *scaleProxy, last netip.Addr, n int) (tr SyncTrial, err error) {
	tr = SyncTrial{Services: n, Sync: -1, OwnFull: -1, OwnLast: -1, PeakRSS: -1}
	if err := deleteTables(p.path(), p.table); err != nil {
		return tr, err
	}
	probe, err := NewElementProbe(p.path(), p.table, serviceIPsMap, ServiceKey(last, servicePort))
	if err != nil {
		return tr, err
	}
	defer probe.Close()
	start := time.Now()
	if err := p.start(); err != nil {
		return tr, err
	}
	defer func() {
		if serr := p.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	var done time.Time
	tick := time.NewTicker(syncPoll)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return tr, ctx.Err()
		case <-tick.C:
		}
		if p.exited() {
			return tr, fmt.Errorf("%s exited (see %s)", p.name, p.logf)
		}
		if i%rssEvery == 0 {
			tr.PeakRSS = max(tr.PeakRSS, treeRSS(p.cmd.Process.Pid))
		}
		if done.IsZero() {
			ok, err := probe.Present()
			if err != nil {
				return tr, err
			}
			if ok {
				done = time.Now()
				tr.CPU = treeCPU(p.cmd.Process.Pid)
			}
		} else if time.Since(done) > time.Second {
			break // RSS sampled for a second after the sync
		}
		if time.Since(start) > syncTimeout {
			return tr, fmt.Errorf("no full sync with %d Services after %s", n, syncTimeout)
		}
	}
	tr.Sync = done.Sub(start)
	own, err := waitOwn(ctx, p.metrics, func(o Own) bool { return o.FullCount >= 1 && o.Last > 0 }, 10*time.Second)
	if err != nil {
		return tr, fmt.Errorf("own metrics: %w", err)
	}
	tr.OwnFull = seconds(own.FullSum / own.FullCount)
	tr.OwnLast = time.Unix(0, int64(own.Last*1e9)).Sub(start)
	return tr, nil
}

// waitElement waits until p's service-ips map holds the Service at addr.
func waitElement(ctx context.Context, p *scaleProxy, addr netip.Addr, timeout time.Duration) error {
	probe, err := NewElementProbe(p.path(), p.table, serviceIPsMap, ServiceKey(addr, servicePort))
	if err != nil {
		return err
	}
	defer probe.Close()
	return poll(ctx, timeout, syncPoll, func() (bool, string, error) {
		if p.exited() {
			return false, "", fmt.Errorf("%s exited (see %s)", p.name, p.logf)
		}
		ok, err := probe.Present()
		return ok, fmt.Sprintf("%s has not programmed %s", p.name, addr), err
	})
}

// kubeProxyConfig is kube-proxy's configuration for the benchmark: nftables mode, metrics and
// health on the namespace's loopback, conntrack's global limits left alone.
func kubeProxyConfig(kubeconfig, node string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: %s
clientConnection:
  kubeconfig: %s
conntrack:
  maxPerCore: 0
metricsBindAddress: 127.0.0.1:%d
healthzBindAddress: 127.0.0.1:10256
`, node, kubeconfig, metricsPort)
}

func portOf(url string) (int, error) {
	i := strings.LastIndexByte(url, ':')
	if i < 0 {
		return 0, fmt.Errorf("no port in %q", url)
	}
	return strconv.Atoi(url[i+1:])
}

// removeDeadScaleNetNS deletes namespaces an earlier RunScale left when it was killed: its
// prefix with the PID of a process that no longer exists.
func removeDeadScaleNetNS(ctx context.Context, log func(string, ...any)) {
	for _, name := range lab.ListNetNS() {
		rest, ok := strings.CutPrefix(name, ScaleNetNSPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // that run is alive
		}
		log("deleting network namespace %s, left by process %d", name, pid)
		if err := lab.DeleteNetNS(ctx, name); err != nil {
			log("deleting %s: %v", name, err)
		}
	}
}

// treeRSS is the resident memory of a process and its descendants, in bytes (-1 if unknown).
func treeRSS(pid int) int64 {
	total := int64(-1)
	seen := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			if kb, ok := statusField(string(b), "VmRSS:"); ok {
				total = max(total, 0) + kb<<10
			}
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					walk(c)
				}
			}
		}
	}
	walk(pid)
	return total
}

// treeCPU is the CPU time (user and system) a process, its descendants and its children that
// have exited and been waited for have used; 0 if unknown.
func treeCPU(pid int) time.Duration {
	var ticks uint64
	seen := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			ticks += ProcCPUTicks(string(b))
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					walk(c)
				}
			}
		}
	}
	walk(pid)
	return time.Duration(ticks) * time.Second / clockTicks
}

// statusField returns a "Name:   N kB" field of /proc/PID/status, in kB.
func statusField(status, name string) (int64, bool) {
	for _, l := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(l, name); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			v, err := strconv.ParseInt(f[0], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// relay accepts connections on 127.0.0.1:port inside a network namespace and forwards each to
// 127.0.0.1:port of the root namespace (the apiserver).
type relay struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex // guards conns
	conn map[net.Conn]struct{}
}

func startRelay(netns string, port int) (*relay, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	r := &relay{conn: map[net.Conn]struct{}{}}
	err := lab.InNetNS(netns, func() error {
		var err error
		r.ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("relay in %s: %w", netns, err)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := r.ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.pipe(c, addr)
			}()
		}
	}()
	return r, nil
}

func (r *relay) track(c net.Conn, on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return false
	}
	if on {
		r.conn[c] = struct{}{}
	} else {
		delete(r.conn, c)
	}
	return true
}

func (r *relay) pipe(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", addr, 5*time.Second) // from a thread of the root namespace
	if err != nil {
		return
	}
	defer up.Close()
	if !r.track(c, true) || !r.track(up, true) {
		return
	}
	defer r.track(c, false)
	defer r.track(up, false)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, c)
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(c, up)
	_ = c.(*net.TCPConn).CloseWrite()
	wg.Wait()
}

// close stops accepting, cuts every relayed connection and waits for its goroutines.
func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	conns := r.conn
	r.conn = nil
	r.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	r.wg.Wait()
}

// ScaleNetNS lists the network namespaces of RunScale that exist (for a check after a run).
func ScaleNetNS() []string {
	return slices.DeleteFunc(lab.ListNetNS(), func(n string) bool { return !strings.HasPrefix(n, ScaleNetNSPrefix) })
}

// addNetNS makes a named network namespace with its loopback up.
func addNetNS(ctx context.Context, name string) error {
	if err := run(ctx, "ip", "netns", "add", name); err != nil {
		return err
	}
	return run(ctx, "ip", "-n", name, "link", "set", "lo", "up")
}
