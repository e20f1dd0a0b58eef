package lab

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodsNotReady(t *testing.T) {
	pod := func(name, node string, ready bool, statuses ...corev1.ContainerStatus) corev1.Pod {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}, ContainerStatuses: statuses}}
	}
	waiting := func(reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "kube-proxy", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	crash := waiting("CrashLoopBackOff", "back-off 10s restarting failed container")
	crash.RestartCount = 3
	crash.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	unscheduled := pod("p", "", false)
	unscheduled.Status.Conditions = append(unscheduled.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/4 nodes are available"})
	tests := []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"every pod ready: nothing", []corev1.Pod{pod("a", "n1", true, corev1.ContainerStatus{Name: "c", Ready: true})}, ""},
		{"runc's refusal, sorted by pod",
			[]corev1.Pod{
				pod("kube-proxy-b", "n2", false, waiting("RunContainerError", "runc run: exited: unable to apply caps: operation not permitted")),
				pod("kube-proxy-a", "n1", false, waiting("ErrImagePull", "MANIFEST_UNKNOWN")),
				pod("kube-proxy-c", "n3", true, corev1.ContainerStatus{Name: "kube-proxy", Ready: true}),
			},
			"pod kube-system/kube-proxy-a on n1 (Pending): kube-proxy waiting: ErrImagePull: MANIFEST_UNKNOWN\n" +
				"pod kube-system/kube-proxy-b on n2 (Pending): kube-proxy waiting: RunContainerError: runc run: exited: unable to apply caps: operation not permitted"},
		{"a crash loop shows the last run",
			[]corev1.Pod{pod("k", "n1", false, crash)},
			"pod kube-system/k on n1 (Pending): kube-proxy waiting: CrashLoopBackOff: back-off 10s restarting failed container (last run: exit 1 Error, 3 restarts)"},
		{"terminated and running-not-ready",
			[]corev1.Pod{pod("k", "n1", false,
				corev1.ContainerStatus{Name: "a", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", Message: "boom"}}},
				corev1.ContainerStatus{Name: "b", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})},
			"pod kube-system/k on n1 (Pending): a terminated: exit 2 Error: boom; b running, not ready"},
		{"not scheduled: the conditions' messages", []corev1.Pod{unscheduled},
			"pod kube-system/p on unscheduled (Pending): PodScheduled: 0/4 nodes are available"},
		{"no status at all", []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: "n"}}},
			"pod ns/x on n (): no container status yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PodsNotReady(tt.pods); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
