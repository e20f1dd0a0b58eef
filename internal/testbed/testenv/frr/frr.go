// Package frr runs Debian's FRR (zebra, bfdd, bgpd) as a router in a test's network namespace,
// with its configuration, sockets, pid files and logs in a temporary directory and no TCP vty
// ports, and reads its state through vtysh. The BFD, BGP and speaker tests share it.
package frr

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/testbed/testenv/proc"
)

// DaemonDir holds Debian's FRR daemons.
const DaemonDir = "/usr/lib/frr"

// Need skips the test unless it runs as root (network namespaces) with ip, vtysh, chrt and FRR's
// zebra, bfdd and bgpd installed, and not in -short mode.
func Need(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	if testing.Short() {
		t.Skip("kernel test skipped in -short mode")
	}
	for _, tool := range []string{"ip", "vtysh", "chrt"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	for _, d := range []string{"zebra", "bfdd", "bgpd"} {
		if _, err := os.Stat(filepath.Join(DaemonDir, d)); err != nil {
			t.Skipf("FRR's %s not installed (apt-get install frr): %v", d, err)
		}
	}
}

// Config creates the router's directory with the daemons' configuration files, which files
// returns given the directory (for log file paths). On failure the cleanup logs the tail of every
// daemon's log; it then removes the directory.
func Config(t *testing.T, files func(dir string) map[string]string) string {
	t.Helper()
	// Not t.TempDir: its parent is private, and zebra and bfdd drop to user frr.
	dir, err := os.MkdirTemp("", "ironlb-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range []string{"bgpd", "bfdd", "zebra"} {
				if b, err := os.ReadFile(filepath.Join(dir, d+".log")); err == nil {
					t.Logf("%s.log:\n%s", d, Tail(string(b), 80))
				}
			}
		}
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, content := range files(dir) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Start starts zebra, bfdd and bgpd in namespace ns with the configuration in dir, kills them in
// the test's cleanup, and returns once bgpd lists neighbors neighbors.
func Start(t *testing.T, ns, dir string, neighbors int) *Router {
	t.Helper()
	f := &Router{NS: ns, Dir: dir, procs: map[string]*running{}}
	t.Cleanup(func() {
		for _, d := range []string{"bgpd", "bfdd", "zebra"} {
			f.Kill(d)
		}
	})
	for _, d := range []string{"zebra", "bfdd", "bgpd"} {
		f.Start(t, d)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if ns := f.Neighbors(t); len(ns) == neighbors {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatal("FRR did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Router is a running FRR router.
type Router struct {
	NS, Dir string // the router's network namespace; its configuration, sockets and logs
	procs   map[string]*running
}

type running struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// Tail returns the last lines of s.
func Tail(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// BFDDPriority is the SCHED_FIFO priority bfdd runs at (through chrt), as if the router were
// another machine. At normal priority (or at the nice value the test binary was started with, which
// the daemons inherit) a saturated two-CPU machine starves bfdd for more than a 50 ms × 3 detection
// time: it stops sending and, when it runs again, expires our session before reading our queued
// packets (bfdd.log: "up -> down reason:control-expired", then "init -> up" within a millisecond),
// and bgpd drops the iBGP session with it. The speaker's own loop runs at SCHED_FIFO too.
const BFDDPriority = "10"

// Start starts one daemon with everything in f.Dir. bgpd stays root (-S), so that it dies with the
// test binary; zebra and bfdd insist on dropping to user frr, which clears the parent-death
// signal: the test's cleanup kills them. bfdd runs at BFDDPriority.
func (f *Router) Start(t *testing.T, daemon string) {
	t.Helper()
	args := []string{"netns", "exec", f.NS}
	if daemon == "bfdd" {
		args = append(args, "chrt", "-f", BFDDPriority)
	}
	args = append(args, filepath.Join(DaemonDir, daemon),
		"-f", filepath.Join(f.Dir, daemon+".conf"), "-i", filepath.Join(f.Dir, daemon+".pid"),
		"--vty_socket", f.Dir, "-P", "0", "-z", filepath.Join(f.Dir, "zserv.api"))
	switch daemon {
	case "bgpd":
		args = append(args, "-S")
	case "bfdd":
		args = append(args, "--bfdctl", filepath.Join(f.Dir, "bfdd.sock"), "-u", "frr", "-g", "frr")
	default:
		args = append(args, "-u", "frr", "-g", "frr")
	}
	p := &running{cmd: exec.Command("ip", args...), exited: make(chan struct{})}
	p.cmd.Stdout = &prefixWriter{t: t, prefix: daemon + ": "}
	p.cmd.Stderr = p.cmd.Stdout
	if err := proc.StartKilledWithUs(p.cmd); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	f.procs[daemon] = p
	if daemon == "zebra" { // the others connect to its socket
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(f.Dir, "zserv.api")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("zebra did not open its socket")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Kill crashes a daemon (if running) and returns when.
func (f *Router) Kill(daemon string) time.Time {
	at := time.Now()
	if p := f.procs[daemon]; p != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
		delete(f.procs, daemon)
	}
	return at
}

func (f *Router) Vtysh(cmds ...string) (string, error) {
	args := []string{"--vty_socket", f.Dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("vtysh", args...).CombinedOutput()
	return string(out), err
}

// neighbors returns bgpd's neighbors by address: state and why it is down.
func (f *Router) Neighbors(t *testing.T) map[string]Neighbor {
	out, err := f.Vtysh("show bgp neighbors json")
	if err != nil {
		return nil
	}
	var m map[string]Neighbor
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return nil
	}
	return m
}

type Neighbor struct {
	BGPState               string `json:"bgpState"`
	LastResetDueTo         string `json:"lastResetDueTo"`
	LastNotificationReason string `json:"lastNotificationReason"`
	PeerBFDInfo            *struct {
		Status string `json:"status"`
	} `json:"peerBfdInfo"`
}

// Path is one path of a prefix in bgpd's RIB.
type Path struct {
	Peer        string
	NextHop     string
	ASPath      string
	Communities []string
	Large       []string
	LocalPref   int
}

// paths returns bgpd's paths for prefix, by peer.
func (f *Router) Paths(t *testing.T, prefix string) map[string]Path {
	t.Helper()
	out, err := f.Vtysh("show bgp ipv4 unicast " + prefix + " json")
	if err != nil {
		t.Fatalf("vtysh: %v: %s", err, out)
	}
	var detail struct {
		Paths []struct {
			ASPath struct {
				String string `json:"string"`
			} `json:"aspath"`
			Community *struct {
				String string `json:"string"`
			} `json:"community"`
			LargeCommunity *struct {
				String string `json:"string"`
			} `json:"largeCommunity"`
			LocalPref int `json:"locPrf"`
			Nexthops  []struct {
				IP string `json:"ip"`
			} `json:"nexthops"`
			Peer struct {
				PeerID string `json:"peerId"`
			} `json:"peer"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &detail); err != nil {
		t.Fatalf("show bgp %s: %v: %s", prefix, err, out)
	}
	m := map[string]Path{}
	for _, p := range detail.Paths {
		fp := Path{Peer: p.Peer.PeerID, ASPath: p.ASPath.String, LocalPref: p.LocalPref}
		if len(p.Nexthops) > 0 {
			fp.NextHop = p.Nexthops[0].IP
		}
		if p.Community != nil {
			fp.Communities = strings.Fields(p.Community.String)
			slices.Sort(fp.Communities)
		}
		if p.LargeCommunity != nil {
			fp.Large = strings.Fields(p.LargeCommunity.String)
		}
		m[fp.Peer] = fp
	}
	return m
}

// routes returns, from `show bgp ipv4 unicast json`, the peers each prefix is learned from.
func (f *Router) Routes(t *testing.T) map[string][]string {
	t.Helper()
	out, err := f.Vtysh("show bgp ipv4 unicast json")
	if err != nil {
		t.Fatalf("vtysh: %v: %s", err, out)
	}
	var table struct {
		Routes map[string][]struct {
			PeerID string `json:"peerId"`
			Valid  bool   `json:"valid"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &table); err != nil {
		t.Fatalf("show bgp: %v: %s", err, out)
	}
	m := map[string][]string{}
	for p, paths := range table.Routes {
		for _, path := range paths {
			if path.Valid {
				m[p] = append(m[p], path.PeerID)
			}
		}
		slices.Sort(m[p])
	}
	return m
}

// waitRoutes polls until `show bgp ipv4 unicast json` gives want (prefix → peers), and returns
// when it first did.
func (f *Router) WaitRoutes(t *testing.T, what string, want map[string][]string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := f.Routes(t)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: FRR routes %v after %v, want %v", what, got, timeout, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var logTimeRE = regexp.MustCompile(`^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) `)

// logged returns when a line of daemon's log after since first matched re.
func (f *Router) Logged(t *testing.T, daemon string, re *regexp.Regexp, since time.Time, timeout time.Duration) (time.Time, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		file, err := os.Open(filepath.Join(f.Dir, daemon+".log"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			m := logTimeRE.FindStringSubmatch(sc.Text())
			if m == nil || !re.MatchString(sc.Text()) {
				continue
			}
			at, err := time.ParseInLocation("2006/01/02 15:04:05.000000", m[1], time.Local)
			if err == nil && !at.Before(since.Add(-time.Millisecond)) {
				file.Close()
				return at, sc.Text()
			}
		}
		file.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s logged nothing matching %v after %v", daemon, re, timeout)
		}
		time.Sleep(20 * time.Millisecond)
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
