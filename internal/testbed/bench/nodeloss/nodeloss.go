// Package nodeloss is the proxy's node-loss benchmark (issue 7, MetalLB #2796): with a pod on every
// worker behind one service address, a worker that holds one of the pods loses power while the client
// requests the address every 10 ms on a new connection each. kube-proxy keeps choosing the dead node's
// endpoint until the node controller marks the node NotReady (node-monitor-grace-period, 40-50 s);
// ironlb's proxy stops choosing it as soon as its own echo detector declares the node dead. The address
// is announced by a node that stays up, so the figure is the dataplane's alone. Analysis is pure
// (Analyze); Run drives the lab.
package nodeloss

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// Trial is one power cut.
type Trial struct {
	Sent, Failed int           // requests started after the cut
	FailedLate   int           // of those, failed requests started more than 1 s after the cut
	Window       time.Duration // cut -> start of the last failed request (0: none failed)
	// Sustained is the end of the last one-second interval after the cut in which at least 5% of the
	// requests failed (0: none): the outage, without the isolated timeouts a busy machine has anyway.
	Sustained  time.Duration
	NotReadyAt time.Duration // cut -> the node controller marked the node NotReady (-1: not within the window)
}

// Analyze computes a trial from the client's requests.
func Analyze(reqs []failover.Event, cut time.Time) Trial {
	var t Trial
	type bucket struct{ sent, failed int }
	buckets := map[int]*bucket{}
	for _, r := range reqs {
		if r.Kind != "http" || r.At.Before(cut) {
			continue
		}
		after := r.At.Sub(cut)
		b := buckets[int(after/time.Second)]
		if b == nil {
			b = &bucket{}
			buckets[int(after/time.Second)] = b
		}
		t.Sent++
		b.sent++
		if !r.OK {
			t.Failed++
			b.failed++
			t.Window = max(t.Window, after)
			if after > time.Second {
				t.FailedLate++
			}
		}
	}
	for i, b := range buckets {
		if b.failed*20 >= b.sent && b.failed > 0 {
			t.Sustained = max(t.Sustained, time.Duration(i+1)*time.Second)
		}
	}
	return t
}

// Options say what to run.
type Options struct {
	Self   string
	Trials int
	Cut    string        // the worker to cut
	For    time.Duration // probing after the cut
	RawDir string        // if set, each trial's probe log goes there
	Log    func(string, ...any)
}

const workload = `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: my-ippool, namespace: metallb-system}
spec: {addresses: [172.18.255.200-172.18.255.250]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: my-l2-advertise, namespace: metallb-system}
spec: {ipAddressPools: [my-ippool]}
%s---
apiVersion: v1
kind: Service
metadata: {name: bench-nodeloss, annotations: {metallb.io/loadBalancerIPs: "%s"}}
spec: {type: LoadBalancer, selector: {app: bench-nodeloss}, ports: [{port: 80}]}
`

// Run runs the trials in the lab as it is (its proxy: kube-proxy in either mode, or ironlb's).
func Run(ctx context.Context, l *lab.Lab, o Options) ([]Trial, error) {
	var workers []string
	for _, n := range l.Plan.Nodes {
		if n.Role == lab.RoleWorker {
			workers = append(workers, n.Name)
		}
	}
	// The address is announced by a worker that is not cut.
	var vip netip.Addr
	for i := 230; i <= 250 && !vip.IsValid(); i++ {
		a := netip.AddrFrom4([4]byte{172, 18, 255, byte(i)})
		if first := election.Rank(a, l.Plan.NodeNames())[0]; first != o.Cut && first != l.Plan.ControlPlane().Name {
			vip = a
		}
	}
	var pods strings.Builder
	for i, w := range workers {
		fmt.Fprintf(&pods, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: bench-nodeloss-%d, labels: {app: bench-nodeloss}}\nspec:\n  nodeName: %s\n  terminationGracePeriodSeconds: 0\n  containers: [{name: whoami, image: traefik/whoami}]\n", i+1, w)
	}
	manifest := fmt.Sprintf(workload, pods.String(), vip)
	if _, err := failover.Kubectl(ctx, o.Self, manifest, "apply", "-f", "-"); err != nil {
		return nil, err
	}
	defer func() {
		_, _ = failover.Kubectl(context.WithoutCancel(ctx), o.Self, manifest, "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	}()
	url := "http://" + vip.String() + "/"
	var trials []Trial
	for i := 1; i <= o.Trials; i++ {
		if _, err := failover.Kubectl(ctx, o.Self, "", "wait", "--for=condition=Ready", "--timeout=120s", "pod", "-l", "app=bench-nodeloss"); err != nil {
			return trials, err
		}
		if _, err := failover.Kubectl(ctx, o.Self, "", "wait", "--for=condition=Ready", "--timeout=120s", "node", o.Cut); err != nil {
			return trials, err
		}
		time.Sleep(3 * time.Second) // every proxy has the returned node's endpoint again
		probe := exec.CommandContext(ctx, o.Self, "lab", "exec", l.Plan.Config.ClientName, "--", o.Self, "probe",
			"--url", url, "--every", "10ms", "--for", (time.Second + o.For).String(), "--timeout", "200ms")
		var out bytes.Buffer
		probe.Stdout = &out
		if err := probe.Start(); err != nil {
			return trials, err
		}
		time.Sleep(time.Second)
		cut, err := l.PowerCut(ctx, o.Cut)
		if err != nil {
			_ = probe.Wait()
			return trials, err
		}
		notReady := time.Duration(-1)
		for time.Since(cut) < o.For {
			st, _ := failover.Kubectl(ctx, o.Self, "", "get", "node", o.Cut, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			if strings.TrimSpace(st) != "True" {
				notReady = time.Since(cut)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err := probe.Wait(); err != nil {
			return trials, fmt.Errorf("probe: %w", err)
		}
		if err := l.StartNode(ctx, o.Cut); err != nil {
			return trials, err
		}
		if o.RawDir != "" {
			_ = os.MkdirAll(o.RawDir, 0o755)
			_ = os.WriteFile(filepath.Join(o.RawDir, fmt.Sprintf("trial-%02d.log", i)), []byte(fmt.Sprintf("cut %d\n%s", cut.UnixNano(), out.String())), 0o644)
		}
		reqs, err := failover.Parse(&out)
		if err != nil {
			return trials, err
		}
		t := Analyze(reqs, cut)
		t.NotReadyAt = notReady
		trials = append(trials, t)
		o.Log("trial %d/%d: %d of %d requests failed (%d more than 1 s after the cut), the last %s after the cut, >= 5%% failing until %s; node NotReady after %s",
			i, o.Trials, t.Failed, t.Sent, t.FailedLate, ms(t.Window), ms(t.Sustained), ms(t.NotReadyAt))
	}
	return trials, nil
}

func ms(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// Table prints the trials and the median and max of the failure window.
func Table(w io.Writer, label string, ts []Trial) {
	fmt.Fprintf(w, "\n%s: %d power cuts of a worker holding one of 3 endpoints\n", label, len(ts))
	fmt.Fprintf(w, "%-6s %-14s %-18s %-20s %-22s %s\n", "trial", "failed/sent", "failed after 1 s", "last failure after", ">= 5% failing until", "node NotReady after")
	var win []time.Duration
	for i, t := range ts {
		fmt.Fprintf(w, "%-6d %-14s %-18d %-20s %-22s %s\n", i+1, fmt.Sprintf("%d/%d", t.Failed, t.Sent), t.FailedLate, ms(t.Window), ms(t.Sustained), ms(t.NotReadyAt))
		win = append(win, t.Sustained)
	}
	s := failover.Summarize(win)
	fmt.Fprintf(w, "outage (>= 5%% of requests failing, by second): median %s, max %s\n", ms(s.Median), ms(s.Max))
}
