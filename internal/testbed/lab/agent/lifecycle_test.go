package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// workerWithHook is a podWorker with one running container (a sleep process) whose preStop hook is h.
func workerWithHook(t *testing.T, h *corev1.LifecycleHandler, ips ...netip.Addr) (*podWorker, *corev1.Pod) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	spec := corev1.Container{Name: "web", Lifecycle: &corev1.Lifecycle{PreStop: h}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{spec}}}
	w := &podWorker{wake: make(chan struct{}, 1), ips: ips,
		ctrs: map[string]*ctr{"web": {spec: spec, cmd: cmd, st: ctrState{Name: "web", Running: true}}}}
	w.update(pod)
	return w, pod
}

func TestPreStopHTTPGetRunsBeforeSIGTERM(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/drain" {
			hits.Add(1)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	w, pod := workerWithHook(t, &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt(port)}},
		netip.MustParseAddr(u.Hostname()))
	left := w.preStop(context.Background(), pod, 30*time.Second)
	if hits.Load() != 1 {
		t.Errorf("preStop httpGet /drain: %d requests, want 1", hits.Load())
	}
	if left <= 0 || left > 30*time.Second {
		t.Errorf("grace left after the hook: %s, want in (0, 30s]", left)
	}
}

// A long preStop (the upstream "endpoints for unready pods" test: sleep 600) is cut short by a deletion
// with grace period 0, as the test's cleanup does, or by the Pod's removal.
func TestPreStopCutShort(t *testing.T) {
	for _, tt := range []struct {
		name string
		cut  func(w *podWorker, pod *corev1.Pod)
	}{
		{"grace period 0", func(w *podWorker, pod *corev1.Pod) {
			p := pod.DeepCopy()
			p.DeletionGracePeriodSeconds = ptr.To[int64](0)
			w.update(p)
		}},
		{"removed", func(w *podWorker, _ *corev1.Pod) { w.gone() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, pod := workerWithHook(t, &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 600}})
			done := make(chan time.Duration, 1)
			go func() { done <- w.preStop(context.Background(), pod, 600*time.Second) }()
			tt.cut(w, pod)
			select {
			case left := <-done:
				if left != 0 {
					t.Errorf("grace left: %s, want 0", left)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("preStop still running a minute after the Pod's grace period was cut to 0")
			}
		})
	}
}

// Containers without a hook, or not running, cost nothing.
func TestPreStopNoHook(t *testing.T) {
	w, pod := workerWithHook(t, nil)
	w.ctrs["web"].spec.Lifecycle = nil
	if left := w.preStop(context.Background(), pod, 10*time.Second); left <= 0 {
		t.Errorf("grace left: %s, want the grace period", left)
	}
}
