package bgp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/speaker/bfd"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
	"github.com/ironlb/ironlb/internal/testbed/testenv/proc"
)

// The kernel tests run in two throwaway network namespaces joined by a veth pair created inside
// them (ironlb-bgpt-<pid>-<tag>-r, the router, and -n, the node; 192.0.2.0/24 only inside them).
// The Speaker runs in a child process, this test binary started again through `ip netns exec`, so
// that every socket GoBGP and BFD open, then or later, is in the node's namespace; killing the
// child is a node crash.

type testNet struct {
	nsR, nsN string
}

const ifR, ifN = "bgpr", "bgpn"

// needRoot skips the test unless it runs as root with ip and tools, and not in -short mode.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel test skipped in -short mode")
	}
	netnstest.Require(t, append([]string{"ip"}, tools...)...)
}

// newTestNet creates the namespaces, with routerAddrs on the router's end and nodeAddrs on the
// node's (all /24).
func newTestNet(t *testing.T, tag string, routerAddrs, nodeAddrs []string) *testNet {
	t.Helper()
	n := &testNet{
		nsR: fmt.Sprintf("ironlb-bgpt-%d-%s-r", os.Getpid(), tag),
		nsN: fmt.Sprintf("ironlb-bgpt-%d-%s-n", os.Getpid(), tag),
	}
	netnstest.Add(t, n.nsR, n.nsN)
	for _, ns := range []string{n.nsR, n.nsN} {
		netnstest.Run(t, ns, "ip", "link", "set", "lo", "up")
	}
	prefixes := func(addrs []string) []string {
		var out []string
		for _, a := range addrs {
			out = append(out, a+"/24")
		}
		return out
	}
	netnstest.Veth(t, netnstest.End{NS: n.nsR, Name: ifR, Addrs: prefixes(routerAddrs)}, netnstest.End{NS: n.nsN, Name: ifN, Addrs: prefixes(nodeAddrs)})
	return n
}

// startKilledWithUs starts cmd so that it is killed if the test binary dies.
func startKilledWithUs(cmd *exec.Cmd) error { return proc.StartKilledWithUs(cmd) }

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

// The child: TestHelperSpeaker.

const helperEnv = "IRONLB_BGP_HELPER"

// helperLine is one line the child prints.
type helperLine struct {
	Ready   bool           `json:",omitempty"`
	Status  *SessionStatus `json:",omitempty"`
	At      int64          `json:",omitempty"` // Unix nanoseconds the status was reported
	Stopped bool           `json:",omitempty"`
}

// TestHelperSpeaker is the child: it runs a Speaker with BFD on real sockets, applies every State
// read from stdin (one JSON object a line), prints every status change, and on stdin EOF stops
// gracefully.
func TestHelperSpeaker(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("runs as a child of the kernel tests")
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
	if err := bfd.SetProcessNice(-10); err != nil {
		t.Logf("nice: %v", err)
	}
	conn, err := bfd.Listen(bfd.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Its logs and GoBGP's (info and up) go to stderr, which the test logs: shown when it fails.
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	sp := New(Config{Log: log, GoBGPLogLevel: slog.LevelInfo, BFD: conn, BFDRealtime: true, OnState: func(st SessionStatus) {
		print(helperLine{Status: &st, At: time.Now().UnixNano()})
	}})
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	go func() {
		dec := json.NewDecoder(os.Stdin)
		for {
			var st bgpconfig.State
			if err := dec.Decode(&st); err != nil {
				cancel()
				return
			}
			sp.Set(st)
		}
	}()
	print(helperLine{Ready: true})
	if err := sp.Run(ctx); err != nil {
		t.Fatal(err)
	}
	print(helperLine{Stopped: true})
}

// child is a running helper.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	enc    *json.Encoder
	exited chan struct{}

	mu      sync.Mutex
	latest  map[string]SessionStatus
	history []timedStatus
	stopped bool
	changed chan struct{} // closed and replaced on every line
}

type timedStatus struct {
	at time.Time
	SessionStatus
}

func startChild(t *testing.T, ns string, st bgpconfig.State) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{exited: make(chan struct{}), latest: map[string]SessionStatus{}, changed: make(chan struct{})}
	c.cmd = exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^TestHelperSpeaker$", "-test.count=1")
	c.cmd.Env = append(os.Environ(), helperEnv+"=1")
	c.cmd.Stderr = &prefixWriter{t: t, prefix: "speaker: "}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	c.enc = json.NewEncoder(c.stdin)
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
			case l.Status != nil || l.Stopped:
				c.mu.Lock()
				if l.Status != nil {
					c.latest[l.Status.Name] = *l.Status
					c.history = append(c.history, timedStatus{time.Unix(0, l.At), *l.Status})
				}
				c.stopped = c.stopped || l.Stopped
				close(c.changed)
				c.changed = make(chan struct{})
				c.mu.Unlock()
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
		t.Fatal("speaker exited before it was ready")
	case <-time.After(10 * time.Second):
		t.Fatal("speaker not ready after 10 s")
	}
	c.set(t, st)
	return c
}

func (c *child) set(t *testing.T, st bgpconfig.State) {
	t.Helper()
	if err := c.enc.Encode(st); err != nil {
		t.Fatal(err)
	}
}

// wait waits until the named session's latest status satisfies ok, and returns it with the time
// the child reported it.
func (c *child) wait(t *testing.T, name string, timeout time.Duration, ok func(SessionStatus) bool) timedStatus {
	t.Helper()
	return c.waitAfter(t, name, time.Time{}, timeout, ok)
}

// waitAfter is wait, for a status reported after a time.
func (c *child) waitAfter(t *testing.T, name string, after time.Time, timeout time.Duration, ok func(SessionStatus) bool) timedStatus {
	t.Helper()
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		for i := len(c.history) - 1; i >= 0; i-- {
			if h := c.history[i]; h.Name == name {
				if ok(h.SessionStatus) && !h.at.Before(after) {
					c.mu.Unlock()
					return h
				}
				break
			}
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-c.exited:
			t.Fatalf("speaker exited; session %s: %+v", name, c.latest[name])
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("session %s: not as wanted after %v: %+v", name, timeout, c.latest[name])
		}
	}
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

// signal sends the child sig (SIGSTOP freezes it, SIGCONT resumes it) and returns when.
func (c *child) signal(t *testing.T, sig syscall.Signal) time.Time {
	t.Helper()
	at := time.Now()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return at
}

// stop ends the child gracefully.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("speaker did not stop")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped {
		t.Error("speaker did not stop gracefully")
	}
}
