package bfd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ironlb/ironlb/internal/testbed/testenv/proc"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	if testing.Short() {
		t.Skip("kernel test skipped in -short mode")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

func newTestNet(t *testing.T, tag string) *testNet {
	t.Helper()
	n := &testNet{
		nsA: fmt.Sprintf("ironlb-bfdt-%d-%s-a", os.Getpid(), tag),
		nsB: fmt.Sprintf("ironlb-bfdt-%d-%s-b", os.Getpid(), tag),
	}
	for _, ns := range []string{n.nsA, n.nsB} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("deleting namespace %s: %v: %s", ns, err, out)
			}
		})
		n.mustExec(t, ns, "ip", "link", "set", "lo", "up")
		// Keep IPv6 addresses across a link down (the kernel flushes them by default).
		n.mustExec(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.keep_addr_on_down=1")
	}
	n.mustExec(t, n.nsA, "ip", "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", n.nsB)
	for _, c := range [][]string{
		{n.nsA, "ip", "addr", "add", netA4.String() + "/24", "dev", ifA},
		{n.nsA, "ip", "addr", "add", netA6.String() + "/64", "dev", ifA, "nodad"},
		{n.nsB, "ip", "addr", "add", netB4.String() + "/24", "dev", ifB},
		{n.nsB, "ip", "addr", "add", netB6.String() + "/64", "dev", ifB, "nodad"},
		{n.nsA, "ip", "link", "set", ifA, "up"},
		{n.nsB, "ip", "link", "set", ifB, "up"},
	} {
		n.mustExec(t, c[0], c[1], c[2:]...)
	}
	return n
}

func (n *testNet) exec(ns, name string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
	return string(out), err
}

func (n *testNet) mustExec(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	out, err := n.exec(ns, name, args...)
	if err != nil {
		t.Fatalf("in %s: %s %s: %v: %s", ns, name, strings.Join(args, " "), err, out)
	}
	return out
}

// inNetns runs fn on a thread switched into namespace ns, and switches the thread back after.
func inNetns(t *testing.T, ns string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored := false
		defer func() {
			if restored {
				runtime.UnlockOSThread()
			} // else the thread, stuck in ns, dies with this goroutine
		}()
		err := errors.New("failed") // if fn calls t.FailNow
		defer func() { errc <- err }()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			return
		}
		defer target.Close()
		if err = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		defer func() { restored = unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil }()
		err = errors.New("failed")
		err = fn()
	}()
	if err := <-errc; err != nil {
		t.Fatalf("in namespace %s: %v", ns, err)
	}
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
