//go:build linux

package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ironlb/ironlb/internal/speaker/layer2"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestDataplaneKernel runs the owner over a real ARP responder (layer2.Managed) and link watcher
// (layer2.WatchLink) on one end of a veth pair in a throwaway network namespace (ilbt-dp-<pid>;
// nothing touches the root namespace), with fake heartbeats and stores. The veth is set down and up,
// then deleted and created again with another MAC: the speaker's readiness (heartbeat, /readyz,
// gauge) follows, and once back it answers ARP for its address from the new interface's MAC.
func TestDataplaneKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("kernel test skipped in -short mode")
	}
	netnstest.Require(t, "ip")
	ns := fmt.Sprintf("ilbt-dp-%d", os.Getpid())
	netnstest.Add(t, ns)
	ipns := func(args ...string) {
		t.Helper()
		netnstest.Run(t, ns, append([]string{"ip"}, args...)...)
	}
	macs := []string{"02:12:00:00:00:0a", "02:12:00:00:00:1a"} // dpa's MAC, and after it is created again
	veth := func(mac string) {
		t.Helper()
		netnstest.Veth(t, netnstest.End{NS: ns, Name: "dpa", MAC: mac, Addrs: []string{"192.0.2.1/24"}},
			netnstest.End{NS: ns, Name: "dpb", MAC: "02:12:00:00:00:0b", Addrs: []string{"192.0.2.2/24"}})
	}
	ipns("link", "set", "lo", "up")
	veth(macs[0])

	// The owner, on node "self" (the rank winner), over the real responder.
	e := newOwnerEnv(t, true, Config{})
	var s *speaker
	var m *layer2.Managed
	netnstest.Do(t, ns, func() error {
		ifi, err := layer2.LookupUp("dpa")
		if err != nil {
			return err
		}
		m, err = dialManaged(ifi, layer2.DialARP, layer2.Config{OnNetDown: func(err error) { s.onSocketError(responderARP)(err) }},
			func(err error) { s.onSocketError(responderARP)(err) })
		if err != nil {
			return err
		}
		s = newSpeaker(e.s.cfg, deps{Log: slog.New(slog.DiscardHandler), Interface: ifi, ARP: m, Heartbeats: e.hb, Status: e.status,
			Recorder: e.rec, Objects: e.objs, Metrics: newMetrics(prometheus.NewRegistry()),
			Reopen: map[string]reopener{responderARP: nsReopener{t: t, ns: ns, r: m}}})
		return nil
	})
	t.Cleanup(func() { _ = m.Close() })
	m.SetAnswerFunc(s.sp.answer)
	s.setReady()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { _ = m.Run(ctx); done <- struct{}{} }()
	go func() {
		if err := netnstest.Enter(ns); err != nil { // for good: the thread ends with the goroutine
			t.Error(err)
		} else if err := layer2.WatchLink(ctx, "dpa", s.onLink, slog.New(slog.DiscardHandler)); err != nil {
			t.Error(err)
		}
		done <- struct{}{}
	}()
	go func() { _ = s.run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		for range 3 {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("the speaker's parts did not stop")
				return
			}
		}
	})

	waitReady := func(want bool, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			ready, why := s.readiness()
			if ready == want && s.heartbeat().Ready == want {
				if v := testutil.ToFloat64(s.m.dataplaneReady); want && v != 1 || !want && v != 0 {
					// The gauge follows at the run loop's next step.
					if time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					t.Errorf("%s: ironlb_speaker_dataplane_ready %v", what, v)
				}
				t.Logf("%s: ready %v (%s)", what, ready, why)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: ready %v (%s), want %v", what, ready, why, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	answers := func(mac string, what string) {
		t.Helper()
		if _, err := exec.LookPath("arping"); err != nil {
			return
		}
		var out []byte
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			out, _ = exec.Command("ip", "netns", "exec", ns, "arping", "-c", "1", "-w", "1", "-I", "dpb", vip.String()).CombinedOutput()
			if strings.Contains(strings.ToLower(string(out)), mac) {
				return
			}
		}
		t.Errorf("%s: arping did not see %s:\n%s", what, mac, out)
	}

	waitReady(true, "at start")
	answers(macs[0], "at start")

	ipns("link", "set", "dpa", "down")
	waitReady(false, "link down")
	ipns("link", "set", "dpa", "up")
	waitReady(true, "link up again")
	answers(macs[0], "link up again")

	ipns("link", "del", "dpa")
	waitReady(false, "link deleted")
	if ev := e.events(); !containsPrefix(ev, "Warning DataplaneDown") {
		t.Errorf("events %q, want DataplaneDown", ev)
	}
	veth(macs[1])
	waitReady(true, "link created again")
	s.mu.Lock()
	mac := s.ifi.HardwareAddr.String()
	s.mu.Unlock()
	if mac != macs[1] {
		t.Errorf("announcing MAC %v, want the new interface's %s", mac, macs[1])
	}
	answers(macs[1], "link created again")
}

func containsPrefix(ss []string, prefix string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// nsReopener reopens r on a thread in namespace ns, where its interface is.
type nsReopener struct {
	t  *testing.T
	ns string
	r  reopener
}

func (n nsReopener) Reopen() (*net.Interface, error) {
	type result struct {
		ifi *net.Interface
		err error
	}
	c := make(chan result, 1)
	go func() {
		if err := netnstest.Enter(n.ns); err != nil { // for good: the thread ends with the goroutine
			c <- result{err: err}
			return
		}
		ifi, err := n.r.Reopen()
		c <- result{ifi, err}
	}()
	r := <-c
	return r.ifi, r.err
}
