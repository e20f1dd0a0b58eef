package failover

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	manifests "github.com/ironlb/ironlb/config"
	"github.com/ironlb/ironlb/internal/election"
	"github.com/ironlb/ironlb/internal/testbed/bench/benchcfg"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

//go:embed metallb-speaker.yaml
var metallbSpeaker string

// Options choose what a run measures.
type Options struct {
	Self       string        // the ironlb binary (for kubectl, exec and the probe)
	Trials     int           // power cuts
	Speaker    string        // "ironlb" or "metallb"
	Memberlist string        // MetalLB only: "default" or "tuned"
	Cut        string        // node to cut (it must rank first for the address)
	CutWindow  time.Duration // probing after the cut, before the node's return
	BackWindow time.Duration // probing after the return
	RawDir     string        // if set, each trial's probe log and instants are written there
	Log        func(format string, args ...any)
}

// tunedMemberlist is the fastest setting measured in ../shared/research/metallb-failover.md: every one
// of the 19 fields must be present, or MetalLB refuses the file.
const tunedMemberlist = `{"TCPTimeout":"10s","IndirectChecks":3,"RetransmitMult":4,"SuspicionMult":1,"SuspicionMaxTimeoutMult":6,
"PushPullInterval":"30s","ProbeTimeout":"25ms","ProbeInterval":"50ms","DisableTcpPings":false,"AwarenessMaxMultiplier":8,
"GossipNodes":3,"GossipInterval":"10ms","GossipToTheDeadTime":"30s","GossipVerifyIncoming":true,"GossipVerifyOutgoing":true,
"EnableCompression":true,"HandoffQueueDepth":1024,"UDPBufferSize":1400,"QueueCheckInterval":"30s"}`

// The layer-2 benchmarks' objects: the lab's pool and advertisement, replaced whole, and the
// workload.
const (
	poolYAML = `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: my-ippool, namespace: metallb-system}
spec:
  addresses: [%s]
`
	l2adYAML = `apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: my-l2advertise, namespace: metallb-system}
spec:
  ipAddressPools: [my-ippool]
`
	serviceYAML = `apiVersion: v1
kind: Service
metadata:
  name: bench-failover
  namespace: default
  annotations: {metallb.io/loadBalancerIPs: "%s"}
spec:
  type: LoadBalancer
  selector: {app: bench-web}
  ports: [{port: 80}]
`
)

// Objects returns exactly what a layer-2 run announcing vip needs: the pool, the advertisement and
// the workload. No BGPPeer, BGPAdvertisement, BFDProfile or Community stays (benchcfg.Owned): a
// peer left by `lab bench-bgp` with a BFD profile makes MetalLB's native speaker refuse its whole
// configuration, layer 2 included.
func Objects(vip netip.Addr) []benchcfg.Object {
	cfg := func(res, name, manifest string) benchcfg.Object {
		return benchcfg.Object{Ref: benchcfg.Ref{Resource: res, Namespace: benchcfg.Namespace, Name: name}, Manifest: manifest, Replace: true}
	}
	return []benchcfg.Object{
		cfg("ipaddresspool.metallb.io", "my-ippool", fmt.Sprintf(poolYAML, poolRange(vip))),
		cfg("l2advertisement.metallb.io", "my-l2advertise", l2adYAML),
		benchcfg.Workload,
		{Ref: benchcfg.Ref{Resource: "service", Namespace: "default", Name: "bench-failover"}, Manifest: fmt.Sprintf(serviceYAML, vip)},
	}
}

// setup makes the cluster hold exactly Objects(vip) and waits for the workload. It returns when it
// started writing the configuration, for ready.
func (o Options) setup(ctx context.Context, vip netip.Addr) (time.Time, error) {
	applied, err := benchcfg.Apply(ctx, o.benchKubectl, Objects(vip))
	if err != nil {
		return applied, err
	}
	return applied, o.kubectl(ctx, "", "rollout", "status", "deploy/bench-web", "--timeout=120s")
}

func (o Options) benchKubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	return Kubectl(ctx, o.Self, stdin, args...)
}

// ready waits until the node to be cut owns the address (waitOwner), and fails at once with the
// speakers' own words if they refuse the configuration applied at applied (benchcfg.Watch).
func (o Options) ready(ctx context.Context, applied time.Time, vip netip.Addr, url, mac string) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refused, owner := make(chan error, 1), make(chan error, 1)
	go func() { refused <- benchcfg.Watch(wctx, o.benchKubectl, applied, 2*time.Second) }()
	go func() { owner <- o.waitOwner(wctx, vip, url, mac) }()
	select {
	case err := <-owner:
		return err
	case err := <-refused:
		if err != nil {
			cancel()
			<-owner
			return err
		}
		return <-owner
	}
}

// The pool: the seed's 172.18.255.200-250; in the IPv6-only lab the same host parts (0xffc8-0xfffa)
// of the node subnet's /64, the IPv6 address's own.
const poolFirst, poolLast, addressFirst = 200, 250, 230

// poolRange is the pool holding vip, as an IPAddressPool range.
func poolRange(vip netip.Addr) string {
	if vip.Is4() {
		return fmt.Sprintf("172.18.255.%d-172.18.255.%d", poolFirst, poolLast)
	}
	base := netip.PrefixFrom(vip, 64).Masked().Addr()
	return fmt.Sprintf("%s-%s", hostPart(base, 0xff00+poolFirst), hostPart(base, 0xff00+poolLast))
}

// hostPart is base with its last two bytes set to h.
func hostPart(base netip.Addr, h uint16) netip.Addr {
	b := base.As16()
	b[14], b[15] = byte(h>>8), byte(h)
	return netip.AddrFrom16(b)
}

// Address returns the first pool address that MetalLB's ranking gives to node among nodes, in the
// family of the lab's node subnet (an IPv6 subnet: the IPv6-only lab).
func Address(node string, nodes []string, subnet netip.Prefix) (netip.Addr, error) {
	for i := addressFirst; i <= poolLast; i++ {
		a := netip.AddrFrom4([4]byte{172, 18, 255, byte(i)})
		if subnet.Addr().Is6() {
			a = hostPart(subnet.Masked().Addr(), uint16(0xff00+i))
		}
		if election.Rank(a, nodes)[0] == node {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no address in the pool's .%d-.%d ranks %s first", addressFirst, poolLast, node)
}

// serviceURL is the URL the probe requests: vip's port 80 (bracketed when IPv6).
func serviceURL(vip netip.Addr) string { return "http://" + netip.AddrPortFrom(vip, 80).String() + "/" }

// Run sets the lab up for the chosen speaker and runs the trials, logging each.
func Run(ctx context.Context, l *lab.Lab, o Options) ([]Trial, error) {
	recs, err := RunRecords(ctx, l, o)
	return Trials(recs), err
}

// RunRecords is Run keeping each trial's probe log and instants beside its figures (for plots).
func RunRecords(ctx context.Context, l *lab.Lab, o Options) ([]Record, error) {
	nodes := l.Plan.NodeNames()
	cutHost, ok := l.Plan.Host(o.Cut)
	if !ok {
		return nil, fmt.Errorf("no node %q", o.Cut)
	}
	cutMAC := cutHost.MAC
	vip, err := Address(o.Cut, nodes, l.Plan.Config.NodeNet())
	if err != nil {
		return nil, err
	}
	if err := o.useSpeaker(ctx); err != nil {
		return nil, err
	}
	applied, err := o.setup(ctx, vip)
	if err != nil {
		return nil, err
	}
	url := serviceURL(vip)
	if err := o.ready(ctx, applied, vip, url, cutMAC); err != nil {
		return nil, err
	}
	var trials []Record
	for i := 1; i <= o.Trials; i++ {
		if err := o.waitOwner(ctx, vip, url, cutMAC); err != nil {
			return trials, fmt.Errorf("before trial %d: %w", i, err)
		}
		total := time.Second + o.CutWindow + o.BackWindow
		probe := exec.CommandContext(ctx, o.Self, "lab", "exec", l.Plan.Config.ClientName, "--", o.Self, "probe",
			"--addr", vip.String(), "--url", url, "--for", total.String(), "--timeout", "250ms")
		var out bytes.Buffer
		probe.Stdout = &out
		if err := probe.Start(); err != nil {
			return trials, err
		}
		time.Sleep(time.Second)
		// The power cut: the link goes down first (timed at the kernel request), then the node's
		// processes are killed.
		cut, err := l.PowerCut(ctx, o.Cut)
		if err != nil {
			_ = probe.Wait()
			return trials, err
		}
		time.Sleep(time.Until(cut.Add(o.CutWindow)))
		back := time.Now()
		if err := l.StartNode(ctx, o.Cut); err != nil {
			_ = probe.Wait()
			return trials, err
		}
		if err := probe.Wait(); err != nil {
			return trials, fmt.Errorf("probe: %w", err)
		}
		if o.RawDir != "" {
			_ = os.MkdirAll(o.RawDir, 0o755)
			raw := fmt.Sprintf("cut %d\nback %d\n%s", cut.UnixNano(), back.UnixNano(), out.String())
			_ = os.WriteFile(filepath.Join(o.RawDir, fmt.Sprintf("trial-%02d.log", i)), []byte(raw), 0o644)
		}
		ev, err := Parse(&out)
		if err != nil {
			return trials, err
		}
		end := back.Add(o.BackWindow)
		t := Analyze(ev, cut, back, end, cutMAC)
		trials = append(trials, Record{Trial: t, Cut: cut, Back: back, End: end, CutMAC: cutMAC, Events: ev})
		o.Log("trial %2d/%d: ARP %s  GARP %s  HTTP gap %s (%d failed)  | return: HTTP gap %s (%d failed), ARP gap %s, taken back after %s, answerers %d",
			i, o.Trials, ms(t.ARP), ms(t.GARP), ms(t.HTTPGap), t.HTTPFailed, ms(t.BackGap), t.BackFailed, ms(t.BackARPGap), ms(t.TakeBack), t.Answerers)
	}
	return trials, nil
}

// UseSpeaker runs o.Speaker's DaemonSet (ironlb, or MetalLB v0.16.1 with o.Memberlist) instead of the other.
func UseSpeaker(ctx context.Context, o Options) error { return o.useSpeaker(ctx) }

// Restore puts ironlb's speaker back (after a MetalLB run).
func Restore(ctx context.Context, o Options) error {
	o.Speaker = "ironlb"
	return o.useSpeaker(ctx)
}

func (o Options) useSpeaker(ctx context.Context) error {
	sp, err := manifests.Bundle("speaker")
	if err != nil {
		return err
	}
	switch o.Speaker {
	case "ironlb":
		_ = o.kubectl(ctx, metallbSpeaker, "delete", "--ignore-not-found", "-f", "-")
		if err := o.kubectl(ctx, sp, "apply", "-f", "-"); err != nil {
			return err
		}
		return o.kubectl(ctx, "", "-n", "metallb-system", "rollout", "status", "ds/ironlb-speaker", "--timeout=120s")
	case "metallb":
		_ = o.kubectl(ctx, sp, "delete", "--ignore-not-found", "-f", "-")
		cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: metallb-memberlist-config, namespace: metallb-system}\ndata:\n  config.json: '" +
			strings.ReplaceAll(tunedMemberlist, "\n", "") + "'\n"
		switch o.Memberlist {
		case "tuned":
			if err := o.kubectl(ctx, cm, "apply", "-f", "-"); err != nil {
				return err
			}
		case "default", "":
			_ = o.kubectl(ctx, cm, "delete", "--ignore-not-found", "-f", "-")
		default:
			return fmt.Errorf("memberlist %q: want default or tuned", o.Memberlist)
		}
		// Restart the speakers so they read the memberlist setting.
		_ = o.kubectl(ctx, "", "-n", "metallb-system", "delete", "ds", "metallb-speaker", "--ignore-not-found", "--wait")
		if err := o.kubectl(ctx, metallbSpeaker, "apply", "-f", "-"); err != nil {
			return err
		}
		return o.kubectl(ctx, "", "-n", "metallb-system", "rollout", "status", "ds/metallb-speaker", "--timeout=120s")
	}
	return fmt.Errorf("speaker %q: want ironlb or metallb", o.Speaker)
}

func (o Options) kubectl(ctx context.Context, stdin string, args ...string) error {
	_, err := Kubectl(ctx, o.Self, stdin, args...)
	return err
}

// Kubectl runs `self lab kubectl args...` with stdin and returns its combined output; the lab benchmarks
// drive the cluster through it.
func Kubectl(ctx context.Context, self, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, self, append([]string{"lab", "kubectl"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// waitOwner waits until the address answers HTTP from the client and the node to be cut answers ARP for
// it (after a return, ironlb's hold-down may keep it elsewhere for a while).
func (o Options) waitOwner(ctx context.Context, vip netip.Addr, url, mac string) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		cmd := exec.CommandContext(ctx, o.Self, "lab", "exec", "mypc", "--", o.Self, "probe", "--addr", vip.String(), "--url", url, "--for", "300ms", "--every", "100ms")
		out, _ := cmd.Output()
		ev, _ := Parse(bytes.NewReader(out))
		okHTTP, owner := false, true
		seen := false
		for _, e := range ev {
			switch e.Kind {
			case "http":
				okHTTP = okHTTP || e.OK
			case "reply":
				seen = true
				owner = owner && e.MAC == mac
			}
		}
		if okHTTP && seen && owner {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served by %s after 90 s (HTTP ok %v)", vip, mac, okHTTP)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// Table writes the summary table of a run.
func Table(w io.Writer, label string, ts []Trial) {
	col := func(f func(Trial) time.Duration) Stats {
		var ds []time.Duration
		for _, t := range ts {
			ds = append(ds, f(t))
		}
		return Summarize(ds)
	}
	fails, backFails, multi := 0, 0, 0
	for _, t := range ts {
		fails += t.HTTPFailed
		backFails += t.BackFailed
		if t.Answerers != 1 {
			multi++
		}
	}
	fmt.Fprintf(w, "\n%s: %d trials\n", label, len(ts))
	fmt.Fprintf(w, "| measure | median | p90 | p99 | max |\n|---|---|---|---|---|\n")
	for _, r := range []struct {
		name string
		f    func(Trial) time.Duration
	}{
		{"cut -> first ARP answer from the new node", func(t Trial) time.Duration { return t.ARP }},
		{"cut -> first gratuitous ARP from the new node", func(t Trial) time.Duration { return t.GARP }},
		{"HTTP: longest gap between successful requests (cut)", func(t Trial) time.Duration { return t.HTTPGap }},
		{"HTTP: longest gap between successful requests (return)", func(t Trial) time.Duration { return t.BackGap }},
		{"ARP: longest time without an answer (return)", func(t Trial) time.Duration { return t.BackARPGap }},
		{"return -> address taken back", func(t Trial) time.Duration { return t.TakeBack }},
	} {
		s := col(r.f)
		if s.N == 0 {
			fmt.Fprintf(w, "| %s | - | - | - | - |\n", r.name)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.name, ms(s.Median), ms(s.P90), ms(s.P99), ms(s.Max))
	}
	fmt.Fprintf(w, "failed requests: %d after cuts, %d after returns; trials ending with other than one answering MAC: %d\n", fails, backFails, multi)
}

// NodeMACs maps each node's MAC to its name, to name ARP senders in pictures.
func NodeMACs(l *lab.Lab) map[string]string {
	out := map[string]string{}
	for _, n := range l.Plan.NodeNames() {
		if h, ok := l.Plan.Host(n); ok {
			out[h.MAC] = n
		}
	}
	return out
}
