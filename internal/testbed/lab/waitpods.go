package lab

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PodsNotReady describes the Pods of pods that are not Ready, one line each (sorted by name): the
// node, the phase, and for each container that is not ready what it waits on (reason: message), or
// how its last run ended. A wait of lab up that times out adds it to its error, so that the cause (a
// RunContainerError with runc's message, an ErrImagePull, a crash loop) is on the screen instead of
// a count of ready replicas. "" when every Pod is Ready.
func PodsNotReady(pods []corev1.Pod) string {
	var lines []string
	for _, p := range pods {
		if podReady(p) {
			continue
		}
		node := p.Spec.NodeName
		if node == "" {
			node = "unscheduled"
		}
		var parts []string
		for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if cs.Ready {
				continue
			}
			switch {
			case cs.State.Waiting != nil:
				s := fmt.Sprintf("%s waiting: %s", cs.Name, cs.State.Waiting.Reason)
				if m := cs.State.Waiting.Message; m != "" {
					s += ": " + m
				}
				if t := cs.LastTerminationState.Terminated; t != nil {
					s += fmt.Sprintf(" (last run: exit %d %s, %d restarts)", t.ExitCode, t.Reason, cs.RestartCount)
				}
				parts = append(parts, s)
			case cs.State.Terminated != nil:
				t := cs.State.Terminated
				s := fmt.Sprintf("%s terminated: exit %d %s", cs.Name, t.ExitCode, t.Reason)
				if t.Message != "" {
					s += ": " + t.Message
				}
				parts = append(parts, s)
			case cs.State.Running != nil:
				parts = append(parts, cs.Name+" running, not ready")
			}
		}
		if len(parts) == 0 {
			for _, c := range p.Status.Conditions {
				if c.Status != corev1.ConditionTrue && c.Message != "" {
					parts = append(parts, fmt.Sprintf("%s: %s", c.Type, c.Message))
				}
			}
		}
		if len(parts) == 0 {
			parts = append(parts, "no container status yet")
		}
		lines = append(lines, fmt.Sprintf("pod %s/%s on %s (%s): %s", p.Namespace, p.Name, node, p.Status.Phase, strings.Join(parts, "; ")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// withPodsNotReady adds PodsNotReady of the Pods matching selector in ns to err (a wait's timeout).
func withPodsNotReady(ctx context.Context, cs kubernetes.Interface, ns string, selector *metav1.LabelSelector, err error) error {
	if selector == nil || ctx.Err() != nil {
		return err
	}
	sel, serr := metav1.LabelSelectorAsSelector(selector)
	if serr != nil {
		return err
	}
	pods, lerr := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if lerr != nil {
		return fmt.Errorf("%w (listing its pods: %v)", err, lerr)
	}
	if s := PodsNotReady(pods.Items); s != "" {
		return fmt.Errorf("%w; not ready:\n%s", err, s)
	}
	return err
}
