package lab

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TargetGroup is one entry of Prometheus' HTTP service discovery answer.
type TargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// PodTargets gives the targets Prometheus' kubernetes_sd_configs (role: pod) would find for these pods:
// one per container port, with the same __meta_kubernetes_* labels, so that relabelings written for it
// (the Prometheus Operator's and config/prometheus's) work unchanged. Pods without an IP are left out.
// It does no I/O.
func PodTargets(pods []corev1.Pod) []TargetGroup {
	out := []TargetGroup{}
	for _, p := range pods {
		if p.Status.PodIP == "" {
			continue
		}
		ready := "false"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = "true"
			}
		}
		base := map[string]string{
			"__meta_kubernetes_namespace":     p.Namespace,
			"__meta_kubernetes_pod_name":      p.Name,
			"__meta_kubernetes_pod_ip":        p.Status.PodIP,
			"__meta_kubernetes_pod_node_name": p.Spec.NodeName,
			"__meta_kubernetes_pod_host_ip":   p.Status.HostIP,
			"__meta_kubernetes_pod_uid":       string(p.UID),
			"__meta_kubernetes_pod_phase":     string(p.Status.Phase),
			"__meta_kubernetes_pod_ready":     ready,
		}
		for k, v := range p.Labels {
			l := labelNameChars.ReplaceAllString(k, "_")
			base["__meta_kubernetes_pod_label_"+l] = v
			base["__meta_kubernetes_pod_labelpresent_"+l] = "true"
		}
		for k, v := range p.Annotations {
			l := labelNameChars.ReplaceAllString(k, "_")
			base["__meta_kubernetes_pod_annotation_"+l] = v
			base["__meta_kubernetes_pod_annotationpresent_"+l] = "true"
		}
		if ref := metav1.GetControllerOf(&p); ref != nil {
			base["__meta_kubernetes_pod_controller_kind"] = ref.Kind
			base["__meta_kubernetes_pod_controller_name"] = ref.Name
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				labels := make(map[string]string, len(base)+6)
				for k, v := range base {
					labels[k] = v
				}
				labels["__meta_kubernetes_pod_container_name"] = c.Name
				labels["__meta_kubernetes_pod_container_image"] = c.Image
				labels["__meta_kubernetes_pod_container_init"] = "false"
				labels["__meta_kubernetes_pod_container_port_name"] = port.Name
				labels["__meta_kubernetes_pod_container_port_number"] = strconv.Itoa(int(port.ContainerPort))
				labels["__meta_kubernetes_pod_container_port_protocol"] = string(port.Protocol)
				addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))
				out = append(out, TargetGroup{Targets: []string{addr}, Labels: labels})
			}
		}
	}
	return out
}

// PodSDHandler serves Prometheus' HTTP service discovery for pods: GET ?namespace=NS (repeatable)
// lists the pods of those namespaces (all when none is named) and answers PodTargets.
func PodSDHandler(cs kubernetes.Interface, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		namespaces := r.URL.Query()["namespace"]
		if len(namespaces) == 0 {
			namespaces = []string{metav1.NamespaceAll}
		}
		var pods []corev1.Pod
		for _, ns := range namespaces {
			l, err := cs.CoreV1().Pods(ns).List(r.Context(), metav1.ListOptions{})
			if err != nil {
				log.Error("listing pods", "namespace", ns, "err", err)
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			pods = append(pods, l.Items...)
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(PodTargets(pods)); err != nil {
			log.Error("answering discovery", "namespaces", strings.Join(namespaces, ","), "err", err)
		}
	})
}
