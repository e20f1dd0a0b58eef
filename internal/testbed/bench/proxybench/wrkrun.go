package proxybench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// wrk runs wrk from the client against a NodePort Service (externalTrafficPolicy Local) on each
// proxy's node, and against the Pod behind it directly.
//
// The client has no route to the pod network (its default route is the bridge's, which has
// none), so the benchmark adds a /32 route to each target Pod via that Pod's node, and removes it
// at the end. Direct and NodePort traffic then take the same path, client -> node -> Pod, and the
// only difference is the proxy's DNAT on the node.
func (b *bench) wrk(ctx context.Context, res *Result) error {
	client := b.l.Plan.Client
	podIPs := map[string]netip.Addr{}
	for _, p := range []*proxy{&b.kp, &b.il} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + p.node, Labels: map[string]string{"app": webApp, benchLabel: "true"}},
			// No service links: the namespace holds up to 30,000 Services, whose variables would
			// not fit in a process's environment.
			Spec: corev1.PodSpec{NodeName: p.node, EnableServiceLinks: ptr.To(false), Containers: []corev1.Container{{
				Name: "whoami", Image: "traefik/whoami", Ports: []corev1.ContainerPort{{ContainerPort: servicePort}},
			}}},
		}
		if _, err := b.cs.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	svc, err := b.cs.CoreV1().Services(Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{benchLabel: "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector: map[string]string{"app": webApp},
			Ports:    []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(servicePort)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	nodePort := svc.Spec.Ports[0].NodePort
	for _, p := range []*proxy{&b.kp, &b.il} {
		err := poll(ctx, 2*time.Minute, 200*time.Millisecond, func() (bool, string, error) {
			pod, err := b.cs.CoreV1().Pods(Namespace).Get(ctx, "web-"+p.node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			a, err := netip.ParseAddr(pod.Status.PodIP)
			if err != nil || pod.Status.Phase != corev1.PodRunning {
				return false, fmt.Sprintf("Pod %s: %s", pod.Name, pod.Status.Phase), nil
			}
			podIPs[p.name] = a
			return true, "", nil
		})
		if err != nil {
			return err
		}
		route := []string{"-n", client.Name, "route", "replace", podIPs[p.name].String() + "/32", "via", p.addr.String()}
		b.push(fmt.Sprintf("removing %s's route to %s", client.Name, podIPs[p.name]), func(ctx context.Context) error {
			return run(ctx, "ip", "-n", client.Name, "route", "del", podIPs[p.name].String()+"/32")
		})
		if err := run(ctx, "ip", route...); err != nil {
			return err
		}
	}
	targets := []struct{ name, url string }{
		{TargetDirectIronLB, fmt.Sprintf("http://%s/", netip.AddrPortFrom(podIPs[IronLB], servicePort))},
		{TargetIronLB, fmt.Sprintf("http://%s/", netip.AddrPortFrom(b.il.addr, uint16(nodePort)))},
		{TargetDirectKube, fmt.Sprintf("http://%s/", netip.AddrPortFrom(podIPs[KubeProxy], servicePort))},
		{TargetKubeProxy, fmt.Sprintf("http://%s/", netip.AddrPortFrom(b.kp.addr, uint16(nodePort)))},
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: lab.Dialer(client.Name), DisableKeepAlives: true}}
	for _, t := range targets {
		err := poll(ctx, time.Minute, 200*time.Millisecond, func() (bool, string, error) {
			resp, err := hc.Get(t.url)
			if err != nil {
				return false, err.Error(), nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status, nil
		})
		if err != nil {
			return fmt.Errorf("%s from %s: %w", t.url, client.Name, err)
		}
	}
	secs := max(1, int(b.o.WrkDuration.Seconds()))
	args := []string{"-t2", "-c50", fmt.Sprintf("-d%ds", secs), "--latency"}
	res.WrkSpec = strings.Join(args[:3], " ") + " from " + client.Name
	for r := 1; r <= b.o.WrkRounds; r++ {
		for _, t := range targets {
			cmd := exec.CommandContext(ctx, b.o.Self, append(append([]string{"lab", "exec", client.Name, "--", "wrk"}, args...), t.url)...)
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("wrk %s: %w\n%s", t.url, err, out)
			}
			w, err := ParseWrk(bytes.NewReader(out))
			if err != nil {
				return fmt.Errorf("wrk %s: %w\n%s", t.url, err, out)
			}
			res.Wrk[t.name] = append(res.Wrk[t.name], w)
			b.o.Log("wrk round %d/%d %-16s %s: %.0f req/s, p50 %s, p99 %s, %d errors", r, b.o.WrkRounds, t.name, t.url, w.RPS, fmtDur(w.P50), fmtDur(w.P99), w.Errors)
		}
	}
	return nil
}
