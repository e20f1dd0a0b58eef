package chaos

import (
	"bufio"
	"bytes"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/testbed/connprobe"
)

// TestJudgeConnections: one row per rule of JudgeConnections. The pods: web-a on worker, web-b on
// worker2; worker3 has none (the flows' entry node).
func TestJudgeConnections(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	pods := map[string]string{"web-a": "worker", "web-b": "worker2"}
	vip := netip.MustParseAddr("172.18.212.2")
	// flow: opened at 0, answered by pod from 0.1 to last, failed at failed (0: did not).
	flow := func(pod string, last, failed float64) connprobe.Flow {
		f := connprobe.Flow{Proto: "tcp", Port: 40000, Opened: at(0), LastOK: at(last), Answers: 10,
			Hosts: []connprobe.Host{{At: at(0.1), Name: pod, Remote: "172.18.0.100:40000"}}}
		if failed > 0 {
			f.Failed, f.Reason = at(failed), "reset"
		}
		return f
	}
	cut := func(node string, from, to float64) Span {
		return Span{From: at(from), To: at(to), Fault: FaultStopNode, Node: node, Kind: SpanCutOff}
	}
	const slack = 5 * time.Second
	type want struct{ held, broken, explained, findings int }
	for _, tc := range []struct {
		name  string
		flows []connprobe.Flow
		spans []Span
		want  want
	}{
		{"held to the end: fine", []connprobe.Flow{flow("web-a", 60, 0)}, nil, want{1, 0, 0, 0}},
		{"UDP flows are not judged", []connprobe.Flow{{Proto: "udp", Opened: at(0), Failed: at(10), Reason: "timeout"}}, nil, want{0, 0, 0, 0}},
		{"broken while its pod's node was cut: explained", []connprobe.Flow{flow("web-a", 10, 15)}, []Span{cut("worker", 10.05, 20)}, want{1, 1, 1, 0}},
		{"broken when its pod's node came back (the pod restarted): explained",
			[]connprobe.Flow{flow("web-a", 9.9, 21)}, []Span{cut("worker", 10, 20)}, want{1, 1, 1, 0}},
		{"broken within the slack after the cut ended (the node's endpoints back in the tables): explained",
			[]connprobe.Flow{flow("web-a", 23, 24)}, []Span{cut("worker", 10, 20)}, want{1, 1, 1, 0}},
		{"broken after the slack: a finding", []connprobe.Flow{flow("web-a", 26, 27)}, []Span{cut("worker", 10, 20)}, want{1, 1, 0, 1}},
		{"broken before the cut began: a finding", []connprobe.Flow{flow("web-a", 5, 6)}, []Span{cut("worker", 10, 20)}, want{1, 1, 0, 1}},
		{"the entry node cut, its pod on another node: a finding (what DSR must survive)",
			[]connprobe.Flow{flow("web-b", 10, 10.2)}, []Span{cut("worker3", 10, 20)}, want{1, 1, 0, 1}},
		{"another pod's node cut: a finding", []connprobe.Flow{flow("web-b", 10, 12)}, []Span{cut("worker", 10, 20)}, want{1, 1, 0, 1}},
		{"a cut of every node explains any pod", []connprobe.Flow{flow("web-b", 10, 12)}, []Span{cut("", 10, 20)}, want{1, 1, 1, 0}},
		{"other span kinds explain nothing (a speaker killed on the pod's node, an attack)",
			[]connprobe.Flow{flow("web-a", 10, 12)},
			[]Span{{From: at(9), To: at(30), Fault: FaultKillSpeaker, Node: "worker", Kind: SpanLoses},
				{From: at(9), To: at(30), Fault: FaultForgedARP, Kind: SpanAttack}}, want{1, 1, 0, 1}},
		{"a pod on no known node: a finding", []connprobe.Flow{flow("web-z", 10, 12)}, []Span{cut("worker", 10, 20)}, want{1, 1, 0, 1}},
		{"failed before its first answer, no fault: a finding",
			[]connprobe.Flow{{Proto: "tcp", Opened: at(0), Failed: at(5), Reason: "timeout"}}, nil, want{1, 1, 0, 1}},
		{"never opened, no fault: a finding", []connprobe.Flow{{Proto: "tcp", Failed: at(1), Reason: "refused"}}, nil, want{1, 1, 0, 1}},
		{"judged by the last pod before the break",
			[]connprobe.Flow{func() connprobe.Flow {
				f := flow("web-b", 10, 12)
				f.Hosts = append(f.Hosts, connprobe.Host{At: at(5), Name: "web-a"}, connprobe.Host{At: at(13), Name: "web-b"})
				return f
			}()}, []Span{cut("worker", 10, 20)}, want{1, 1, 1, 0}},
		{"several flows: each judged",
			[]connprobe.Flow{flow("web-a", 10, 12), flow("web-b", 10, 12), flow("web-b", 60, 0)},
			[]Span{cut("worker", 10, 20)}, want{3, 2, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := JudgeConnections(vip, "dsr", connprobe.Result{Flows: tc.flows, End: at(60)}, pods, tc.spans, slack)
			got := want{r.Held, r.Broken, r.Explained, len(r.Findings)}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s\nfindings: %v", diff, r.Findings)
			}
			for _, f := range r.Findings {
				if f.Invariant != InvConnection || !strings.Contains(f.Detail, "dsr connection to 172.18.212.2") {
					t.Errorf("finding %+v", f)
				}
			}
		})
	}
}

// TestJudgeConnectionsRecorded judges two real `lab bench-connections` trials (their first 12 TCP
// flows, 2026-11-26, /work/runs/connraw): the same layer-2 power cut of the announcer
// myk8s-worker3, which ran no pod of the Service (bench-web on myk8s-worker and myk8s-worker2), once
// with the Service in snat mode and once in dsr mode. The invariant fails the snat trial (every
// connection reset or timed out, its pod alive) and passes the dsr one.
func TestJudgeConnectionsRecorded(t *testing.T) {
	pods := map[string]string{"bench-web-7c86c779f8-8knff": "myk8s-worker", "bench-web-7c86c779f8-dfmsm": "myk8s-worker2"}
	vip := netip.MustParseAddr("172.18.0.240")
	for _, tc := range []struct {
		file     string
		findings int
	}{
		{"l2-snat-power-cut.log", 12},
		{"l2-dsr-power-cut.log", 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			res, event := recorded(t, "testdata/conns/"+tc.file)
			// The cut as the soak records it: from just before the power cut to the node's return.
			spans := []Span{{From: event.Add(-time.Millisecond), To: event.Add(8 * time.Second), Fault: FaultStopNode, Node: "myk8s-worker3", Kind: SpanCutOff}}
			r := JudgeConnections(vip, "x", res, pods, spans, 5*time.Second)
			if r.Held != 12 || len(r.Findings) != tc.findings || r.Explained != 0 {
				t.Errorf("held %d, broken %d, explained %d, %d findings; want 12 held, %d findings, none explained: %v",
					r.Held, r.Broken, r.Explained, len(r.Findings), tc.findings, r.Findings)
			}
			// Had the cut node run the pods, the same breaks would be explained.
			for p := range pods {
				pods[p] = "myk8s-worker3"
			}
			if r := JudgeConnections(vip, "x", res, pods, spans, 5*time.Second); len(r.Findings) != 0 || r.Explained != r.Broken {
				t.Errorf("pods on the cut node: %d findings, %d of %d explained; want all explained", len(r.Findings), r.Explained, r.Broken)
			}
		})
	}
}

// recorded reads a bench-connections raw log: its "event" line and the client's report.
func recorded(t *testing.T, path string) (connprobe.Result, time.Time) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var report bytes.Buffer
	var event time.Time
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "event":
			ns, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			event = time.Unix(0, ns)
		case len(f) > 0 && f[0] == "config":
		default:
			report.WriteString(sc.Text() + "\n")
		}
	}
	res, err := connprobe.Parse(&report)
	if err != nil || event.IsZero() {
		t.Fatalf("%s: %v (event %v)", path, err, event)
	}
	return res, event
}
