package agent

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func podReady(p *corev1.Pod) (cond, ctr bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			cond = c.Status == corev1.ConditionTrue
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		ctr = cs.Ready
	}
	return cond, ctr
}

// A terminating Pod keeps being probed for readiness, as the kubelet does until its containers stop:
// the upstream test "should be able to connect to terminating and unready endpoints if
// PublishNotReadyAddresses is true" deletes a Pod whose server (netexec --delay-shutdown) fails its
// readiness probe after SIGTERM and waits for the Pod to turn unready. Here the Pod is deleted and its
// preStop hook runs (sleep 600): a failed readiness probe turns it unready in its status, while a failed
// liveness probe no longer kills the container.
func TestReadinessWhileTerminating(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}, FailureThreshold: 1}
	spec := corev1.Container{Name: "web", ReadinessProbe: probe, LivenessProbe: probe,
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 600}}}}
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "webserver", Namespace: "e2e", UID: "u1", DeletionTimestamp: &now, DeletionGracePeriodSeconds: ptr.To[int64](600)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{spec}, RestartPolicy: corev1.RestartPolicyAlways},
	}
	client := fake.NewClientset(pod)
	a := &Agent{client: client, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := &podWorker{a: a, wake: make(chan struct{}, 1), events: make(chan ctrEvent, 64), sandbox: true, initDone: true, order: []string{"web"},
		ctrs: map[string]*ctr{"web": {spec: spec, cmd: cmd, probeOK: map[string]int{},
			st: ctrState{Name: "web", Running: true, Started: true, Ready: true}}}}
	w.update(pod)
	ctx := context.Background()
	w.writeStatus(ctx, pod) // ready, as it was before the deletion
	get := func() *corev1.Pod {
		p, err := client.CoreV1().Pods("e2e").Get(ctx, "webserver", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if c, r := podReady(get()); !c || !r {
		t.Fatalf("before: Ready condition %v, container ready %v; want both true", c, r)
	}
	w.update(get())

	done := make(chan time.Duration, 1)
	go func() { done <- w.preStop(ctx, pod, 600*time.Second) }()
	w.events <- ctrEvent{name: "web", probe: "liveness", ok: false, msg: "HTTP probe failed with statuscode: 503"}
	w.events <- ctrEvent{name: "web", probe: "readiness", ok: false, msg: "HTTP probe failed with statuscode: 503"}
	var c, r bool
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, r = podReady(get()); !c && !r {
			break
		}
	}
	if c || r {
		t.Errorf("after a failed readiness probe during preStop: Ready condition %v, container ready %v; want both false", c, r)
	}
	select {
	case <-exited:
		t.Error("the container was killed for a failed liveness probe while the Pod terminates")
	case left := <-done:
		t.Errorf("preStop (sleep 600) returned early, %s left", left)
	default:
	}
	w.gone()
	if left := <-done; left != 0 {
		t.Errorf("grace left after removal: %s", left)
	}
}

func TestProbeRunsWhileTerminating(t *testing.T) {
	for kind, want := range map[string]bool{"readiness": true, "liveness": false, "startup": false} {
		if got := probeRunsWhileTerminating(kind); got != want {
			t.Errorf("probeRunsWhileTerminating(%q) = %v, want %v", kind, got, want)
		}
	}
}
