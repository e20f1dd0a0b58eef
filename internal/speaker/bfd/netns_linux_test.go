package bfd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/netnstest"
	"github.com/ironlb/ironlb/internal/testbed/testenv/proc"
)

// The kernel tests run Managers on real sockets in two throwaway network namespaces joined by a
// veth pair (ironlb-bfdt-<pid>-<tag>-a/b, 192.0.2.0/24 and 2001:db8::/64 inside them only).
// A Manager runs in a child process, this test binary started again through `ip netns exec`, so
// that every socket it opens, then or later, is in the namespace; killing the child is a crash.

// testNet is a veth pair between two namespaces.
type testNet struct {
	nsA, nsB string
}

var (
	netA4, netB4 = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	netA6, netB6 = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
)

const ifA, ifB = "bfda", "bfdb"

// needRoot skips the test unless it runs as root with ip and tools, and not in -short mode.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel test skipped in -short mode")
	}
	netnstest.Require(t, append([]string{"ip"}, tools...)...)
}

func newTestNet(t *testing.T, tag string) *testNet {
	t.Helper()
	n := &testNet{
		nsA: fmt.Sprintf("ironlb-bfdt-%d-%s-a", os.Getpid(), tag),
		nsB: fmt.Sprintf("ironlb-bfdt-%d-%s-b", os.Getpid(), tag),
	}
	netnstest.Add(t, n.nsA, n.nsB)
	for _, ns := range []string{n.nsA, n.nsB} {
		netnstest.Run(t, ns, "ip", "link", "set", "lo", "up")
		// Keep IPv6 addresses across a link down (the kernel flushes them by default).
		netnstest.Run(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.keep_addr_on_down=1")
	}
	netnstest.Veth(t, netnstest.End{NS: n.nsA, Name: ifA, Addrs: []string{netA4.String() + "/24", netA6.String() + "/64"}},
		netnstest.End{NS: n.nsB, Name: ifB, Addrs: []string{netB4.String() + "/24", netB6.String() + "/64"}})
	return n
}

// startKilledWithUs starts cmd so that it is killed if the test binary dies.
func startKilledWithUs(cmd *exec.Cmd) error { return proc.StartKilledWithUs(cmd) }

// helperEnv carries the child's configuration.
const helperEnv = "IRONLB_BFD_HELPER"

type helperConfig struct {
	Peers    [][2]netip.Addr // local, peer
	Profile  Profile
	Realtime bool
	Nice     int // for SetProcessNice, unless 0
}

// helperLine is one line the child prints.
type helperLine struct {
	Change      *helperChange `json:",omitempty"`
	Stats       *Stats        `json:",omitempty"` // with RealtimeErr moved to the next field
	RealtimeErr string        `json:",omitempty"`
	Ready       bool          `json:",omitempty"`
}

type helperChange struct {
	Local, Peer netip.Addr
	Old, New    string
	Diag        string
	RemoteState string
	RemoteDiag  string
	At          int64 // Unix nanoseconds
}

// TestHelperManager is the child: it runs a Manager on real sockets as configured by helperEnv,
// prints state changes, and on stdin EOF stops gracefully and prints its stats and peers.
func TestHelperManager(t *testing.T) {
	cfgJSON := os.Getenv(helperEnv)
	if cfgJSON == "" {
		t.Skip("runs as a child of the kernel tests")
	}
	var cfg helperConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		t.Fatal(err)
	}
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	print := func(l helperLine) {
		mu.Lock()
		defer mu.Unlock()
		if err := out.Encode(l); err != nil {
			os.Exit(3)
		}
	}
	if cfg.Nice != 0 {
		if err := SetProcessNice(cfg.Nice); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := Listen(ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := New(conn, Config{Realtime: cfg.Realtime, OnChange: func(c StateChange) {
		print(helperLine{Change: &helperChange{Local: c.Local, Peer: c.Peer, Old: c.Old.String(), New: c.New.String(),
			Diag: c.Diag.String(), RemoteState: c.RemoteState.String(), RemoteDiag: c.RemoteDiag.String(),
			At: c.At.UnixNano()}})
	}})
	for _, p := range cfg.Peers {
		if err := m.AddPeer(p[0], p[1], cfg.Profile); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	print(helperLine{Ready: true})
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	l := helperLine{Stats: &st}
	if st.RealtimeErr != nil {
		l.RealtimeErr, st.RealtimeErr = st.RealtimeErr.Error(), nil
	}
	print(l)
}

// child is a running helper.
type child struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	changes chan helperChange
	final   chan helperLine // the stats line, on graceful exit
	exited  chan struct{}
}

// startChild runs a Manager in namespace ns with the given peers.
func startChild(t *testing.T, ns string, cfg helperConfig) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{changes: make(chan helperChange, 100), final: make(chan helperLine, 1), exited: make(chan struct{})}
	c.cmd = exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^TestHelperManager$", "-test.count=1")
	c.cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	c.cmd.Stderr = &prefixWriter{t: t, prefix: "child " + ns + ": "}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := startKilledWithUs(c.cmd); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l helperLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				continue // the test framework's own output
			}
			switch {
			case l.Ready:
				close(ready)
			case l.Change != nil:
				c.changes <- *l.Change
			case l.Stats != nil:
				c.final <- l
			}
		}
		_ = c.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.exited
	})
	select {
	case <-ready:
	case <-c.exited:
		t.Fatal("child exited before it was ready")
	case <-time.After(10 * time.Second):
		t.Fatal("child not ready after 10 s")
	}
	return c
}

// kill crashes the child and returns when.
func (c *child) kill(t *testing.T) time.Time {
	t.Helper()
	at := time.Now()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-c.exited
	return at
}

// stop ends the child gracefully and returns its final stats line.
func (c *child) stop(t *testing.T) helperLine {
	t.Helper()
	c.stdin.Close()
	select {
	case l := <-c.final:
		<-c.exited
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("child did not stop")
	}
	return helperLine{}
}

// waitChange waits for the child to report peer reaching state.
func (c *child) waitChange(t *testing.T, peer netip.Addr, state string, timeout time.Duration) helperChange {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ch := <-c.changes:
			t.Logf("ours: %v → %v: %s → %s (diag %s, remote %s/%s)", ch.Local, ch.Peer, ch.Old, ch.New, ch.Diag, ch.RemoteState, ch.RemoteDiag)
			if ch.Peer == peer && ch.New == state {
				return ch
			}
		case <-c.exited:
			if len(c.changes) == 0 {
				t.Fatalf("child exited; %v not %s", peer, state)
			}
		case <-deadline:
			t.Fatalf("%v not %s after %v", peer, state, timeout)
		}
	}
}

// waitStates waits until the child reports each peer reaching its state, in any order.
func (c *child) waitStates(t *testing.T, timeout time.Duration, want map[netip.Addr]string) {
	t.Helper()
	deadline := time.After(timeout)
	pending := maps.Clone(want)
	for len(pending) > 0 {
		select {
		case ch := <-c.changes:
			t.Logf("ours: %v → %v: %s → %s (diag %s, remote %s/%s)", ch.Local, ch.Peer, ch.Old, ch.New, ch.Diag, ch.RemoteState, ch.RemoteDiag)
			if pending[ch.Peer] == ch.New {
				delete(pending, ch.Peer)
			}
		case <-c.exited:
			if len(c.changes) == 0 {
				t.Fatalf("child exited; not reached: %v", pending)
			}
		case <-deadline:
			t.Fatalf("not reached after %v: %v", timeout, pending)
		}
	}
}

// expectNoChange fails if the child reports any change within d.
func (c *child) expectNoChange(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case ch := <-c.changes:
		t.Errorf("unexpected change: %+v", ch)
	case <-time.After(d):
	}
}

type prefixWriter struct {
	t      *testing.T
	prefix string
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if l != "" {
			w.t.Log(w.prefix + l)
		}
	}
	return len(b), nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}
