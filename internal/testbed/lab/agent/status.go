package agent

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ctrState is what the agent knows of one container, in plain data.
type ctrState struct {
	Name, Image, ContainerID string
	ImageID                  string // the image's repo digest (runc runtime); "" reports Image
	Init                     bool
	Sidecar                  bool // an init container with restartPolicy Always: it keeps running (KEP-753)
	Waiting                  bool // not running: never started, backing off, or failed to start
	WaitReason, WaitMessage  string
	Running                  bool
	StartedAt                time.Time
	Terminated               bool // last run ended (also set while waiting to restart)
	ExitCode                 int32
	TermReason               string
	FinishedAt               time.Time
	LastStartedAt            time.Time
	Restarts                 int32
	Ready                    bool
	Started                  bool // startup probe passed (or none)
}

// podState is the agent's view of a Pod, in plain data.
type podState struct {
	Sandbox       bool   // network ready (namespace and addresses)
	SandboxReason string // why not
	InitDone      bool
	Containers    []ctrState
	StartTime     time.Time
	HostIPs       []string
	PodIPs        []string
	RestartPolicy corev1.RestartPolicy
}

// BuildStatus turns the agent's view into a PodStatus, keeping the conditions others own (PodScheduled,
// readiness gates, disruption) from old.
func BuildStatus(old corev1.PodStatus, readinessGates []corev1.PodReadinessGate, s podState, now time.Time) corev1.PodStatus {
	st := corev1.PodStatus{QOSClass: old.QOSClass, NominatedNodeName: old.NominatedNodeName}
	if !s.StartTime.IsZero() {
		st.StartTime = &metav1.Time{Time: s.StartTime}
	}
	for _, ip := range s.HostIPs {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
	}
	if len(s.HostIPs) > 0 {
		st.HostIP = s.HostIPs[0]
	}
	for _, ip := range s.PodIPs {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(s.PodIPs) > 0 {
		st.PodIP = s.PodIPs[0]
	}
	allReady, allStarted, anyRunning, anyRestarting, allTerminated, anyFailed := true, true, false, false, true, false
	regular := 0
	for _, c := range s.Containers {
		imageID := c.Image
		if c.ImageID != "" {
			imageID = c.ImageID
		}
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: imageID, ContainerID: c.ContainerID,
			RestartCount: c.Restarts, Ready: c.Ready, Started: &c.Started}
		switch {
		case c.Running:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: c.StartedAt}}
		case c.Waiting:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.WaitReason, Message: c.WaitMessage}
		case c.Terminated:
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.ExitCode, Reason: c.TermReason,
				StartedAt: metav1.Time{Time: c.LastStartedAt}, FinishedAt: metav1.Time{Time: c.FinishedAt}, ContainerID: c.ContainerID}
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if c.Terminated && (c.Running || c.Waiting) {
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.ExitCode, Reason: c.TermReason,
				StartedAt: metav1.Time{Time: c.LastStartedAt}, FinishedAt: metav1.Time{Time: c.FinishedAt}, ContainerID: c.ContainerID}
		}
		if c.Init {
			st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
			if c.Sidecar { // a sidecar's readiness counts in the Pod's, as in the kubelet
				allReady = allReady && c.Ready && c.Running
			}
			continue
		}
		regular++
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		allReady = allReady && c.Ready && c.Running
		allStarted = allStarted && (c.Running || c.Terminated)
		anyRunning = anyRunning || c.Running
		anyRestarting = anyRestarting || c.Waiting && c.WaitReason == "CrashLoopBackOff"
		done := c.Terminated && !c.Running && !(c.Waiting && c.WaitReason == "CrashLoopBackOff")
		allTerminated = allTerminated && done
		anyFailed = anyFailed || (c.Terminated && c.ExitCode != 0)
	}
	switch {
	case regular > 0 && allTerminated && s.RestartPolicy != corev1.RestartPolicyAlways && (s.RestartPolicy == corev1.RestartPolicyNever || !anyFailed):
		if anyFailed {
			st.Phase = corev1.PodFailed
		} else {
			st.Phase = corev1.PodSucceeded
		}
	case s.InitDone && allStarted && (anyRunning || anyRestarting || regular > 0 && allTerminated):
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	gatesOK := true
	for _, g := range readinessGates {
		ok := false
		for _, c := range old.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok = true
			}
		}
		gatesOK = gatesOK && ok
	}
	ready := allReady && regular > 0 && s.InitDone && st.Phase == corev1.PodRunning
	cond := func(t corev1.PodConditionType, ok bool, reason string) {
		status := corev1.ConditionFalse
		if ok {
			status, reason = corev1.ConditionTrue, ""
		}
		c := corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.Time{Time: now}}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		st.Conditions = append(st.Conditions, c)
	}
	cond(corev1.PodReadyToStartContainers, s.Sandbox, s.SandboxReason)
	cond(corev1.PodInitialized, s.InitDone, "ContainersNotInitialized")
	cond(corev1.ContainersReady, ready, "ContainersNotReady")
	readyReason := "ContainersNotReady"
	if ready && !gatesOK {
		readyReason = "ReadinessGatesNotReady"
	}
	cond(corev1.PodReady, ready && gatesOK, readyReason)
	for _, o := range old.Conditions { // conditions owned by others
		switch o.Type {
		case corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady:
		default:
			st.Conditions = append(st.Conditions, o)
		}
	}
	return st
}
