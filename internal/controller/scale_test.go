package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// TestScaleVsMetalLB is the controller benchmark of issue 4 (run by `make bench-controller`, not by
// `make test`): N LoadBalancer Services exist in a real apiserver, then the controller starts; we measure
// the time until every Service has an address, the controller's CPU time and peak RSS. The same run is
// made with MetalLB v0.16.1's controller (built from its Go module) against a fresh apiserver.
//
//	IRONLB_BENCH=1 IRONLB_BENCH_SERVICES=10000 go test -run TestScaleVsMetalLB -v -timeout 60m ./internal/controller
func TestScaleVsMetalLB(t *testing.T) {
	if os.Getenv("IRONLB_BENCH") != "1" {
		t.Skip("benchmark: set IRONLB_BENCH=1")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("IRONLB_BENCH_SERVICES")); err == nil {
		n = v
	}
	runs := 1
	if v, err := strconv.Atoi(os.Getenv("IRONLB_BENCH_RUNS")); err == nil {
		runs = v
	}
	dir := t.TempDir()
	ironlb := filepath.Join(dir, "ironlb")
	if out, err := exec.Command("go", "build", "-o", ironlb, "github.com/ironlb/ironlb/cmd/ironlb").CombinedOutput(); err != nil {
		t.Fatalf("building ironlb: %v\n%s", err, out)
	}
	metallb := os.Getenv("METALLB_CONTROLLER")
	if metallb == "" {
		home, _ := os.UserHomeDir()
		metallb = filepath.Join(home, ".cache", "ironlb", "metallb-v0.16.1", "controller")
	}
	if _, err := os.Stat(metallb); err != nil {
		t.Fatalf("MetalLB controller not found at %s (GOBIN=$(dirname it) go install go.universe.tf/metallb/controller@v0.16.1)", metallb)
	}
	type result struct {
		impl        string
		assign, cpu time.Duration
		peakRSS     int64
	}
	var results []result
	for r := 0; r < runs; r++ {
		for _, impl := range []string{"ironlb", "metallb"} {
			res := func() result {
				// A fresh apiserver each run. MetalLB gets its own CRDs (it watches BGPPeer v1beta1, which ironlb
				// does not serve); the schemas are otherwise equal (api/compat).
				crds := "../../config/crd/bases"
				if impl == "metallb" {
					crds = filepath.Join(metallbModuleDir(t), "config", "crd", "bases")
				}
				h := newHarnessWithCRDs(t, crds)
				defer h.env.Stop() // one apiserver at a time: the other impl's must not share the CPU
				h.apply(pool("bench", "10.0.0.0/16"))
				createServices(t, h.cs, n)
				var cmd *exec.Cmd
				if impl == "ironlb" {
					cmd = exec.Command(ironlb, "controller", "--kubeconfig", h.env.Kubeconfig, "--leader-elect=false", "--webhook-addr=", "--metrics-bind-address=")
				} else {
					// MetalLB looks up its own Pod (owner references): give it one to find.
					ctx := context.Background()
					_, _ = h.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
					if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "metallb-controller"},
						Spec: corev1.PodSpec{AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "c", Image: "quay.io/metallb/controller:v0.16.1"}}}},
						metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
					cmd = exec.Command(metallb, "--namespace", ns, "--pod-name", "metallb-controller", "--webhook-mode", "disabled",
						"--disable-cert-rotation", "--log-level", "warn", "--port", "0", "--health-probe-port", "0")
					cmd.Env = append(os.Environ(), "KUBECONFIG="+h.env.Kubeconfig)
				}
				logf, _ := os.Create(filepath.Join(dir, impl+".log"))
				defer logf.Close()
				cmd.Stdout, cmd.Stderr = logf, logf
				assigned := watchAssigned(t, h.cs)
				t0 := time.Now()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
				limit := 20 * time.Minute
				if v, err := time.ParseDuration(os.Getenv("IRONLB_BENCH_LIMIT")); err == nil {
					limit = v
				}
				deadline := t0.Add(limit)
				for assigned() < n {
					if time.Now().After(deadline) {
						b, _ := os.ReadFile(filepath.Join(dir, impl+".log"))
						t.Fatalf("%s: only %d/%d Services got an address in %s\n%s", impl, assigned(), n, limit, tailStr(string(b), 3000))
					}
					time.Sleep(20 * time.Millisecond)
				}
				took := time.Since(t0)
				cpu, rss := procStats(cmd.Process.Pid)
				t.Logf("%s: %d Services assigned in %s; CPU %s; peak RSS %d MiB", impl, n, took.Round(time.Millisecond), cpu, rss>>20)
				return result{impl, took, cpu, rss}
			}()
			results = append(results, res)
		}
	}
	med := func(impl string, f func(result) float64) float64 {
		var v []float64
		for _, r := range results {
			if r.impl == impl {
				v = append(v, f(r))
			}
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	fmt.Printf("\n| %d LoadBalancer Services, controller started after they exist (median of %d) | ironlb | MetalLB v0.16.1 | MetalLB / ironlb |\n|---|---|---|---|\n", n, runs)
	for _, m := range []struct {
		name string
		f    func(result) float64
		unit string
	}{
		{"time until every Service has an address", func(r result) float64 { return r.assign.Seconds() }, "s"},
		{"controller CPU time (user+sys)", func(r result) float64 { return r.cpu.Seconds() }, "s"},
		{"controller peak RSS", func(r result) float64 { return float64(r.peakRSS >> 20) }, "MiB"},
	} {
		a, b := med("ironlb", m.f), med("metallb", m.f)
		fmt.Printf("| %s | %.2f %s | %.2f %s | %.1f× |\n", m.name, a, m.unit, b, m.unit, b/a)
	}
}

func metallbModuleDir(t *testing.T) string {
	out, err := exec.Command("go", "mod", "download", "-json", "go.universe.tf/metallb@v0.16.1").Output()
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("metallb module: %v", err)
	}
	return m.Dir
}

func tailStr(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// createServices makes n LoadBalancer Services in the default namespace, 16 at a time.
func createServices(t *testing.T, cs kubernetes.Interface, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	t0 := time.Now()
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				// No node ports: 10,000 would not fit in 30000-32767 (allocateLoadBalancerNodePorts, seed 001).
				s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%05d", i)},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "x"},
						AllocateLoadBalancerNodePorts: new(bool),
						Ports:                         []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
				if _, err := cs.CoreV1().Services("default").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("creating services: %v", err)
	default:
	}
	t.Logf("created %d services in %s", n, time.Since(t0).Round(time.Millisecond))
}

// watchAssigned counts Services holding an address, from a watch (no polling of 10k objects).
func watchAssigned(t *testing.T, cs kubernetes.Interface) func() int {
	inf := informers.NewSharedInformerFactory(cs, 0)
	si := inf.Core().V1().Services().Informer()
	var mu sync.Mutex
	has := map[string]bool{}
	update := func(o any) {
		s, ok := o.(*corev1.Service)
		if !ok {
			return
		}
		mu.Lock()
		has[s.Name] = len(s.Status.LoadBalancer.Ingress) > 0
		mu.Unlock()
	}
	si.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: update, UpdateFunc: func(_, o any) { update(o) }})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	inf.Start(stop)
	cache.WaitForCacheSync(stop, si.HasSynced)
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		c := 0
		for _, v := range has {
			if v {
				c++
			}
		}
		return c
	}
}

// procStats returns a process's CPU time and peak RSS (VmHWM) from /proc.
func procStats(pid int) (time.Duration, int64) {
	var cpu time.Duration
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
	}
	var rss int64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
				rss = kb << 10
			}
		}
	}
	return cpu, rss
}
