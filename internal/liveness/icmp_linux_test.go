package liveness

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestEchoerNetns: in two throwaway namespaces joined by a veth (addresses only there), an Echoer
// on each family's address sees its peer answer (the peer's kernel does), and sees it lost when the
// peer's link goes down: ICMP over IPv4, ICMPv6 over IPv6. Root only.
func TestEchoerNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, raw sockets)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	for _, tc := range []struct {
		name       string
		self, peer string // prefixes on the veth's ends
	}{
		{"IPv4", "192.0.2.1/24", "192.0.2.2/24"},
		{"IPv6", "2001:db8:e::1/64", "2001:db8:e::2/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := netnsPair(t, tc.self, tc.peer)
			self, peer := netip.MustParsePrefix(tc.self).Addr(), netip.MustParsePrefix(tc.peer).Addr()
			var ups, downs atomic.Int32
			tr := NewEchoTracker(10*time.Millisecond, 5*time.Millisecond, 20*time.Millisecond, 3)
			var e *Echoer
			inNetns(t, a, func() {
				var err error
				e, err = ListenEcho(self, tr, func(d []Down) {
					if len(d) == 0 {
						ups.Add(1)
					} else {
						downs.Add(1)
					}
				}, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
			})
			e.SetPeers([]Peer{{Node: "peer", Addr: netip.AddrPortFrom(peer, 0)}})
			done := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			go func() { _ = e.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			if !eventually(func() bool { up, _ := e.Up("peer"); return up && ups.Load() > 0 }) {
				t.Fatal("the peer never answered")
			}
			run(t, "ip", "-n", b, "link", "set", "vb", "down")
			if !eventually(func() bool { up, _ := e.Up("peer"); return !up && downs.Load() > 0 }) {
				t.Fatal("the peer's loss was not seen")
			}
		})
	}
}

// netnsPair makes two namespaces joined by a veth (va in a, vb in b) with the addresses given,
// removed when the test ends.
func netnsPair(t *testing.T, addrA, addrB string) (a, b string) {
	t.Helper()
	a, b = fmt.Sprintf("ironlbt-ea%d", os.Getpid()), fmt.Sprintf("ironlbt-eb%d", os.Getpid())
	for _, ns := range []string{a, b} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	run(t, "ip", "-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b)
	for _, c := range [][]string{{a, "va", addrA}, {b, "vb", addrB}} {
		args := []string{"-n", c[0], "addr", "add", c[2], "dev", c[1]}
		if netip.MustParsePrefix(c[2]).Addr().Is6() {
			args = append(args, "nodad")
		}
		run(t, "ip", args...)
		run(t, "ip", "-n", c[0], "link", "set", c[1], "up")
		run(t, "ip", "-n", c[0], "link", "set", "lo", "up")
	}
	return a, b
}

// inNetns runs f on a thread switched into namespace ns; sockets f opens stay in ns.
func inNetns(t *testing.T, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			panic(err) // a thread left in the test namespace must not run anything else
		}
	}()
	f()
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}
