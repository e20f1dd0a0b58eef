package proxybench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// pods returns p's Pods on node that are not being deleted, and whether any is being deleted.
func (b *bench) pods(ctx context.Context, p *proxy, node string) (live []corev1.Pod, terminating bool, err error) {
	l, err := b.cs.CoreV1().Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, false, err
	}
	for _, pod := range l.Items {
		if pod.DeletionTimestamp != nil {
			terminating = true
			continue
		}
		live = append(live, pod)
	}
	return live, terminating, nil
}

// uidsOn returns the UIDs of p's Pods on node, terminating ones included.
func (b *bench) uidsOn(ctx context.Context, p *proxy, node string) ([]types.UID, error) {
	l, err := b.cs.CoreV1().Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	var out []types.UID
	for _, pod := range l.Items {
		out = append(out, pod.UID)
	}
	return out, nil
}

// waitGone waits until p has no Pod on node, not even a terminating one, and the processes of
// the Pods uids had there are gone (the agent removes a Pod's cgroup once it has killed it).
func (b *bench) waitGone(ctx context.Context, p *proxy, node string, uids []types.UID, timeout time.Duration) error {
	return poll(ctx, timeout, 50*time.Millisecond, func() (bool, string, error) {
		live, terminating, err := b.pods(ctx, p, node)
		if err != nil {
			return false, err.Error(), nil
		}
		if len(live) > 0 || terminating {
			return false, fmt.Sprintf("%s still has a Pod on %s", p.name, node), nil
		}
		for _, uid := range uids {
			cg, err := b.l.Cgroup(node, "pods", string(uid))
			if err != nil {
				return false, "", err
			}
			if n := len(cg.Procs()); n > 0 {
				return false, fmt.Sprintf("%d processes of %s's Pod %s still run on %s", n, p.name, uid, node), nil
			}
		}
		return true, "", nil
	})
}

// currentPod returns p's running Pod on its node.
func (b *bench) currentPod(ctx context.Context, p *proxy) (corev1.Pod, error) {
	live, _, err := b.pods(ctx, p, p.node)
	if err != nil {
		return corev1.Pod{}, err
	}
	if len(live) != 1 {
		return corev1.Pod{}, fmt.Errorf("%s has %d Pods on %s, want 1", p.name, len(live), p.node)
	}
	return live[0], nil
}

// restart stops p, deletes its tables, starts it again and times its first full sync with n
// Services present.
func (b *bench) restart(ctx context.Context, p *proxy, n int) (SyncTrial, error) {
	tr := SyncTrial{Services: n, Sync: -1, OwnFull: -1, OwnLast: -1, PeakRSS: -1}
	old, err := b.currentPod(ctx, p)
	if err != nil {
		return tr, err
	}
	if err := b.setLabel(ctx, p.node, labelNoProxy); err != nil {
		return tr, err
	}
	if err := b.waitGone(ctx, p, p.node, []types.UID{old.UID}, 2*time.Minute); err != nil {
		return tr, err
	}
	netns := lab.NetNSPath(p.node)
	if err := deleteTables(netns, p.table); err != nil {
		return tr, err
	}
	probe, err := NewElementProbe(netns, p.table, serviceIPsMap, ServiceKey(b.ips[n-1], servicePort))
	if err != nil {
		return tr, err
	}
	defer probe.Close()
	if ok, err := probe.Present(); err != nil || ok {
		return tr, fmt.Errorf("the last Service's element is still in %s's table after deleting it (err %v)", p.name, err)
	}
	if err := b.setLabel(ctx, p.node, p.on); err != nil {
		return tr, err
	}

	var (
		podCg lab.Cgroup
		uid   types.UID
		start time.Time
		done  time.Time
	)
	deadline := time.Now().Add(syncTimeout)
	tick := time.NewTicker(syncPoll)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return tr, ctx.Err()
		case <-tick.C:
		}
		if uid == "" && i%rssEvery == 0 {
			if live, _, err := b.pods(ctx, p, p.node); err == nil && len(live) == 1 && live[0].UID != old.UID {
				uid = live[0].UID
				if podCg, err = b.l.Cgroup(p.node, "pods", string(uid)); err != nil {
					return tr, err
				}
			}
		}
		if podCg != "" && start.IsZero() {
			start = containerStart(podCg, p.container)
		}
		if podCg != "" && i%rssEvery == 0 {
			tr.PeakRSS = max(tr.PeakRSS, podCg.RSS())
		}
		if done.IsZero() {
			ok, err := probe.Present()
			if err != nil {
				return tr, err
			}
			if ok {
				done = time.Now()
			}
		} else if time.Since(done) > time.Second && !start.IsZero() {
			break // RSS sampled for a second after the sync
		}
		if time.Now().After(deadline) {
			return tr, fmt.Errorf("%s on %s: no full sync with %d Services after %s (Pod %q, started %v)", p.name, p.node, n, syncTimeout, uid, !start.IsZero())
		}
	}
	tr.Sync = done.Sub(start)
	own, err := b.waitOwn(ctx, p, func(o Own) bool { return o.FullCount >= 1 && o.Last > 0 }, 10*time.Second)
	if err != nil {
		b.o.Log("%s's own metrics: %v", p.name, err)
	} else {
		tr.OwnFull = seconds(own.FullSum / own.FullCount)
		tr.OwnLast = time.Unix(0, int64(own.Last*1e9)).Sub(start)
	}
	return tr, b.waitPodReady(ctx, p, uid, 2*time.Minute)
}

// containerStart returns when the first process of the container's cgroup (<pod>/<container>-<run>)
// started, or the zero time if it has none yet.
func containerStart(podCg lab.Cgroup, container string) time.Time {
	dirs, _ := filepath.Glob(filepath.Join(string(podCg), container+"-*"))
	var first time.Time
	for _, d := range dirs {
		for _, pid := range lab.Cgroup(d).Procs() {
			if t, err := procStart(pid); err == nil && (first.IsZero() || t.Before(first)) {
				first = t
			}
		}
	}
	return first
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every Linux architecture the
// lab runs on.
const clockTicks = 100

// procStart returns when a process started (10 ms resolution).
func procStart(pid int) (time.Time, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, err
	}
	ticks, err := ProcStartTicks(string(b))
	if err != nil {
		return time.Time{}, err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	sinceStart := time.Duration(ts.Nano()) - time.Duration(ticks)*time.Second/clockTicks
	return now.Add(-sinceStart), nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (b *bench) waitPodReady(ctx context.Context, p *proxy, uid types.UID, timeout time.Duration) error {
	return poll(ctx, timeout, 100*time.Millisecond, func() (bool, string, error) {
		live, _, err := b.pods(ctx, p, p.node)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, pod := range live {
			if pod.UID != uid {
				continue
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, "", nil
				}
			}
		}
		return false, fmt.Sprintf("%s's Pod on %s is not Ready", p.name, p.node), nil
	})
}

// metrics reads p's metrics from inside its node: kube-proxy's over plain HTTP, ironlb's over HTTPS
// with the lab's metrics reader token (the proxy's --metrics-secure, docs/security.md).
func (b *bench) metrics(ctx context.Context, p *proxy) (Own, error) {
	addr := netip.AddrPortFrom(p.addr, metricsPort)
	if p.name != IronLB {
		return scrapeOwn(ctx, p.name, p.node, fmt.Sprintf("http://%s/metrics", addr), "")
	}
	token, err := b.metricsToken(ctx)
	if err != nil {
		return Own{}, err
	}
	return scrapeOwn(ctx, p.name, p.node, fmt.Sprintf("https://%s/metrics", addr), token)
}

// metricsToken returns the lab's metrics reader token (lab.MetricsToken), got once.
func (b *bench) metricsToken(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token != "" {
		return b.token, nil
	}
	t, err := b.l.MetricsToken(ctx)
	if err != nil {
		return "", fmt.Errorf("metrics token: %w", err)
	}
	b.token = t
	return t, nil
}

// scrapeOwn reads a proxy's sync metrics at url from inside the named network namespace, with the
// bearer token when one is given (an HTTPS server's self-signed certificate is not verified: the
// token authenticates the client).
func scrapeOwn(ctx context.Context, name, netns, url, token string) (Own, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: lab.Dialer(netns), DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Own{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return Own{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Own{}, fmt.Errorf("%s metrics: %s", name, resp.Status)
	}
	ss, err := ParseMetrics(resp.Body)
	if err != nil {
		return Own{}, err
	}
	return OwnMetrics(name, ss), nil
}

// waitOwn reads p's metrics until ok accepts them.
func (b *bench) waitOwn(ctx context.Context, p *proxy, ok func(Own) bool, timeout time.Duration) (Own, error) {
	return waitOwn(ctx, func(ctx context.Context) (Own, error) { return b.metrics(ctx, p) }, ok, timeout)
}

// waitOwn reads a proxy's metrics until ok accepts them.
func waitOwn(ctx context.Context, metrics func(context.Context) (Own, error), ok func(Own) bool, timeout time.Duration) (Own, error) {
	var own Own
	var last error
	err := poll(ctx, timeout, 100*time.Millisecond, func() (bool, string, error) {
		var err error
		own, err = metrics(ctx)
		if err != nil {
			last = err
			return false, err.Error(), nil
		}
		return ok(own), fmt.Sprintf("%+v", own), nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last error: %v)", err, last)
	}
	return own, err
}
