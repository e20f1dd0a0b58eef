package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/attack"
	"github.com/ironlb/ironlb/internal/testbed/bench/chaos"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
	"github.com/ironlb/ironlb/internal/testbed/bench/proxybench"
	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// nodeIP is a lab node's address on the bridge (nodeAddr in bgp_test.go).
func nodeIP(node string) netip.Addr { return netip.MustParseAddr(nodeAddr[node]) }

const (
	mypcAddr      = "172.18.0.100"
	heartbeatPort = 7947
	// rejectedMetric counts the heartbeats a speaker refused, by reason (malformed, bad-mac, no-key,
	// replay, stale, unknown-node, wrong-source). Branch auth adds it.
	rejectedMetric = "ironlb_speaker_heartbeat_rejected_total"
)

// Issue 18: heartbeats forged, replayed and in unknown names, sent from mypc for a few seconds, change
// nothing: no speaker's view of its peers, no election (ServiceL2Status), no answering MAC, no
// failover; and the speakers count what they refused. Until the speakers authenticate heartbeats
// (branch auth: HMAC, replay protection, source checks), this test fails: that is the attack working.
// The attacker is package attack, which `ironlb lab chaos` also uses (forged-heartbeat,
// replayed-heartbeat).
func TestHeartbeatAttack(t *testing.T) {
	kubectlApply(t, "testdata/webpods.yaml")
	kubectlApply(t, "testdata/seed000-metallb.yaml")
	waitReady(t, "pod/webpod1", "pod/webpod2")
	vip := addrRankedFirst(t, "myk8s-worker2")
	applyService(t, "attack-svc", vip, nil, "")
	// The baseline is a settled election: right after lab up a node may still be in its hold-down,
	// and an address it takes back is answered by two nodes while the old one lingers.
	announcer := ""
	var macsBefore []string
	eventually(t, 30*time.Second, "attack-svc has one announcer, which alone answers ARP", func() error {
		an := l2Announcers(t)["attack-svc"]
		if len(an) != 1 {
			return fmt.Errorf("ServiceL2Status nodes %v", an)
		}
		announcer = an[0]
		macsBefore = arpingMACs(t, vip)
		if len(macsBefore) != 1 || macNode[macsBefore[0]] != announcer {
			return fmt.Errorf("%s answered by %v, announced by %s", vip, macsBefore, announcer)
		}
		return nil
	})
	rejectedBefore, exported := rejected(t)

	// The probe and the election sampler run across the attack.
	probeOut := make(chan string, 1)
	go func() {
		out, _ := labExec("mypc", ironlb, "probe", "--addr", vip, "--every", "100ms", "--for", "14s")
		probeOut <- out
	}()
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	var elections []chaos.Election
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			an := l2Announcers(t)["attack-svc"]
			e := chaos.Election{At: time.Now(), Service: "attack-svc"}
			if len(an) == 1 {
				e.Node = an[0]
			}
			mu.Lock()
			elections = append(elections, e)
			mu.Unlock()
			time.Sleep(500 * time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second)

	// Real heartbeats, captured on the announcer's link before the attack.
	caps, err := attack.Capture(context.Background(), announcer, "eth0", heartbeatPort, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(attack.From(caps, nodeIP(announcer))) == 0 {
		t.Fatalf("no heartbeat of %s captured on its eth0 (%d datagrams)", announcer, len(caps))
	}
	s, err := attack.DialUDP("mypc", netip.AddrPortFrom(netip.MustParseAddr(mypcAddr), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	send := func(payloads [][]byte, every, d time.Duration) int {
		n := 0
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(every) {
			for _, p := range payloads {
				for _, node := range labNodes {
					if s.Send(netip.AddrPortFrom(nodeIP(node), heartbeatPort), p) == nil {
						n++
					}
				}
			}
		}
		return n
	}
	from := time.Now()
	forged := send([][]byte{attack.Leaving(announcer, "eth0", time.Now()), attack.NotReady(announcer, "eth0", time.Now())}, 10*time.Millisecond, 2*time.Second)
	ghosts := send(attack.Ghosts("e2e-ghost", 300, time.Now()), 500*time.Millisecond, time.Second)
	replayed := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, d := range caps {
			if s.Send(d.Dst, d.Payload) == nil {
				replayed++
			}
		}
	}
	to := time.Now()
	t.Logf("attack %s-%s: %d forged (%s leaving, not ready), %d in 300 unknown names, %d replayed of %d captured",
		from.Format("15:04:05.000"), to.Format("15:04:05.000"), forged, announcer, ghosts, replayed, len(caps))
	time.Sleep(3 * time.Second)
	stop()
	wg.Wait()

	spans := []chaos.Span{{From: from, To: to, Fault: "the attack", Node: announcer, Kind: chaos.SpanAttack}}
	slack := 3 * time.Second
	var findings []chaos.Finding
	// (a) who answers ARP: the probe across the attack, and arping after it.
	ev, err := failover.Parse(strings.NewReader(<-probeOut))
	if err != nil {
		t.Fatal(err)
	}
	findings = append(findings, chaos.JudgeFailovers(chaos.Failovers(netip.MustParseAddr(vip), ev, from.Add(-2*time.Second), to.Add(slack), 100*time.Millisecond), macNode, spans, slack)...)
	findings = append(findings, chaos.JudgeDisturbances(chaos.Disturbances(netip.MustParseAddr(vip), ev, from.Add(-2*time.Second), to.Add(slack), 100*time.Millisecond), macNode, spans, slack, 500*time.Millisecond, time.Second)...)
	if after := arpingMACs(t, vip); !slices.Equal(after, macsBefore) {
		t.Errorf("after the attack %s is answered by %v, before by %v", vip, after, macsBefore)
	}
	// (b) the speakers' views of their peers.
	findings = append(findings, chaos.JudgePeerEvents(speakerPeerEvents(t, from, to.Add(slack)), labNodes, spans, slack)...)
	// (c) the elections.
	findings = append(findings, chaos.JudgeElections(elections, spans, slack)...)
	if an := l2Announcers(t)["attack-svc"]; !slices.Equal(an, []string{announcer}) {
		t.Errorf("after the attack attack-svc is announced by %v, before by %s", an, announcer)
	}
	for _, f := range findings {
		t.Errorf("%s: %s", f.Invariant, f.Detail)
	}

	// The speakers counted what they refused.
	rejectedAfter, exportedAfter := rejected(t)
	if !exported || !exportedAfter {
		t.Fatalf("the speakers do not export %s (it comes with heartbeat authentication, branch auth)", rejectedMetric)
	}
	grew := map[string]float64{}
	for reason, n := range rejectedAfter {
		if d := n - rejectedBefore[reason]; d > 0 {
			grew[reason] = d
		}
	}
	t.Logf("%s grew by %v", rejectedMetric, grew)
	if len(grew) == 0 {
		t.Errorf("%s did not grow: the speakers took forged and replayed heartbeats for real ones", rejectedMetric)
	}
	if grew["replay"]+grew["stale"]+grew["wrong-source"] == 0 {
		t.Errorf("%s: no replay, stale or wrong-source rejection after %d replayed heartbeats: %v", rejectedMetric, replayed, grew)
	}
}

// l2Announcers maps each Service of default with a ServiceL2Status to its nodes.
func l2Announcers(t *testing.T) map[string][]string {
	out, err := runErr(ironlb, "lab", "kubectl", "-n", "metallb-system", "get", "servicel2statuses", "-o",
		`jsonpath={range .items[*]}{.status.serviceNamespace}/{.status.serviceName} {.status.node}{"\n"}{end}`)
	m := map[string][]string{}
	if err != nil {
		return m
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && strings.HasPrefix(f[0], "default/") {
			svc := strings.TrimPrefix(f[0], "default/")
			m[svc] = append(m[svc], f[1])
		}
	}
	for _, ns := range m {
		slices.Sort(ns)
	}
	return m
}

// rejected sums the speakers' rejected heartbeats by reason; exported is false if no speaker has the
// metric.
func rejected(t *testing.T) (map[string]float64, bool) {
	t.Helper()
	// The speakers serve metrics over HTTPS to a token allowed to get /metrics (docs/security.md).
	p, err := lab.State{Dir: lab.DefaultStateDir}.ReadPlan()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token, err := lab.New(p, t.Logf).MetricsToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: lab.Dialer("myk8s-control-plane"),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 3 * time.Second} // self-signed, as Prometheus scrapes it
	out := map[string]float64{}
	exported := false
	for _, node := range labNodes {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s:7473/metrics", nodeAddr[node]), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err == nil && resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			err = fmt.Errorf("HTTP %s", resp.Status)
		}
		if err != nil {
			t.Fatalf("metrics of %s's speaker: %v", node, err)
		}
		ms, err := proxybench.ParseMetrics(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Name == rejectedMetric {
				exported = true
				out[m.Labels["reason"]] += m.Value
			}
		}
	}
	return out, exported
}

// speakerPeerEvents reads every speaker's log for view changes between from and to.
func speakerPeerEvents(t *testing.T, from, to time.Time) []chaos.PeerEvent {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(stateDir, "logs", "*", "pods", "metallb-system_*speaker*_speaker.log"))
	if len(files) == 0 {
		t.Fatalf("no speaker logs under %s", stateDir)
	}
	var out []chaos.PeerEvent
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			for _, e := range chaos.ParsePeerLines(sc.Text()) {
				if !e.At.Before(from) && !e.At.After(to) {
					out = append(out, e)
				}
			}
		}
		fh.Close()
	}
	return out
}
