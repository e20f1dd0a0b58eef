package lab

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestFlushConntrack: a namespace with a tracked flow (UDP over its loopback, with a rule that
// tracks it) has no conntrack entry left after FlushConntrack, as after a reboot (StopNode).
// Skipped unless root with ip, nft and conntrack.
func TestFlushConntrack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, tool := range []string{"ip", "nft", "conntrack"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	ns := fmt.Sprintf("ironlb-lab-cttest-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
		return string(out)
	}
	run("ip", "link", "set", "lo", "up")
	// A rule with a ct expression makes conntrack track this namespace's packets.
	run("nft", "add table ip t; add chain ip t c { type filter hook output priority 0; }; add rule ip t c ct state new counter")
	if err := InNetNS(ns, func() error {
		c, err := net.Dial("udp4", "127.0.0.1:9")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		out := run("conntrack", "-L")
		return strings.Count(out, "dport=9 ")
	}
	deadline := time.Now().Add(2 * time.Second)
	for count() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if count() == 0 {
		t.Fatalf("no conntrack entry of the flow to flush:\n%s", run("conntrack", "-L"))
	}
	if err := FlushConntrack(ns); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("%d entries of the flow left after FlushConntrack:\n%s", n, run("conntrack", "-L"))
	}
}
