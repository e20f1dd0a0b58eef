package dsrbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/internal/testbed/bench/benchcfg"
	"github.com/ironlb/ironlb/internal/testbed/bench/connbench"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/connprobe"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// Options say what to run.
type Options struct {
	Self         string        // the ironlb binary
	Entry        string        // the node the address enters by (its announcer; it runs no pod)
	Rounds       int           // throughput runs per target, interleaved
	Duration     time.Duration // each throughput run
	Threads      int           // wrk -t
	Conns        int           // wrk -c
	BulkMiB      int           // the reply-heavy run's answer size (0: no reply-heavy run)
	BulkDuration time.Duration
	BulkConns    int
	Log          func(format string, args ...any)
}

// Check refuses options that cannot run.
func (o Options) Check() error {
	if o.Rounds < 1 || o.Duration < time.Second || o.Threads < 1 || o.Conns < o.Threads || o.BulkMiB < 0 ||
		(o.BulkMiB > 0 && (o.BulkDuration < time.Second || o.BulkConns < 1)) {
		return fmt.Errorf("--rounds, --threads and --bulk-conns must be at least 1, --conns at least --threads, --duration and --bulk-duration at least 1s, --bulk-mib not negative")
	}
	return nil
}

// Result is a run's figures.
type Result struct {
	VIP             netip.Addr
	Pod, PodNode    string
	Entry           string
	Spec, BulkSpec  string
	Runs            map[string][]Wrk
	Bulks           []Bulk
	ClientAddr      netip.Addr
	EntryAddr, Node netip.Addr
}

// The Service of `lab bench-connections` (connbench.Objects), whose external mode the benchmark flips.
const service = "service/bench-connections"

// Run measures in the lab, which must run ironlb's proxy (only it reads ironlb.io/external-mode).
func Run(ctx context.Context, l *lab.Lab, o Options) (res Result, err error) {
	if err := o.Check(); err != nil {
		return res, err
	}
	if l.Plan.Config.ProxyMode != lab.ProxyIronLB {
		return res, fmt.Errorf("the lab's proxy is kube-proxy, which has no dsr mode: bring the lab up with --proxy=ironlb")
	}
	entry, ok := l.Plan.Host(o.Entry)
	if !ok || !entry.IsNode() {
		return res, fmt.Errorf("no node %q", o.Entry)
	}
	client := l.Plan.Client
	res = Result{Entry: entry.Name, Runs: map[string][]Wrk{}, ClientAddr: client.Addr, EntryAddr: entry.Addr}
	kubectl := func(ctx context.Context, stdin string, args ...string) (string, error) {
		return failover.Kubectl(ctx, o.Self, stdin, args...)
	}
	if res.VIP, err = failover.Address(entry.Name, l.Plan.NodeNames(), l.Plan.Config.NodeNet()); err != nil {
		return res, err
	}
	if err := failover.UseSpeaker(ctx, failover.Options{Self: o.Self, Speaker: "ironlb", Memberlist: "default", Log: o.Log}); err != nil {
		return res, err
	}
	// The other benchmarks' Services hold the same addresses.
	if _, err := kubectl(ctx, "", "delete", "-n", "default", "--ignore-not-found", "--wait", "service/bench-failover", "service/bench-bgp"); err != nil {
		return res, err
	}
	if _, err := benchcfg.Apply(ctx, kubectl, connbench.Objects(connbench.Config{Mode: "l2", Speaker: "ironlb", ExternalMode: "dsr"}, res.VIP)); err != nil {
		return res, err
	}
	// One pod, so that the address and the pod directly serve with the same pod: the Deployment is
	// scaled back to two at the end (and benchcfg.Apply restores it for the next benchmark anyway).
	if _, err := kubectl(ctx, "", "scale", "deploy/bench-web", "--replicas=1"); err != nil {
		return res, err
	}
	defer func() {
		if _, serr := kubectl(context.WithoutCancel(ctx), "", "scale", "deploy/bench-web", "--replicas=2"); serr != nil && err == nil {
			err = serr
		}
	}()
	pod, err := onePod(ctx, l)
	if err != nil {
		return res, err
	}
	res.Pod, res.PodNode = pod.Name, pod.Spec.NodeName
	podIP, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return res, fmt.Errorf("pod %s: address %q", pod.Name, pod.Status.PodIP)
	}
	node, ok := l.Plan.Host(pod.Spec.NodeName)
	if !ok {
		return res, fmt.Errorf("pod %s on %q, no node of the lab", pod.Name, pod.Spec.NodeName)
	}
	res.Node = node.Addr
	if node.Name == entry.Name {
		return res, fmt.Errorf("pod %s runs on the entry node %s", pod.Name, entry.Name)
	}
	// The client reaches the pod directly through its node (the pod network has no other route from
	// the client), the same first hop as the address's replies in dsr mode.
	route := podIP.String() + "/32"
	if out, err := exec.CommandContext(ctx, "ip", "-n", client.Name, "route", "replace", route, "via", node.Addr.String()).CombinedOutput(); err != nil {
		return res, fmt.Errorf("route to the pod from %s: %w: %s", client.Name, err, out)
	}
	defer func() { _ = exec.Command("ip", "-n", client.Name, "route", "del", route).Run() }()

	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: lab.Dialer(client.Name), DisableKeepAlives: true}}
	urls := map[string]string{
		TargetDirect: "http://" + netip.AddrPortFrom(podIP, 80).String(),
		TargetDSR:    "http://" + netip.AddrPortFrom(res.VIP, 80).String(),
		TargetSNAT:   "http://" + netip.AddrPortFrom(res.VIP, 80).String(),
	}
	mode := ""
	// use makes target's path the one wrk takes: for the address, its external mode set and seen
	// working (in dsr the pod sees the client's address, in snat another).
	use := func(target string) error {
		want := map[string]string{TargetDSR: "dsr", TargetSNAT: "snat"}[target]
		if want != "" && want != mode {
			if _, err := kubectl(ctx, "", "annotate", "--overwrite", "-n", "default", service, "ironlb.io/external-mode="+want); err != nil {
				return err
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			remote, err := whoRemote(ctx, hc, urls[target]+"/")
			ok := err == nil
			if ok && want != "" {
				ok = (remote == client.Addr) == (want == "dsr")
			}
			if ok {
				mode = cmpOr(want, mode)
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s (%s): the pod saw %v, %v after 60 s", target, urls[target], remote, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	wrk := func(args ...string) (Wrk, error) {
		cmd := exec.CommandContext(ctx, o.Self, append([]string{"lab", "exec", client.Name, "--", "wrk"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			return Wrk{}, fmt.Errorf("wrk %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return ParseWrk(string(out))
	}
	args := []string{"-t" + strconv.Itoa(o.Threads), "-c" + strconv.Itoa(o.Conns), fmt.Sprintf("-d%ds", int(o.Duration.Seconds())), "--latency"}
	res.Spec = strings.Join(args[:3], " ") + " from " + client.Name + ", GET / (a few hundred bytes)"
	for r := 1; r <= o.Rounds; r++ {
		order := []string{TargetDirect, TargetDSR, TargetSNAT}
		if r%2 == 0 { // one flip of the mode per round
			order = []string{TargetDirect, TargetSNAT, TargetDSR}
		}
		for _, t := range order {
			if err := use(t); err != nil {
				return res, err
			}
			w, err := wrk(append(args, urls[t]+"/")...)
			if err != nil {
				return res, err
			}
			res.Runs[t] = append(res.Runs[t], w)
			o.Log("round %d/%d %-18s %.0f req/s, %.1f MiB/s, p50 %s, p99 %s, %d errors", r, o.Rounds, t, w.RPS, w.Transfer/(1<<20), w.P50, w.P99, w.Errors)
		}
	}
	if o.BulkMiB == 0 {
		return res, nil
	}
	bargs := []string{"-t1", "-c" + strconv.Itoa(o.BulkConns), fmt.Sprintf("-d%ds", int(o.BulkDuration.Seconds())), "--latency"}
	res.BulkSpec = fmt.Sprintf("%s from %s, GET /data?size=%d&unit=mb: %d MiB answers", strings.Join(bargs[:3], " "), client.Name, o.BulkMiB, o.BulkMiB)
	for _, t := range []string{TargetDirect, TargetDSR, TargetSNAT} {
		if err := use(t); err != nil {
			return res, err
		}
		e0, err1 := linkStats(ctx, entry.Name)
		b0, err2 := linkStats(ctx, node.Name)
		w, err := wrk(append(bargs, fmt.Sprintf("%s/data?size=%d&unit=mb", urls[t], o.BulkMiB))...)
		e1, err3 := linkStats(ctx, entry.Name)
		b1, err4 := linkStats(ctx, node.Name)
		for _, e := range []error{err, err1, err2, err3, err4} {
			if e != nil {
				return res, e
			}
		}
		b := Bulk{Target: t, Wrk: w, Entry: e1.Sub(e0), Backend: b1.Sub(b0)}
		res.Bulks = append(res.Bulks, b)
		o.Log("reply-heavy %-18s %d answers, client read %.1f MiB; eth0 tx: entry %s %.1f MiB, backend %s %.1f MiB", t, w.Requests, w.Read/(1<<20),
			entry.Name, float64(b.Entry.TX)/(1<<20), node.Name, float64(b.Backend.TX)/(1<<20))
	}
	return res, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// onePod waits (120 s at most) until bench-web has exactly one running, ready pod, not being deleted.
func onePod(ctx context.Context, l *lab.Lab) (corev1.Pod, error) {
	cs, err := l.Client()
	if err != nil {
		return corev1.Pod{}, err
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		pl, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=bench-web"})
		if err == nil && len(pl.Items) == 1 {
			p := pl.Items[0]
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}
			if ready && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			n := -1
			if pl != nil {
				n = len(pl.Items)
			}
			return corev1.Pod{}, fmt.Errorf("bench-web: not one ready pod after 120 s (%d pods, %v)", n, err)
		}
		select {
		case <-ctx.Done():
			return corev1.Pod{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// whoRemote asks whoami at url and returns the client address it saw.
func whoRemote(ctx context.Context, hc *http.Client, url string) (netip.Addr, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return netip.Addr{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return netip.Addr{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return netip.Addr{}, err
	}
	_, remote := connprobe.Whoami(body)
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("whoami's RemoteAddr %q: %w", remote, err)
	}
	return ap.Addr(), nil
}

// linkStats reads node's eth0 byte counters.
func linkStats(ctx context.Context, node string) (Counters, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", node, "-j", "-s", "link", "show", "dev", "eth0").Output()
	if err != nil {
		return Counters{}, fmt.Errorf("ip -n %s -j -s link show dev eth0: %w", node, err)
	}
	c, err := ParseLinkStats(out)
	if err != nil {
		return c, fmt.Errorf("%s: %w", node, err)
	}
	return c, nil
}
