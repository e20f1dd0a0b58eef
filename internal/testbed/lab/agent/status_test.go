package agent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	tOld = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC) // when old conditions last changed
	t0   = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	tNow = time.Date(2025, 3, 1, 10, 5, 0, 0, time.UTC) // BuildStatus's now
)

func mt(t time.Time) metav1.Time { return metav1.Time{Time: t} }

func scheduled() corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: mt(tOld)}
}

func runningCtr(name string) ctrState {
	return ctrState{Name: name, Image: "traefik/whoami:v1.10", ContainerID: "ironlb://" + name, Running: true, StartedAt: t0, Ready: true, Started: true}
}

func TestBuildStatusRunningGolden(t *testing.T) {
	old := corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort, Conditions: []corev1.PodCondition{scheduled()}}
	s := podState{
		Sandbox: true, InitDone: true, StartTime: t0, RestartPolicy: corev1.RestartPolicyAlways,
		HostIPs: []string{"172.18.0.3"}, PodIPs: []string{"10.10.1.2"},
		Containers: []ctrState{runningCtr("whoami")},
	}
	started := true
	want := corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: mt(tNow)},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: mt(tNow)},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: mt(tNow)},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: mt(tNow)},
			scheduled(),
		},
		HostIP:    "172.18.0.3",
		HostIPs:   []corev1.HostIP{{IP: "172.18.0.3"}},
		PodIP:     "10.10.1.2",
		PodIPs:    []corev1.PodIP{{IP: "10.10.1.2"}},
		StartTime: &metav1.Time{Time: t0},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:        "whoami",
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: mt(t0)}},
			Ready:       true,
			Image:       "traefik/whoami:v1.10",
			ImageID:     "traefik/whoami:v1.10",
			ContainerID: "ironlb://whoami",
			Started:     &started,
		}},
		QOSClass: corev1.PodQOSBestEffort,
	}
	got := BuildStatus(old, nil, s, tNow)
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Errorf("BuildStatus mismatch (-want +got):\n%s", d)
	}
}

// condSummary is a condition without its times.
type condSummary struct {
	Type   corev1.PodConditionType
	Status corev1.ConditionStatus
	Reason string
}

func summarize(cs []corev1.PodCondition) []condSummary {
	var out []condSummary
	for _, c := range cs {
		out = append(out, condSummary{c.Type, c.Status, c.Reason})
	}
	return out
}

// kubeletConds lists the four kubelet-owned conditions in BuildStatus's order.
func kubeletConds(sandbox, initialized, containersReady, ready condSummary) []condSummary {
	sandbox.Type, initialized.Type = corev1.PodReadyToStartContainers, corev1.PodInitialized
	containersReady.Type, ready.Type = corev1.ContainersReady, corev1.PodReady
	return []condSummary{sandbox, initialized, containersReady, ready}
}

var (
	condTrue             = condSummary{Status: corev1.ConditionTrue}
	notInitialized       = condSummary{Status: corev1.ConditionFalse, Reason: "ContainersNotInitialized"}
	containersNotReady   = condSummary{Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}
	gatesNotReady        = condSummary{Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady"}
	scheduledSummary     = condSummary{corev1.PodScheduled, corev1.ConditionTrue, ""}
	allTrue              = kubeletConds(condTrue, condTrue, condTrue, condTrue)
	runningButNotReady   = kubeletConds(condTrue, condTrue, containersNotReady, containersNotReady)
	withScheduled        = func(cs []condSummary) []condSummary { return append(cs, scheduledSummary) }
	oldWithScheduledOnly = corev1.PodStatus{Conditions: []corev1.PodCondition{scheduled()}}
)

func TestBuildStatus(t *testing.T) {
	gate := []corev1.PodReadinessGate{{ConditionType: "example.com/lb-ready"}}
	tests := []struct {
		name      string
		old       corev1.PodStatus
		gates     []corev1.PodReadinessGate
		s         podState
		wantPhase corev1.PodPhase
		wantConds []condSummary
		check     func(t *testing.T, st corev1.PodStatus)
		bug       string
	}{
		{
			name: "all running and ready, dual-stack",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, StartTime: t0, RestartPolicy: corev1.RestartPolicyAlways,
				HostIPs: []string{"172.18.0.4", "fc00:f853:ccd:e793::4"}, PodIPs: []string{"10.10.2.5", "fd00:10:10:2::5"},
				Containers: []ctrState{runningCtr("a"), runningCtr("b")}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(allTrue),
			check: func(t *testing.T, st corev1.PodStatus) {
				if st.PodIP != "10.10.2.5" || len(st.PodIPs) != 2 || st.PodIPs[1].IP != "fd00:10:10:2::5" {
					t.Errorf("PodIP %q PodIPs %v", st.PodIP, st.PodIPs)
				}
				if st.HostIP != "172.18.0.4" || len(st.HostIPs) != 2 || st.HostIPs[1].IP != "fc00:f853:ccd:e793::4" {
					t.Errorf("HostIP %q HostIPs %v", st.HostIP, st.HostIPs)
				}
				if len(st.ContainerStatuses) != 2 || !st.ContainerStatuses[0].Ready || !st.ContainerStatuses[1].Ready {
					t.Errorf("ContainerStatuses = %+v", st.ContainerStatuses)
				}
			},
		},
		{
			name: "running, one container not ready",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{runningCtr("a"), func() ctrState { c := runningCtr("b"); c.Ready = false; return c }()}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(runningButNotReady),
		},
		{
			name: "image pull error",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, StartTime: t0, RestartPolicy: corev1.RestartPolicyAlways,
				PodIPs: []string{"10.10.1.7"},
				Containers: []ctrState{{Name: "web", Image: "nginx:1.27", Waiting: true, WaitReason: "ErrImagePull",
					WaitMessage: `image is not available in the lab: "nginx:1.27"`}}},
			wantPhase: corev1.PodPending,
			wantConds: withScheduled(kubeletConds(condTrue, condTrue, containersNotReady, containersNotReady)),
			check: func(t *testing.T, st corev1.PodStatus) {
				w := st.ContainerStatuses[0].State.Waiting
				if w == nil || w.Reason != "ErrImagePull" || w.Message != `image is not available in the lab: "nginx:1.27"` {
					t.Errorf("waiting state = %+v, want ErrImagePull with the message", w)
				}
				if st.ContainerStatuses[0].Ready || st.ContainerStatuses[0].State.Running != nil {
					t.Errorf("container status = %+v", st.ContainerStatuses[0])
				}
			},
		},
		{
			name: "sandbox not ready yet",
			s: podState{SandboxReason: "network not ready", RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{{Name: "web", Image: "traefik/whoami"}}},
			wantPhase: corev1.PodPending,
			wantConds: kubeletConds(condSummary{Status: corev1.ConditionFalse, Reason: "network not ready"}, notInitialized, containersNotReady, containersNotReady),
			check: func(t *testing.T, st corev1.PodStatus) {
				if w := st.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
					t.Errorf("waiting state = %+v, want ContainerCreating", w)
				}
				if st.StartTime != nil || st.PodIP != "" || st.PodIPs != nil || st.HostIP != "" {
					t.Errorf("StartTime/PodIP/HostIP set before the sandbox: %v %q %v %q", st.StartTime, st.PodIP, st.PodIPs, st.HostIP)
				}
			},
		},
		{
			name: "init container running",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{
					func() ctrState { c := runningCtr("init"); c.Init, c.Ready = true, false; return c }(),
					{Name: "web", Image: "traefik/whoami", Waiting: true, WaitReason: "PodInitializing"},
				}},
			wantPhase: corev1.PodPending,
			wantConds: withScheduled(kubeletConds(condTrue, notInitialized, containersNotReady, containersNotReady)),
			check: func(t *testing.T, st corev1.PodStatus) {
				if len(st.InitContainerStatuses) != 1 || st.InitContainerStatuses[0].Name != "init" || st.InitContainerStatuses[0].State.Running == nil {
					t.Errorf("InitContainerStatuses = %+v", st.InitContainerStatuses)
				}
				if len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].State.Waiting.Reason != "PodInitializing" {
					t.Errorf("ContainerStatuses = %+v", st.ContainerStatuses)
				}
			},
		},
		{
			name: "sidecar (restartable init container) running and ready beside the container: Pod ready",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{
					func() ctrState { c := runningCtr("sidecar"); c.Init, c.Sidecar = true, true; return c }(),
					runningCtr("web"),
				}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(allTrue),
			check: func(t *testing.T, st corev1.PodStatus) {
				if len(st.InitContainerStatuses) != 1 || st.InitContainerStatuses[0].State.Running == nil || !st.InitContainerStatuses[0].Ready {
					t.Errorf("InitContainerStatuses = %+v, want the sidecar running and ready", st.InitContainerStatuses)
				}
			},
		},
		{
			name: "sidecar running but not ready (readiness probe failing): Pod not ready",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{
					func() ctrState { c := runningCtr("sidecar"); c.Init, c.Sidecar, c.Ready = true, true, false; return c }(),
					runningCtr("web"),
				}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(runningButNotReady),
		},
		{
			name: "sidecar restarting after the Pod was initialized: Pod running, not ready",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{
					{Name: "sidecar", Init: true, Sidecar: true, Terminated: true, ExitCode: 1, TermReason: "Error",
						Waiting: true, WaitReason: "CrashLoopBackOff", Restarts: 1},
					runningCtr("web"),
				}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(runningButNotReady),
		},
		{
			name: "completed (non-restartable) init container does not count in readiness",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{
					{Name: "init", Init: true, Terminated: true, ExitCode: 0, TermReason: "Completed"},
					runningCtr("web"),
				}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(allTrue),
		},
		{
			name: "restartPolicy Never, all exited 0",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []ctrState{
					{Name: "a", Terminated: true, ExitCode: 0, TermReason: "Completed", LastStartedAt: t0, FinishedAt: tNow},
					{Name: "b", Terminated: true, ExitCode: 0, TermReason: "Completed", LastStartedAt: t0, FinishedAt: tNow},
				}},
			wantPhase: corev1.PodSucceeded,
			wantConds: withScheduled(kubeletConds(condTrue, condTrue, containersNotReady, containersNotReady)),
			check: func(t *testing.T, st corev1.PodStatus) {
				term := st.ContainerStatuses[0].State.Terminated
				if term == nil || term.ExitCode != 0 || term.Reason != "Completed" || !term.StartedAt.Equal(&metav1.Time{Time: t0}) || !term.FinishedAt.Equal(&metav1.Time{Time: tNow}) {
					t.Errorf("terminated state = %+v", term)
				}
				if st.ContainerStatuses[0].LastTerminationState.Terminated != nil {
					t.Errorf("LastTerminationState set for a container that ran once")
				}
			},
		},
		{
			name: "restartPolicy Never, one exited 1",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []ctrState{
					{Name: "a", Terminated: true, ExitCode: 0, TermReason: "Completed"},
					{Name: "b", Terminated: true, ExitCode: 1, TermReason: "Error"},
				}},
			wantPhase: corev1.PodFailed,
			wantConds: withScheduled(kubeletConds(condTrue, condTrue, containersNotReady, containersNotReady)),
		},
		{
			name: "restartPolicy Never, one exited 1 while another runs",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []ctrState{runningCtr("a"), {Name: "b", Terminated: true, ExitCode: 1, TermReason: "Error"}}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(runningButNotReady),
		},
		{
			name: "restartPolicy OnFailure, all exited 0",
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyOnFailure,
				Containers: []ctrState{{Name: "a", Terminated: true, ExitCode: 0, TermReason: "Completed"}}},
			wantPhase: corev1.PodSucceeded,
			wantConds: kubeletConds(condTrue, condTrue, containersNotReady, containersNotReady),
		},
		{
			name: "restartPolicy Always, restarted container running again",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{func() ctrState {
					c := runningCtr("a")
					c.Terminated, c.ExitCode, c.TermReason, c.LastStartedAt, c.FinishedAt, c.Restarts = true, 2, "Error", tOld, t0, 1
					return c
				}()}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(allTrue),
			check: func(t *testing.T, st corev1.PodStatus) {
				cs := st.ContainerStatuses[0]
				if cs.State.Running == nil || cs.RestartCount != 1 {
					t.Errorf("state %+v restarts %d", cs.State, cs.RestartCount)
				}
				if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 2 || lt.Reason != "Error" {
					t.Errorf("LastTerminationState = %+v, want exit 2 Error", cs.LastTerminationState)
				}
			},
		},
		{
			// kubelet's getPhase counts a waiting container with a last termination as stopped, and a pod whose
			// containers are all stopped with restartPolicy Always is Running ("in the process of restarting").
			name: "restartPolicy Always, only container in CrashLoopBackOff",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{{Name: "a", Waiting: true, WaitReason: "CrashLoopBackOff", WaitMessage: "back-off 10s",
					Terminated: true, ExitCode: 1, TermReason: "Error", Restarts: 3}}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(runningButNotReady),
			check: func(t *testing.T, st corev1.PodStatus) {
				cs := st.ContainerStatuses[0]
				if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.LastTerminationState.Terminated == nil {
					t.Errorf("container status = %+v", cs)
				}
			},
			bug: "status.go:88 (done excludes CrashLoopBackOff) and status.go:99 leave a pod whose only container crash-loops in Pending; kubelet's getPhase says Running",
		},
		{
			name: "restartPolicy OnFailure, only container in CrashLoopBackOff",
			old:  oldWithScheduledOnly,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyOnFailure,
				Containers: []ctrState{{Name: "a", Waiting: true, WaitReason: "CrashLoopBackOff",
					Terminated: true, ExitCode: 1, TermReason: "Error", Restarts: 1}}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(runningButNotReady),
			bug:       "status.go:88/99: kubelet's getPhase says Running for OnFailure with a failed container that will restart",
		},
		{
			name:  "readiness gate missing",
			old:   oldWithScheduledOnly,
			gates: gate,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{runningCtr("a")}},
			wantPhase: corev1.PodRunning,
			wantConds: withScheduled(kubeletConds(condTrue, condTrue, condTrue, gatesNotReady)),
		},
		{
			name: "readiness gate False",
			old: corev1.PodStatus{Conditions: []corev1.PodCondition{scheduled(),
				{Type: "example.com/lb-ready", Status: corev1.ConditionFalse, LastTransitionTime: mt(tOld)}}},
			gates: gate,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{runningCtr("a")}},
			wantPhase: corev1.PodRunning,
			wantConds: append(withScheduled(kubeletConds(condTrue, condTrue, condTrue, gatesNotReady)),
				condSummary{"example.com/lb-ready", corev1.ConditionFalse, ""}),
		},
		{
			name: "readiness gate True",
			old: corev1.PodStatus{Conditions: []corev1.PodCondition{scheduled(),
				{Type: "example.com/lb-ready", Status: corev1.ConditionTrue, LastTransitionTime: mt(tOld)}}},
			gates: gate,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{runningCtr("a")}},
			wantPhase: corev1.PodRunning,
			wantConds: append(withScheduled(allTrue), condSummary{"example.com/lb-ready", corev1.ConditionTrue, ""}),
		},
		{
			name: "readiness gate does not hide unready containers",
			old: corev1.PodStatus{Conditions: []corev1.PodCondition{
				{Type: "example.com/lb-ready", Status: corev1.ConditionFalse}}},
			gates: gate,
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{func() ctrState { c := runningCtr("a"); c.Ready = false; return c }()}},
			wantPhase: corev1.PodRunning,
			wantConds: append(runningButNotReady, condSummary{"example.com/lb-ready", corev1.ConditionFalse, ""}),
		},
		{
			name: "other owners' conditions kept, stale kubelet ones replaced",
			old: corev1.PodStatus{Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "stale"},
				scheduled(),
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"},
			}},
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{runningCtr("a")}},
			wantPhase: corev1.PodRunning,
			wantConds: append(withScheduled(allTrue), condSummary{corev1.DisruptionTarget, corev1.ConditionTrue, "EvictionByEvictionAPI"}),
		},
		{
			name: "QOS class and nominated node kept",
			old:  corev1.PodStatus{QOSClass: corev1.PodQOSGuaranteed, NominatedNodeName: "myk8s-worker2", Reason: "old", Message: "old"},
			s: podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways,
				Containers: []ctrState{runningCtr("a")}},
			wantPhase: corev1.PodRunning,
			wantConds: allTrue,
			check: func(t *testing.T, st corev1.PodStatus) {
				if st.QOSClass != corev1.PodQOSGuaranteed || st.NominatedNodeName != "myk8s-worker2" {
					t.Errorf("QOSClass %q NominatedNodeName %q", st.QOSClass, st.NominatedNodeName)
				}
			},
		},
		{
			name:      "no containers",
			s:         podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyNever},
			wantPhase: corev1.PodPending,
			wantConds: kubeletConds(condTrue, condTrue, containersNotReady, containersNotReady),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := BuildStatus(tt.old, tt.gates, tt.s, tNow)
			var problems []string
			if st.Phase != tt.wantPhase {
				problems = append(problems, "Phase = "+string(st.Phase)+", want "+string(tt.wantPhase))
			}
			if d := cmp.Diff(tt.wantConds, summarize(st.Conditions), cmpOpts); d != "" {
				problems = append(problems, "conditions mismatch (-want +got):\n"+d)
			}
			if len(problems) > 0 {
				if tt.bug != "" {
					t.Skipf("BUG: %s: %q", tt.bug, problems)
				}
				for _, p := range problems {
					t.Error(p)
				}
			}
			if tt.check != nil {
				tt.check(t, st)
			}
		})
	}
}

func TestBuildStatusLastTransitionTime(t *testing.T) {
	s := podState{Sandbox: true, InitDone: true, RestartPolicy: corev1.RestartPolicyAlways, Containers: []ctrState{runningCtr("a")}}
	old := corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: mt(tOld)},        // unchanged
		{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, LastTransitionTime: mt(tOld)},                  // becomes True
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: mt(tOld.Add(time.Minute))}, // unchanged
		// PodReady absent: new
		scheduled(),
	}}
	got := map[corev1.PodConditionType]time.Time{}
	for _, c := range BuildStatus(old, nil, s, tNow).Conditions {
		got[c.Type] = c.LastTransitionTime.Time
	}
	want := map[corev1.PodConditionType]time.Time{
		corev1.PodReadyToStartContainers: tOld,
		corev1.PodInitialized:            tNow,
		corev1.ContainersReady:           tOld.Add(time.Minute),
		corev1.PodReady:                  tNow,
		corev1.PodScheduled:              tOld,
	}
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Errorf("LastTransitionTime mismatch (-want +got):\n%s", d)
	}

	// Going from Ready True to False is a transition too.
	s.Containers[0].Ready = false
	old2 := corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: mt(tOld)},
	}}
	for _, c := range BuildStatus(old2, nil, s, tNow).Conditions {
		if c.Type == corev1.PodReady && (!c.LastTransitionTime.Time.Equal(tNow) || c.Status != corev1.ConditionFalse) {
			t.Errorf("Ready after becoming unready = %s at %v, want False at %v", c.Status, c.LastTransitionTime, tNow)
		}
	}
}

// TestBuildStatusStartedPointers checks each container status gets its own Started value.
func TestBuildStatusStartedPointers(t *testing.T) {
	a, b := runningCtr("a"), runningCtr("b")
	b.Started, b.Ready = false, false
	st := BuildStatus(corev1.PodStatus{}, nil, podState{Sandbox: true, InitDone: true, Containers: []ctrState{a, b}}, tNow)
	if got := [2]bool{*st.ContainerStatuses[0].Started, *st.ContainerStatuses[1].Started}; got != [2]bool{true, false} {
		t.Errorf("Started = %v, want [true false]", got)
	}
}
