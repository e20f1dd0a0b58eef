package connbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/bench/benchcfg"
	"github.com/ironlb/ironlb/internal/testbed/bench/bgpfail"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/connprobe"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// The events a trial can be about.
const (
	EventPowerCut = "power-cut" // the entry node loses power; it returns after the trial
	EventSIGTERM  = "sigterm"   // the entry node's speaker is deleted gracefully (SIGTERM): a planned handover
	EventReturn   = "return"    // the entry node, cut before the flows opened, powers back on
)

// Events lists the events in the order they run.
var Events = []string{EventPowerCut, EventSIGTERM, EventReturn}

// Options say what to run.
type Options struct {
	Self          string   // the ironlb binary
	Trials        int      // per configuration and event
	Modes         []string // "l2", "bgp"
	Speakers      []string // "ironlb", "metallb"
	ExternalModes []string // the Service's ironlb.io/external-mode: "snat", "dsr"
	Events        []string
	Cut           string        // the entry node (layer 2: the announcer; BGP: one of the router's next hops)
	TCP, UDP      int           // flows
	Every         time.Duration // request interval per flow
	Settle        time.Duration // flows held before the event
	Window        time.Duration // flows held after the event (power cut, SIGTERM)
	ReturnWindow  time.Duration // flows held after the node's return
	Timeout       time.Duration // an answer later than this breaks a flow
	RawDir        string        // each trial's client report (and, BGP, the router's next hops per flow) go here
	Log           func(format string, args ...any)
}

// Check refuses options that cannot run.
func (o Options) Check() error {
	var errs []string
	for _, m := range o.Modes {
		if m != "l2" && m != "bgp" {
			errs = append(errs, fmt.Sprintf("--mode %q: want l2 or bgp", m))
		}
	}
	for _, s := range o.Speakers {
		if s != "ironlb" && s != "metallb" {
			errs = append(errs, fmt.Sprintf("--speaker %q: want ironlb or metallb", s))
		}
	}
	for _, x := range o.ExternalModes {
		if x != "snat" && x != "dsr" {
			errs = append(errs, fmt.Sprintf("--external-mode %q: want snat or dsr", x))
		}
	}
	for _, e := range o.Events {
		if e != EventPowerCut && e != EventSIGTERM && e != EventReturn {
			errs = append(errs, fmt.Sprintf("--event %q: want %s", e, strings.Join(Events, ", ")))
		}
	}
	if len(o.Modes) == 0 || len(o.Speakers) == 0 || len(o.ExternalModes) == 0 || len(o.Events) == 0 {
		errs = append(errs, "--mode, --speaker, --external-mode and --event each need a value")
	}
	// Every flow left without answers must be counted broken before the client stops.
	if (slices.Contains(o.Events, EventPowerCut) || slices.Contains(o.Events, EventSIGTERM)) && o.Window <= o.Timeout {
		errs = append(errs, fmt.Sprintf("--window (%s) must be longer than --timeout (%s)", o.Window, o.Timeout))
	}
	if slices.Contains(o.Events, EventReturn) && o.ReturnWindow <= o.Timeout {
		errs = append(errs, fmt.Sprintf("--return-window (%s) must be longer than --timeout (%s)", o.ReturnWindow, o.Timeout))
	}
	if o.Trials < 1 || o.TCP < 0 || o.UDP < 0 || o.TCP+o.UDP == 0 || o.Every <= 0 || o.Settle <= 0 {
		errs = append(errs, "--trials, --every and --settle must be positive, and --tcp plus --udp more than 0")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// Config is one side of the side-by-side comparison.
type Config struct{ Mode, Speaker, ExternalMode string }

// Label names the configuration with the lab's proxy.
func (c Config) Label(proxy string) string {
	return fmt.Sprintf("%s, %s speaker, %s, %s", c.Mode, c.Speaker, proxy, c.ExternalMode)
}

// Configs is the cross product of the options' modes, speakers and external modes, in that order.
func (o Options) Configs() []Config {
	var out []Config
	for _, m := range o.Modes {
		for _, s := range o.Speakers {
			for _, x := range o.ExternalModes {
				out = append(out, Config{Mode: m, Speaker: s, ExternalMode: x})
			}
		}
	}
	return out
}

// ProxyLabel names the lab's Service dataplane.
func ProxyLabel(l *lab.Lab) string {
	if l.Plan.Config.ProxyMode == lab.ProxyIronLB {
		return "ironlb proxy"
	}
	return "kube-proxy " + l.Plan.Config.ProxyMode
}

// The benchmark's Service: TCP 80 and whoami's UDP port, the chosen external mode.
const (
	serviceName = "bench-connections"
	serviceYAML = `apiVersion: v1
kind: Service
metadata:
  name: bench-connections
  namespace: default
  annotations: {metallb.io/loadBalancerIPs: "%s", ironlb.io/external-mode: "%s"}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Cluster
  selector: {app: bench-web}
  ports: [{name: http, port: 80, protocol: TCP}, {name: udp, port: %d, protocol: UDP}]
`
)

// bgpVIP is the BGP runs' address: in `lab bench-bgp`'s pool, beside its address.
var bgpVIP = netip.MustParseAddr("172.30.0.11")

// otherServices are the other benchmarks' Services, which hold this one's addresses: they go.
var otherServices = []string{"bench-failover", "bench-bgp"}

// Objects returns exactly what a run of c announcing vip needs: layer 2, `lab bench-failover`'s pool
// and advertisement; BGP, `lab bench-bgp`'s pool, advertisement, router peer (with a 50 ms BFD profile
// for ironlb's speaker; MetalLB's native BGP mode has none); the shared workload; the Service.
// benchcfg deletes every other BGPPeer, BGPAdvertisement, BFDProfile and Community.
func Objects(c Config, vip netip.Addr) []benchcfg.Object {
	var base []benchcfg.Object
	if c.Mode == "bgp" {
		bo := bgpOptions(c, "")
		base = bo.Objects()
	} else {
		base = failover.Objects(vip)
	}
	var out []benchcfg.Object
	for _, o := range base {
		if o.Resource != "service" {
			out = append(out, o)
		}
	}
	return append(out, benchcfg.Object{Ref: benchcfg.Ref{Resource: "service", Namespace: "default", Name: serviceName},
		Manifest: fmt.Sprintf(serviceYAML, vip, c.ExternalMode, benchcfg.UDPPort)})
}

func bgpOptions(c Config, self string) bgpfail.Options {
	bo := bgpfail.Options{Self: self, Speaker: c.Speaker, HoldTime: 9 * time.Second}
	if c.Speaker == "ironlb" {
		bo.BFD = 50 * time.Millisecond
	}
	return bo
}

// RunAll runs every configuration's trials of every event and returns them, one Run per configuration
// and event, as far as it got.
func RunAll(ctx context.Context, l *lab.Lab, o Options) ([]Run, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	cutHost, ok := l.Plan.Host(o.Cut)
	if !ok || !cutHost.IsNode() {
		return nil, fmt.Errorf("no node %q", o.Cut)
	}
	var runs []Run
	for ci, c := range o.Configs() {
		if c.Mode == "bgp" && l.Plan.Router.Name == "" {
			return runs, fmt.Errorf("--mode bgp: the lab has no router: bring it up with `ironlb lab up --bgp`")
		}
		s, err := o.setup(ctx, l, c)
		if err == nil {
			s.udpBase = strconv.Itoa(udpBase + 100*ci)
		}
		if err != nil {
			return runs, fmt.Errorf("%s: %w", c.Label(ProxyLabel(l)), err)
		}
		for _, ev := range o.Events {
			r := Run{Label: c.Label(ProxyLabel(l)), Event: ev}
			o.Log("bench-connections: %s, %s, %d trials, %d TCP + %d UDP flows from %s, a request every %s", r.Label, ev, o.Trials, o.TCP, o.UDP, s.client, o.Every)
			for i := 1; i <= o.Trials; i++ {
				t, err := s.trial(ctx, ev, i)
				if err != nil {
					s.close()
					return append(runs, r), fmt.Errorf("%s, %s, trial %d: %w", r.Label, ev, i, err)
				}
				r.Trials = append(r.Trials, t)
				o.Log("trial %2d/%d: %s", i, o.Trials, TrialLine(t))
			}
			runs = append(runs, r)
		}
		s.close()
	}
	return runs, nil
}

// session is one configuration set up in the lab.
type session struct {
	o       Options
	l       *lab.Lab
	c       Config
	vip     netip.Addr
	client  string
	cut     lab.Host
	mon     *bgpfail.Monitor // BGP: the router's route to vip
	rawName string
	udpBase string // the UDP flows' first source port
}

// udpBase is the first configuration's first UDP source port; each configuration has its own
// hundred. The same source ports in the next configuration would find the conntrack entries of the
// last one's UDP flows still alive on the nodes (a UDP stream's timeout is 120 s), and a flow
// keeps its entry's NAT: after a snat run, a dsr run's UDP flows would still be masqueraded (they
// were, in the first run with both).
const udpBase = 42000

func (s *session) close() {
	if s.mon != nil {
		s.mon.Close()
	}
}

func (o Options) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	return failover.Kubectl(ctx, o.Self, stdin, args...)
}

// setup runs c's speaker and makes the cluster hold exactly Objects(c), then waits until the flows'
// path works.
func (o Options) setup(ctx context.Context, l *lab.Lab, c Config) (*session, error) {
	cut, _ := l.Plan.Host(o.Cut)
	s := &session{o: o, l: l, c: c, cut: cut, client: l.Plan.Config.ClientName,
		rawName: strings.NewReplacer(", ", "-", " ", "-").Replace(c.Label(ProxyLabel(l)))}
	if c.Mode == "bgp" {
		s.vip, s.client = bgpVIP, lab.Client2Name
	} else {
		vip, err := failover.Address(o.Cut, l.Plan.NodeNames(), l.Plan.Config.NodeNet())
		if err != nil {
			return nil, err
		}
		s.vip = vip
	}
	if err := failover.UseSpeaker(ctx, failover.Options{Self: o.Self, Speaker: c.Speaker, Memberlist: "default", Log: o.Log}); err != nil {
		return nil, err
	}
	if _, err := o.kubectl(ctx, "", append([]string{"delete", "-n", "default", "--ignore-not-found", "--wait"}, prefixed("service/", otherServices)...)...); err != nil {
		return nil, err
	}
	applied, err := benchcfg.Apply(ctx, o.kubectl, Objects(c, s.vip))
	if err != nil {
		return nil, err
	}
	if _, err := o.kubectl(ctx, "", "rollout", "status", "deploy/bench-web", "--timeout=120s"); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refused := make(chan error, 1)
	go func() { refused <- benchcfg.Watch(wctx, o.kubectl, applied, 2*time.Second) }()
	if c.Mode == "bgp" {
		mon, err := bgpfail.Watch(l, s.vip)
		if err != nil {
			return nil, err
		}
		s.mon = mon
		if err := mon.WaitNextHopsOr(wctx, bgpfail.NodeAddrs(l), 120*time.Second, refused); err != nil {
			s.close()
			return nil, err
		}
		return s, nil
	}
	owner := make(chan error, 1)
	go func() {
		owner <- s.waitARP(wctx, func(mac string) bool { return mac == cut.MAC }, "the entry node "+cut.Name)
	}()
	select {
	case err := <-owner:
		return s, err
	case err := <-refused:
		if err != nil {
			return nil, err
		}
		return s, <-owner
	}
}

func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

// waitARP waits (90 s at most) until the client's ARP answers for the address all come from a MAC
// that want accepts and a request through it succeeds.
func (s *session) waitARP(ctx context.Context, want func(mac string) bool, what string) error {
	deadline := time.Now().Add(90 * time.Second)
	url := "http://" + netip.AddrPortFrom(s.vip, 80).String() + "/"
	for {
		out, _ := exec.CommandContext(ctx, s.o.Self, "lab", "exec", s.l.Plan.Config.ClientName, "--", s.o.Self, "probe",
			"--addr", s.vip.String(), "--url", url, "--for", "300ms", "--every", "100ms").Output()
		ev, _ := failover.Parse(bytes.NewReader(out))
		okHTTP, seen, owner := false, false, true
		for _, e := range ev {
			switch e.Kind {
			case "http":
				okHTTP = okHTTP || e.OK
			case "reply":
				seen = true
				owner = owner && want(e.MAC)
			}
		}
		if okHTTP && seen && owner {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not answered by %s after 90 s (HTTP ok %v)", s.vip, what, okHTTP)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// steady waits until the entry node carries the address (layer 2: it answers ARP; BGP: the router
// has every node as a next hop, and BFD is up with the entry node when the speaker runs it), or,
// with cut set, until the address has moved off the cut entry node.
func (s *session) steady(ctx context.Context, cut bool) error {
	if s.c.Mode == "bgp" {
		var want []netip.Addr
		for _, a := range bgpfail.NodeAddrs(s.l) {
			if !cut || a != s.cut.Addr {
				want = append(want, a)
			}
		}
		if err := s.mon.WaitNextHops(ctx, want, 120*time.Second); err != nil {
			return err
		}
		if !cut && s.c.Speaker == "ironlb" {
			return bgpfail.WaitBFDUp(ctx, s.l, s.cut.Addr, 60*time.Second)
		}
		return nil
	}
	if cut {
		return s.waitARP(ctx, func(mac string) bool { return mac != s.cut.MAC }, "a node other than "+s.cut.Name)
	}
	return s.waitARP(ctx, func(mac string) bool { return mac == s.cut.MAC }, "the entry node "+s.cut.Name)
}

// pathWorks waits (60 s at most) until one TCP and one UDP flow both get answers for a moment: the
// dataplane of every protocol is ready, not only the address's announcement.
func (s *session) pathWorks(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := s.probe(ctx, 1, 1, 700*time.Millisecond, "42990")
		ok := err == nil && len(r.Flows) == 2
		for _, f := range r.Flows {
			ok = ok && f.Failed.IsZero() && f.Answers > 0
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no TCP and UDP answers from %s for 60 s (last: %+v, %v)", s.vip, r.Flows, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// probeCmd is the client command holding tcp and udp flows for d.
func (s *session) probeCmd(ctx context.Context, tcp, udp int, d time.Duration, udpBase string) *exec.Cmd {
	return exec.CommandContext(ctx, s.o.Self, "lab", "exec", s.client, "--", s.o.Self, "connprobe",
		"--addr", s.vip.String(), "--tcp", strconv.Itoa(tcp), "--udp", strconv.Itoa(udp), "--udp-port", strconv.Itoa(benchcfg.UDPPort),
		"--udp-base", udpBase, "--every", s.o.Every.String(), "--for", d.String(), "--timeout", s.o.Timeout.String())
}

func (s *session) probe(ctx context.Context, tcp, udp int, d time.Duration, udpBase string) (connprobe.Result, error) {
	out, err := s.probeCmd(ctx, tcp, udp, d, udpBase).Output()
	if err != nil {
		return connprobe.Result{}, err
	}
	return connprobe.Parse(bytes.NewReader(out))
}

// trial runs one trial of event ev.
func (s *session) trial(ctx context.Context, ev string, i int) (_ Trial, err error) {
	if err := s.steady(ctx, false); err != nil {
		return Trial{}, fmt.Errorf("before the trial: %w", err)
	}
	// The entry node is powered on again however the trial ends, so that the next configuration
	// (or the lab's teardown) finds it up.
	down := false
	defer func() {
		if down {
			if serr := s.l.StartNode(context.WithoutCancel(ctx), s.o.Cut); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	window := s.o.Window
	if ev == EventReturn {
		window = s.o.ReturnWindow
		down = true
		if _, err := s.l.PowerCut(ctx, s.o.Cut); err != nil {
			return Trial{}, err
		}
		if err := s.steady(ctx, true); err != nil {
			return Trial{}, fmt.Errorf("after cutting %s before its return: %w", s.o.Cut, err)
		}
	}
	if err := s.pathWorks(ctx); err != nil {
		return Trial{}, err
	}
	var sn *Sniffer
	if s.c.Mode == "bgp" { // which node the router sends each flow's packets to, as it sends them
		if sn, err = Sniff(lab.NetNSPath(s.l.Plan.Router.Name), "eth0", s.vip); err != nil {
			return Trial{}, fmt.Errorf("watching the router's packets: %w", err)
		}
		defer sn.Close()
	}
	cmd := s.probeCmd(ctx, s.o.TCP, s.o.UDP, s.o.Settle+window, s.udpBase)
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return Trial{}, err
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return Trial{}, err
	}
	// The settle time counts from when every flow is open: under load the client's own start and
	// 200 connections' handshakes took 1.7 s in the lab, and a SYN sent at the cut waits 1 s for its
	// retransmission, so a fixed wait after the start cut some flows before they were open.
	if err := waitReady(stderr, s.o.Timeout+60*time.Second); err != nil {
		_ = cmd.Wait()
		return Trial{}, fmt.Errorf("client: %w", err)
	}
	time.Sleep(s.o.Settle)
	event, err := s.event(ctx, ev)
	switch ev {
	case EventPowerCut:
		down = true // the node comes back after the trial
	case EventReturn:
		down = err != nil
	}
	if err != nil {
		_ = cmd.Wait()
		return Trial{}, err
	}
	time.Sleep(time.Until(event.Add(window)))
	windowEnd := time.Now()
	werr := cmd.Wait()
	if down {
		down = false
		if err := s.l.StartNode(ctx, s.o.Cut); err != nil {
			return Trial{}, err
		}
	}
	if werr != nil {
		return Trial{}, fmt.Errorf("client: %w", werr)
	}
	res, err := connprobe.Parse(bytes.NewReader(out.Bytes()))
	if err != nil {
		return Trial{}, err
	}
	t := Analyze(res, event)
	if sn != nil {
		moved, compared := sn.Hops.Moved(event, windowEnd)
		if compared > 0 { // else not measured: -1
			t.RouterMoved = moved
		}
		if compared < t.TCP+t.UDP {
			s.o.Log("trial %d: the router's packets showed the next hop before and after the event of %d of %d flows", i, compared, t.TCP+t.UDP)
		}
	}
	if s.c.Mode == "bgp" {
		s.falseBFDDowns(i, started, event, windowEnd)
	}
	if s.o.RawDir != "" {
		if err := os.MkdirAll(s.o.RawDir, 0o755); err != nil {
			return t, err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "config %s\nevent %s %d\n", s.c.Label(ProxyLabel(s.l)), ev, event.UnixNano())
		if sn != nil {
			b.WriteString(sn.Hops.String())
		}
		b.Write(out.Bytes())
		name := filepath.Join(s.o.RawDir, fmt.Sprintf("%s-%s-%02d.log", s.rawName, ev, i))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			return t, err
		}
	}
	return t, nil
}

// falseBFDDowns logs each BFD session of a node other than the cut one that the router's bfdd
// declared down while trial i's flows ran. In the lab, under load, bfdd once took two surviving
// nodes down at the same instant (it had not run for the 150 ms detection time) and BGP withdrew
// every path for 12-15 s: flows broken in such a trial are the lab's, not the dataplane's.
func (s *session) falseBFDDowns(i int, from, event, to time.Time) {
	b, err := os.ReadFile(s.l.RouterLog("bfdd"))
	if err != nil {
		return
	}
	for _, a := range bgpfail.NodeAddrs(s.l) {
		if a == s.cut.Addr {
			continue
		}
		if at, ok := bgpfail.BFDDownAt(string(b), a, from); ok && at.Before(to) {
			s.o.Log("trial %d: the router's BFD declared %s (not the cut node) down %+.3fs from the event: its paths were withdrawn, and flows broken in this trial may be the lab's load", i, a, at.Sub(event).Seconds())
		}
	}
}

// waitReady reads the client's standard error until its ready line (the flows are open), within d,
// and then drains the rest in the background.
func waitReady(stderr io.Reader, d time.Duration) error {
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		closed := false
		for sc.Scan() { // a client that ends without the line is found out by its exit status
			if !closed && strings.TrimSpace(sc.Text()) == connprobe.ReadyLine {
				close(ready)
				closed = true
			}
		}
		if !closed {
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-time.After(d):
		return fmt.Errorf("the flows were not open after %s", d)
	}
	return nil
}

// event makes ev happen and returns its instant.
func (s *session) event(ctx context.Context, ev string) (time.Time, error) {
	switch ev {
	case EventPowerCut:
		return s.l.PowerCut(ctx, s.o.Cut)
	case EventReturn:
		at := time.Now()
		return at, s.l.StartNode(ctx, s.o.Cut)
	case EventSIGTERM:
		pod, err := s.o.kubectl(ctx, "", "get", "pods", "-n", benchcfg.Namespace, "-l", "component=speaker",
			"--field-selector", "spec.nodeName="+s.o.Cut, "-o", "name")
		pod = strings.TrimSpace(pod)
		if err != nil || pod == "" || strings.Contains(pod, "\n") {
			return time.Time{}, fmt.Errorf("the speaker pod on %s: %q %v", s.o.Cut, pod, err)
		}
		at := time.Now()
		_, err = s.o.kubectl(ctx, "", "delete", "-n", benchcfg.Namespace, pod, "--wait=false")
		return at, err
	}
	return time.Time{}, fmt.Errorf("event %q", ev)
}
