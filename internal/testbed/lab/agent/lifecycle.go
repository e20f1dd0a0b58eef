package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// preStop runs the running containers' preStop hooks before teardown signals them, as the kubelet
// does: all at once, within the Pod's grace period, which they use up. A later deletion with a shorter
// grace period (kubectl delete --grace-period=0, as the e2e tests' cleanup does) or the Pod's removal
// cuts them short. It returns what is left of the grace period for SIGTERM.
func (w *podWorker) preStop(ctx context.Context, pod *corev1.Pod, grace time.Duration) time.Duration {
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range w.ctrs {
		if c.spec.Lifecycle == nil || c.spec.Lifecycle.PreStop == nil || c.cmd == nil || c.cmd.Process == nil || !c.st.Running {
			continue
		}
		wg.Add(1)
		go func(spec corev1.Container, pid int) {
			defer wg.Done()
			if err := w.runHook(hctx, spec, pid, spec.Lifecycle.PreStop); err != nil && hctx.Err() == nil {
				msg := fmt.Sprintf("PreStopHook failed for container %s: %v", spec.Name, err)
				w.a.event(context.WithoutCancel(ctx), pod, corev1.EventTypeWarning, "FailedPreStopHook", msg)
			}
		}(c.spec, c.cmd.Process.Pid)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-hctx.Done():
			<-done
			break wait
		case ev := <-w.events: // readiness probes go on while the hooks run
			w.terminatingEvent(ctx, ev)
		case <-tick.C:
			p, removed := w.snapshot()
			if removed || p != nil && p.DeletionGracePeriodSeconds != nil && time.Duration(*p.DeletionGracePeriodSeconds)*time.Second <= time.Since(start) {
				cancel()
			}
		}
	}
	if p, removed := w.snapshot(); removed {
		return 0
	} else if p != nil && p.DeletionGracePeriodSeconds != nil && time.Duration(*p.DeletionGracePeriodSeconds)*time.Second < grace {
		grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	}
	return max(0, grace-time.Since(start))
}

// runHook runs one lifecycle handler of container spec (whose process is pid) until it ends or ctx does.
func (w *podWorker) runHook(ctx context.Context, spec corev1.Container, pid int, h *corev1.LifecycleHandler) error {
	switch {
	case h.Exec != nil:
		args := append([]string{"-t", strconv.Itoa(pid), "-n", "-m", "-u", "--"}, h.Exec.Command...)
		if out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("command %q: %v: %s", strings.Join(h.Exec.Command, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	case h.HTTPGet != nil:
		port, err := resolvePort(h.HTTPGet.Port, spec)
		if err != nil {
			return err
		}
		host := h.HTTPGet.Host
		if host == "" && len(w.ips) > 0 {
			host = w.ips[0].String()
		}
		scheme := strings.ToLower(string(h.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), h.HTTPGet.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for _, hd := range h.HTTPGet.HTTPHeaders {
			req.Header.Set(hd.Name, hd.Value)
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	case h.Sleep != nil:
		select {
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
		case <-ctx.Done():
		}
		return nil
	}
	return fmt.Errorf("the lab agent runs exec, httpGet and sleep hooks only")
}
