package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// prepareVolumes materialises every volume of the Pod on the host: emptyDir, configMap, secret,
// downwardAPI and projected (service-account token by TokenRequest, kube-root-ca.crt, namespace) as
// directories under the Pod's state directory, hostPath as the host path itself.
func (w *podWorker) prepareVolumes(ctx context.Context, pod *corev1.Pod) (map[string]volume, error) {
	out := map[string]volume{}
	base := filepath.Join(w.a.lab.State.PodDir(string(w.uid)), "volumes")
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(base, v.Name)
		var refresh func(context.Context) error
		switch {
		case v.HostPath != nil:
			p := v.HostPath.Path
			t := corev1.HostPathUnset
			if v.HostPath.Type != nil {
				t = *v.HostPath.Type
			}
			st, err := os.Stat(p)
			switch t {
			case corev1.HostPathDirectoryOrCreate, corev1.HostPathUnset:
				if err != nil {
					if err := w.a.lab.State.EnsurePath(p, true); err != nil {
						return nil, fmt.Errorf("volume %s: hostPath %s: %w", v.Name, p, err)
					}
				}
			case corev1.HostPathFileOrCreate:
				if err != nil {
					if err := w.a.lab.State.EnsurePath(p, false); err != nil {
						return nil, fmt.Errorf("volume %s: hostPath %s: %w", v.Name, p, err)
					}
				}
			case corev1.HostPathDirectory:
				if err != nil || !st.IsDir() {
					return nil, fmt.Errorf("volume %s: hostPath type check failed: %s is not a directory", v.Name, p)
				}
			case corev1.HostPathFile:
				if err != nil || st.IsDir() {
					return nil, fmt.Errorf("volume %s: hostPath type check failed: %s is not a file", v.Name, p)
				}
			default:
				if err != nil {
					return nil, fmt.Errorf("volume %s: hostPath %s: %w", v.Name, p, err)
				}
			}
			st, _ = os.Stat(p)
			out[v.Name] = volume{path: p, isFile: st != nil && !st.IsDir()}
			continue
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			cm := v.ConfigMap
			refresh = func(ctx context.Context) error {
				files, err := w.configMapFiles(ctx, pod.Namespace, cm.Name, cm.Items, ptrBool(cm.Optional))
				if err != nil {
					return err
				}
				return writeFiles(dir, files, mode(cm.DefaultMode, 0o644))
			}
		case v.Secret != nil:
			sec := v.Secret
			refresh = func(ctx context.Context) error {
				files, err := w.secretFiles(ctx, pod.Namespace, sec.SecretName, sec.Items, ptrBool(sec.Optional))
				if err != nil {
					return err
				}
				return writeFiles(dir, files, mode(sec.DefaultMode, 0o644))
			}
		case v.DownwardAPI != nil:
			items := v.DownwardAPI.Items
			refresh = func(context.Context) error {
				files, err := w.downwardFiles(pod, items)
				if err != nil {
					return err
				}
				return writeFiles(dir, files, mode(v.DownwardAPI.DefaultMode, 0o644))
			}
		case v.Projected != nil:
			proj := v.Projected
			refresh = func(ctx context.Context) error {
				files := map[string][]byte{}
				for _, src := range proj.Sources {
					var part map[string][]byte
					var err error
					switch {
					case src.ServiceAccountToken != nil:
						t := src.ServiceAccountToken
						key := v.Name + "/" + t.Path
						cached, ok := w.tokens[key]
						if !ok || !time.Now().Before(cached.refreshAt) {
							secs := int64(3607)
							if t.ExpirationSeconds != nil {
								secs = *t.ExpirationSeconds
							}
							tok, exp, terr := w.a.tokenRequest(ctx, pod, t.Audience, secs)
							if terr != nil {
								return terr
							}
							// Refresh at 80% of the lifetime, as the kubelet does.
							cached = token{value: []byte(tok), refreshAt: time.Now().Add(time.Until(exp) * 8 / 10)}
							w.tokens[key] = cached
						}
						part = map[string][]byte{t.Path: cached.value}
					case src.ConfigMap != nil:
						part, err = w.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, ptrBool(src.ConfigMap.Optional))
					case src.Secret != nil:
						part, err = w.secretFiles(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items, ptrBool(src.Secret.Optional))
					case src.DownwardAPI != nil:
						part, err = w.downwardFiles(pod, src.DownwardAPI.Items)
					}
					if err != nil {
						return err
					}
					for k, b := range part {
						files[k] = b
					}
				}
				return writeFiles(dir, files, mode(proj.DefaultMode, 0o644))
			}
		default:
			return nil, fmt.Errorf("volume %s: this volume type is not supported by the lab agent", v.Name)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if refresh != nil {
			if err := refresh(ctx); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		}
		out[v.Name] = volume{path: dir, refresh: refresh}
	}
	return out, nil
}

// refreshVolumes rewrites configMap, secret, downwardAPI and projected volumes about once a minute (and
// tokens at 80% of their lifetime), as the kubelet's volume manager does.
func (w *podWorker) refreshVolumes(ctx context.Context, pod *corev1.Pod) {
	if time.Now().Second()%60 != 0 {
		return
	}
	for name, v := range w.volumes {
		if v.refresh != nil {
			if err := v.refresh(ctx); err != nil {
				w.a.log.Warn("refreshing volume", "pod", pod.Namespace+"/"+pod.Name, "volume", name, "err", err)
			}
		}
	}
}

func ptrBool(b *bool) bool { return b != nil && *b }

func mode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m)
}

// writeFiles writes files (relative paths) under dir, each atomically (write and rename).
func writeFiles(dir string, files map[string][]byte, perm os.FileMode) error {
	for rel, b := range files {
		p := filepath.Join(dir, filepath.Clean("/"+rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, b, perm); err != nil {
			return err
		}
		if err := os.Chmod(tmp, perm); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	return nil
}

func pick(data map[string][]byte, items []corev1.KeyToPath, what string, optional bool) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = v
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q", what, it.Key)
		}
		out[it.Path] = v
	}
	return out, nil
}

func (w *podWorker) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional bool) (map[string][]byte, error) {
	cm, err := w.a.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configmap %s/%s: %w", ns, name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return pick(data, items, "configmap "+ns+"/"+name, optional)
}

func (w *podWorker) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional bool) (map[string][]byte, error) {
	s, err := w.a.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", ns, name, err)
	}
	return pick(s.Data, items, "secret "+ns+"/"+name, optional)
}

func (w *podWorker) downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, it := range items {
		if it.FieldRef == nil {
			continue // resourceFieldRef: the lab sets no limits
		}
		v, err := w.fieldValue(pod, it.FieldRef.FieldPath)
		if err != nil {
			return nil, err
		}
		out[it.Path] = []byte(v)
	}
	return out, nil
}

// fieldValue resolves a downward-API field path.
func (w *podWorker) fieldValue(pod *corev1.Pod, path string) (string, error) {
	kv := func(m map[string]string) string {
		var lines []string
		for _, k := range sortedKeys(m) {
			b, _ := json.Marshal(m[k])
			lines = append(lines, k+"="+string(b))
		}
		return strings.Join(lines, "\n")
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return kv(pod.Labels), nil
	case "metadata.annotations":
		return kv(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return w.a.host.Addr.String(), nil
	case "status.hostIPs":
		ips := []string{w.a.host.Addr.String()}
		if w.a.host.Addr6.IsValid() {
			ips = append(ips, w.a.host.Addr6.String())
		}
		return strings.Join(ips, ","), nil
	case "status.podIP", "status.podIPs":
		var ips []string
		for _, ip := range w.ips {
			ips = append(ips, ip.String())
		}
		if path == "status.podIP" && len(ips) > 0 {
			return ips[0], nil
		}
		return strings.Join(ips, ","), nil
	}
	for _, pre := range []string{"metadata.labels['", "metadata.annotations['"} {
		if k, ok := strings.CutPrefix(path, pre); ok && strings.HasSuffix(k, "']") {
			k = strings.TrimSuffix(k, "']")
			if strings.HasPrefix(pre, "metadata.labels") {
				return pod.Labels[k], nil
			}
			return pod.Annotations[k], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

// containerEnv builds a container's environment as the kubelet does: service links (when enabled) and
// KUBERNETES_SERVICE_*, then envFrom, then env with $(VAR) expansion against what is defined before.
func (w *podWorker) containerEnv(ctx context.Context, pod *corev1.Pod, c corev1.Container) (*Env, error) {
	env := &Env{}
	env.Set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	env.Set("HOSTNAME", pod.Name)
	if pod.Spec.HostNetwork {
		env.Set("HOSTNAME", w.a.host.Name)
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	if links {
		svcs, err := w.a.client.CoreV1().Services(pod.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, s := range svcs.Items {
				if s.Name == "kubernetes" && pod.Namespace == "default" {
					continue
				}
				w.setServiceEnv(env, &s)
			}
		}
	}
	if k, err := w.a.client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil {
		w.setServiceEnv(env, k)
	} else {
		env.Set("KUBERNETES_SERVICE_HOST", w.a.lab.Plan.KubernetesServiceIP().String())
		env.Set("KUBERNETES_SERVICE_PORT", "443")
	}
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := w.a.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ptrBool(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("configmap %q: %w", from.ConfigMapRef.Name, err)
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, err := w.a.client.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) && ptrBool(from.SecretRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("secret %q: %w", from.SecretRef.Name, err)
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		for _, k := range sortedKeys(data) {
			env.Set(from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env.Set(e.Name, Expand(e.Value, env.Lookup))
			continue
		}
		vf := e.ValueFrom
		switch {
		case vf.FieldRef != nil:
			v, err := w.fieldValue(pod, vf.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			env.Set(e.Name, v)
		case vf.ConfigMapKeyRef != nil:
			r := vf.ConfigMapKeyRef
			cm, err := w.a.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil && !(apierrors.IsNotFound(err) && ptrBool(r.Optional)) {
				return nil, fmt.Errorf("env %s: configmap %q: %w", e.Name, r.Name, err)
			}
			if cm != nil {
				v, ok := cm.Data[r.Key]
				if !ok && !ptrBool(r.Optional) {
					return nil, fmt.Errorf("env %s: configmap %q has no key %q", e.Name, r.Name, r.Key)
				}
				if ok {
					env.Set(e.Name, v)
				}
			}
		case vf.SecretKeyRef != nil:
			r := vf.SecretKeyRef
			s, err := w.a.client.CoreV1().Secrets(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil && !(apierrors.IsNotFound(err) && ptrBool(r.Optional)) {
				return nil, fmt.Errorf("env %s: secret %q: %w", e.Name, r.Name, err)
			}
			if s != nil {
				v, ok := s.Data[r.Key]
				if !ok && !ptrBool(r.Optional) {
					return nil, fmt.Errorf("env %s: secret %q has no key %q", e.Name, r.Name, r.Key)
				}
				if ok {
					env.Set(e.Name, string(v))
				}
			}
		case vf.ResourceFieldRef != nil:
			env.Set(e.Name, "0") // the lab sets no resource limits
		}
	}
	return env, nil
}

func (w *podWorker) setServiceEnv(env *Env, s *corev1.Service) {
	ip, err := netip.ParseAddr(s.Spec.ClusterIP)
	if err != nil {
		return
	}
	var ports []ServicePort
	for _, p := range s.Spec.Ports {
		ports = append(ports, ServicePort{Name: p.Name, Port: p.Port, Protocol: string(p.Protocol)})
	}
	for _, kv := range ServiceLinkEnv(s.Name, ip, ports) {
		env.Set(kv[0], kv[1])
	}
}

// mounts returns the bind mounts of a container: its volumeMounts and the lab's /etc/hosts.
func (w *podWorker) mounts(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]lab.Mount, error) {
	return w.bindMounts(ctx, pod, c, true)
}

// bindMounts is mounts; ensureTargets makes each target on the host (a host program's container
// sees the host's file system; runc makes the targets in the container's rootfs itself).
func (w *podWorker) bindMounts(ctx context.Context, pod *corev1.Pod, c corev1.Container, ensureTargets bool) ([]lab.Mount, error) {
	out, err := w.dnsMounts(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	for _, m := range c.VolumeMounts {
		v, ok := w.volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %s: no volume named %q", m.MountPath, m.Name)
		}
		src, isFile := v.path, v.isFile
		if m.SubPath != "" {
			src = filepath.Join(v.path, filepath.Clean("/"+m.SubPath))
			st, err := os.Stat(src)
			if err != nil {
				if err := os.MkdirAll(src, 0o755); err != nil {
					return nil, err
				}
			} else {
				isFile = !st.IsDir()
			}
		}
		if ensureTargets {
			if err := w.a.lab.State.EnsurePath(m.MountPath, !isFile); err != nil {
				return nil, fmt.Errorf("volumeMount %s: %w", m.MountPath, err)
			}
		}
		ro := m.ReadOnly
		out = append(out, lab.Mount{Source: src, Target: m.MountPath, ReadOnly: ro})
	}
	return out, nil
}

// dnsMounts writes the Pod's /etc/hosts and /etc/resolv.conf as the kubelet and containerd do (dns.go
// decides their contents) into the Pod's directory and returns the bind mounts that put them in place
// in the container's mount namespace. The lab's hosts file stands for the node's /etc/hosts and
// State.NodeResolvConf for the kubelet's resolvConf.
func (w *podWorker) dnsMounts(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]lab.Mount, error) {
	var out []lab.Mount
	dir := w.a.lab.State.PodDir(string(w.uid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var ips []string
	for _, ip := range w.ips {
		ips = append(ips, ip.String())
	}
	if MountsEtcHosts(pod, ips, c) {
		nodeHosts, err := os.ReadFile(w.a.lab.State.HostsFile())
		if err != nil {
			return nil, err
		}
		host, domain := PodHostname(pod, lab.ClusterDomain)
		hosts := filepath.Join(dir, "etc-hosts")
		if err := os.WriteFile(hosts, PodHosts(pod, nodeHosts, ips, host, domain), 0o644); err != nil {
			return nil, err
		}
		out = append(out, lab.Mount{Source: hosts, Target: "/etc/hosts"})
	}
	nodeResolv, err := os.ReadFile(w.a.lab.State.NodeResolvConf())
	if err != nil {
		return nil, fmt.Errorf("the node's resolv.conf: %w", err)
	}
	conf, warnings, err := PodDNS(DNSSettings{ClusterDNS: []netip.Addr{w.a.lab.Plan.ClusterDNSIP()}, ClusterDomain: lab.ClusterDomain, NodeResolv: nodeResolv}, pod)
	if err != nil {
		return nil, err
	}
	if !w.dnsWarned {
		for _, msg := range warnings {
			w.a.event(ctx, pod, corev1.EventTypeWarning, "DNSConfigForming", msg)
			w.a.log.Warn("pod DNS", "pod", pod.Namespace+"/"+pod.Name, "msg", msg)
		}
		w.dnsWarned = true
	}
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, conf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return append(out, lab.Mount{Source: resolv, Target: "/etc/resolv.conf"}), nil
}
