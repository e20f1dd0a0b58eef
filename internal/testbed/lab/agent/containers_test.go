package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestIsSidecar(t *testing.T) {
	for _, tc := range []struct {
		policy *corev1.ContainerRestartPolicy
		want   bool
	}{
		{nil, false},
		{ptr.To(corev1.ContainerRestartPolicyAlways), true},
		{ptr.To(corev1.ContainerRestartPolicy("Never")), false},
	} {
		if got := IsSidecar(corev1.Container{Name: "c", RestartPolicy: tc.policy}); got != tc.want {
			t.Errorf("IsSidecar(restartPolicy %v) = %v, want %v", tc.policy, got, tc.want)
		}
	}
}

func TestBackOff(t *testing.T) {
	for restarts, want := range map[int32]time.Duration{0: 10 * time.Second, 1: 20 * time.Second, 3: 80 * time.Second,
		4: 160 * time.Second, 5: 5 * time.Minute, 50: 5 * time.Minute} {
		if got := backOff(restarts); got != want {
			t.Errorf("backOff(%d) = %s, want %s", restarts, got, want)
		}
	}
}

func TestPlanContainers(t *testing.T) {
	now := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Second), now.Add(time.Second)
	// container states
	fresh := func(name string) planCtr { return planCtr{Name: name} }
	initC := func(c planCtr) planCtr { c.Init = true; return c }
	sidecar := func(c planCtr) planCtr { c.Init, c.Sidecar = true, true; return c }
	running := func(name string) planCtr { return planCtr{Name: name, Running: true, Started: true} }
	unstarted := func(name string) planCtr { return planCtr{Name: name, Running: true} } // startup probe not passed yet
	exited := func(name string, code int32) planCtr {
		return planCtr{Name: name, Terminated: true, ExitCode: code}
	}
	backingOff := func(c planCtr, until time.Time) planCtr { c.NextStart = until; return c }
	restarts := func(c planCtr, n int32) planCtr { c.Restarts = n; return c }
	start := func(name string) ctrAction { return ctrAction{Kind: actStart, Name: name} }
	restart := func(name string) ctrAction { return ctrAction{Kind: actStart, Name: name, Restart: true} }
	back := func(name string, d time.Duration) ctrAction { return ctrAction{Kind: actBackOff, Name: name, Delay: d} }
	stop := func(name string) ctrAction { return ctrAction{Kind: actStop, Name: name} }

	tests := []struct {
		name     string
		policy   corev1.RestartPolicy
		initDone bool
		ctrs     []planCtr
		want     []ctrAction
		wantInit bool
	}{
		{
			name:   "no init containers: all containers start at once",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{fresh("a"), fresh("b")},
			want:   []ctrAction{start("a"), start("b")}, wantInit: true,
		},
		{
			name:   "first init container starts alone",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{initC(fresh("i1")), initC(fresh("i2")), fresh("a")},
			want:   []ctrAction{start("i1")},
		},
		{
			name:   "a running init container holds the next",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{initC(running("i1")), initC(fresh("i2")), fresh("a")},
		},
		{
			name:   "completed init container: the next starts",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{initC(exited("i1", 0)), initC(fresh("i2")), fresh("a")},
			want:   []ctrAction{start("i2")},
		},
		{
			name:   "all init containers completed: the Pod is initialized and its containers start",
			policy: corev1.RestartPolicyNever,
			ctrs:   []planCtr{initC(exited("i1", 0)), initC(exited("i2", 0)), fresh("a"), fresh("b")},
			want:   []ctrAction{start("a"), start("b")}, wantInit: true,
		},
		{
			name:   "failed init container, restartPolicy Never: nothing more starts (the Pod fails)",
			policy: corev1.RestartPolicyNever,
			ctrs:   []planCtr{initC(exited("i1", 1)), fresh("a")},
		},
		{
			name:   "failed init container, restartPolicy OnFailure: back-off",
			policy: corev1.RestartPolicyOnFailure,
			ctrs:   []planCtr{initC(exited("i1", 1)), fresh("a")},
			want:   []ctrAction{back("i1", 10*time.Second)},
		},
		{
			name:   "failed init container after its back-off: restarted, the containers still wait",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{initC(backingOff(exited("i1", 1), past)), fresh("a")},
			want:   []ctrAction{restart("i1")},
		},
		{
			name:   "failed init container during its back-off: nothing",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{initC(backingOff(exited("i1", 1), future)), fresh("a")},
		},
		// sidecars (KEP-753)
		{
			name:   "sidecar starts first, alone",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{sidecar(fresh("s")), fresh("a")},
			want:   []ctrAction{start("s")},
		},
		{
			name:   "started sidecar: the Pod is initialized and the containers start beside it",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{sidecar(running("s")), fresh("a")},
			want:   []ctrAction{start("a")}, wantInit: true,
		},
		{
			name:   "sidecar running but its startup probe has not passed: the rest wait",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{sidecar(unstarted("s")), initC(fresh("i")), fresh("a")},
		},
		{
			name:   "started sidecar, then a regular init container starts while the sidecar runs",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{sidecar(running("s")), initC(fresh("i")), fresh("a")},
			want:   []ctrAction{start("i")},
		},
		{
			name:   "regular init container before a sidecar must complete first",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{initC(running("i")), sidecar(fresh("s")), fresh("a")},
		},
		{
			name:   "init container completed: the sidecar after it starts",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{initC(exited("i", 0)), sidecar(fresh("s")), fresh("a")},
			want:   []ctrAction{start("s")},
		},
		{
			name:   "two sidecars start in order",
			policy: corev1.RestartPolicyAlways,
			ctrs:   []planCtr{sidecar(running("s1")), sidecar(fresh("s2")), fresh("a")},
			want:   []ctrAction{start("s2")},
		},
		{
			name:   "two sidecars started, init container completed: the containers start",
			policy: corev1.RestartPolicyOnFailure,
			ctrs:   []planCtr{sidecar(running("s1")), initC(exited("i", 0)), sidecar(running("s2")), fresh("a"), fresh("b")},
			want:   []ctrAction{start("a"), start("b")}, wantInit: true,
		},
		{
			name:   "sidecar exited during initialization, even with exit 0 and restartPolicy Never: back-off",
			policy: corev1.RestartPolicyNever,
			ctrs:   []planCtr{sidecar(exited("s", 0)), fresh("a")},
			want:   []ctrAction{back("s", 10*time.Second)},
		},
		{
			name:   "sidecar after its back-off during initialization: restarted",
			policy: corev1.RestartPolicyNever,
			ctrs:   []planCtr{sidecar(backingOff(restarts(exited("s", 2), 1), past)), fresh("a")},
			want:   []ctrAction{restart("s")},
		},
		{
			name:     "initialized Pod: sidecar and containers running, nothing to do",
			policy:   corev1.RestartPolicyAlways,
			initDone: true,
			ctrs:     []planCtr{sidecar(running("s")), running("a")},
			wantInit: true,
		},
		{
			name:     "initialized Pod: a sidecar that exited backs off (doubled after restarts) while the containers run on",
			policy:   corev1.RestartPolicyNever,
			initDone: true,
			ctrs:     []planCtr{sidecar(restarts(exited("s", 137), 2)), running("a")},
			want:     []ctrAction{back("s", 40*time.Second)}, wantInit: true,
		},
		{
			name:     "initialized Pod: a sidecar restarting does not hold back a container that is still to start",
			policy:   corev1.RestartPolicyAlways,
			initDone: true,
			ctrs:     []planCtr{sidecar(backingOff(exited("s", 1), future)), initC(exited("i", 0)), fresh("a")},
			want:     []ctrAction{start("a")}, wantInit: true,
		},
		{
			name:     "initialized Pod: the sidecar's back-off passed, restarted",
			policy:   corev1.RestartPolicyAlways,
			initDone: true,
			ctrs:     []planCtr{sidecar(backingOff(exited("s", 1), past)), running("a")},
			want:     []ctrAction{restart("s")}, wantInit: true,
		},
		{
			name:     "restartPolicy Never, the containers are done: the sidecars are stopped",
			policy:   corev1.RestartPolicyNever,
			initDone: true,
			ctrs:     []planCtr{sidecar(running("s1")), sidecar(running("s2")), exited("a", 0), exited("b", 1)},
			want:     []ctrAction{stop("s1"), stop("s2")}, wantInit: true,
		},
		{
			name:     "restartPolicy Never, the containers are done: an exited sidecar is not restarted",
			policy:   corev1.RestartPolicyNever,
			initDone: true,
			ctrs:     []planCtr{sidecar(exited("s", 143)), exited("a", 0)},
			wantInit: true,
		},
		{
			name:     "restartPolicy Never, one container still runs: the sidecar keeps running",
			policy:   corev1.RestartPolicyNever,
			initDone: true,
			ctrs:     []planCtr{sidecar(running("s")), exited("a", 0), running("b")},
			wantInit: true,
		},
		{
			name:     "restartPolicy OnFailure, a container failed: it restarts, the sidecar keeps running",
			policy:   corev1.RestartPolicyOnFailure,
			initDone: true,
			ctrs:     []planCtr{sidecar(running("s")), exited("a", 1)},
			want:     []ctrAction{back("a", 10*time.Second)}, wantInit: true,
		},
		{
			name:     "restartPolicy OnFailure, the containers completed: the sidecar is stopped",
			policy:   corev1.RestartPolicyOnFailure,
			initDone: true,
			ctrs:     []planCtr{sidecar(running("s")), exited("a", 0)},
			want:     []ctrAction{stop("s")}, wantInit: true,
		},
		{
			name:     "restartPolicy Always: an exited container backs off, the sidecar keeps running",
			policy:   corev1.RestartPolicyAlways,
			initDone: true,
			ctrs:     []planCtr{sidecar(running("s")), exited("a", 0)},
			want:     []ctrAction{back("a", 10*time.Second)}, wantInit: true,
		},
		{
			name:     "restartPolicy Never, an exited container is left as it is",
			policy:   corev1.RestartPolicyNever,
			initDone: true,
			ctrs:     []planCtr{exited("a", 1), running("b")},
			wantInit: true,
		},
		{
			name:     "a restarted container that runs again is left alone",
			policy:   corev1.RestartPolicyAlways,
			initDone: true,
			ctrs:     []planCtr{func() planCtr { c := running("a"); c.Terminated, c.ExitCode = true, 1; return c }()},
			wantInit: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planContainers(tc.policy, tc.initDone, tc.ctrs, now)
			if d := cmp.Diff(tc.want, got.Actions); d != "" {
				t.Errorf("actions (-want +got):\n%s", d)
			}
			if got.InitDone != tc.wantInit {
				t.Errorf("InitDone = %v, want %v", got.InitDone, tc.wantInit)
			}
		})
	}
}

// reconcileContainers applies the plan: once a restartPolicy Never Pod's container has exited, its
// running sidecar gets SIGTERM (once), and a sidecar that exited is left in its back-off, not started.
func TestReconcileStopsSidecarWhenDone(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	always := ptr.To(corev1.ContainerRestartPolicyAlways)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "e2e", UID: "u2"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "proxy", RestartPolicy: always}},
			Containers:     []corev1.Container{{Name: "main"}}},
	}
	a := &Agent{client: fake.NewClientset(pod), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := newPodWorker(a, pod)
	if !w.ctrs["proxy"].st.Sidecar || w.ctrs["main"].st.Sidecar {
		t.Fatalf("Sidecar flags: proxy %v main %v, want true false", w.ctrs["proxy"].st.Sidecar, w.ctrs["main"].st.Sidecar)
	}
	w.initDone = true
	proxy, main := w.ctrs["proxy"], w.ctrs["main"]
	proxy.cmd, proxy.st.Running, proxy.st.Started, proxy.st.Waiting = cmd, true, true, false
	main.st.Waiting, main.st.Terminated, main.st.ExitCode = false, true, 0

	ctx := context.Background()
	w.reconcileContainers(ctx, pod)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("sidecar ended with %v, want SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sidecar was not stopped after the Pod's container exited")
	}
	if proxy.stopAt.IsZero() {
		t.Error("stopAt not recorded")
	}

	// The sidecar has exited: nothing restarts it, nothing starts (w.start would need the lab).
	proxy.cmd, proxy.st.Running, proxy.st.Terminated, proxy.st.ExitCode = nil, false, true, 143
	w.reconcileContainers(ctx, pod)
	if proxy.st.Waiting || !proxy.nextStart.IsZero() || proxy.st.Restarts != 0 {
		t.Errorf("exited sidecar of a finished Pod: waiting %v (%s) nextStart %v restarts %d; want it left exited",
			proxy.st.Waiting, proxy.st.WaitReason, proxy.nextStart, proxy.st.Restarts)
	}

	// A running Pod (restartPolicy Always) whose sidecar exited: back-off, the container runs on.
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	main.st.Running = true
	w.reconcileContainers(ctx, pod)
	if !proxy.st.Waiting || proxy.st.WaitReason != "CrashLoopBackOff" || proxy.nextStart.IsZero() {
		t.Errorf("exited sidecar of a running Pod: waiting %v reason %q nextStart %v; want CrashLoopBackOff", proxy.st.Waiting, proxy.st.WaitReason, proxy.nextStart)
	}
}

func TestStopOrder(t *testing.T) {
	run := func(name string) planCtr { return planCtr{Name: name, Running: true} }
	side := func(name string) planCtr { return planCtr{Name: name, Init: true, Sidecar: true, Running: true} }
	for _, tt := range []struct {
		name            string
		ctrs            []planCtr
		first, sidecars []string
	}{
		{name: "no sidecars: all at once", ctrs: []planCtr{run("a"), run("b")}, first: []string{"a", "b"}},
		{name: "sidecars after the containers, the last declared first",
			ctrs:  []planCtr{side("s1"), side("s2"), run("a"), run("b")},
			first: []string{"a", "b"}, sidecars: []string{"s2", "s1"}},
		{name: "only what runs", ctrs: []planCtr{side("s1"), {Name: "s2", Init: true, Sidecar: true}, {Name: "a"}, run("b")},
			first: []string{"b"}, sidecars: []string{"s1"}},
		{name: "a regular init container still running goes first", ctrs: []planCtr{side("s"), {Name: "i", Init: true, Running: true}, {Name: "a"}},
			first: []string{"i"}, sidecars: []string{"s"}},
		{name: "only sidecars left", ctrs: []planCtr{side("s"), {Name: "a", Terminated: true}}, sidecars: []string{"s"}},
		{name: "nothing runs", ctrs: []planCtr{{Name: "a", Terminated: true}}},
	} {
		first, sidecars := stopOrder(tt.ctrs)
		if d := cmp.Diff(tt.first, first); d != "" {
			t.Errorf("%s: first (-want +got):\n%s", tt.name, d)
		}
		if d := cmp.Diff(tt.sidecars, sidecars); d != "" {
			t.Errorf("%s: sidecars (-want +got):\n%s", tt.name, d)
		}
	}
}
