package trace_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/ironlb/ironlb/internal/proxy/trace"
)

// TestDSRBucketKernel sends UDP datagrams from several source ports in a throwaway network
// namespace whose output chain stores the DSR flow hash in the conntrack mark, and compares the
// marks with DSRBucket. Skipped unless root with nft, ip and conntrack.
func TestDSRBucketKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	for _, tool := range []string{"nft", "ip", "conntrack"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	ns := fmt.Sprintf("ironlb-jhashtest-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	in := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
		return string(out)
	}
	in("ip", "link", "set", "lo", "up")
	const mod, seed = 251, 0x2f9f9bd
	in("nft", "add table ip t; add chain ip t out { type filter hook output priority 0; }; "+
		fmt.Sprintf("add rule ip t out ip daddr 127.0.0.1 udp dport 9999 ct mark set jhash ip saddr . th sport . ip daddr . th dport . meta l4proto mod %d seed %#x", mod, seed))

	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	sports := []int{1024, 40000, 51234, 60001, 65535}
	for _, sp := range sports {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sp}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9999})
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("x"))
		c.Close()
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err) // the thread stays locked and dies with the test's goroutine
	}
	runtime.UnlockOSThread()

	out := in("conntrack", "-L", "-p", "udp", "--dport", "9999")
	re := regexp.MustCompile(`sport=(\d+) dport=9999 .*mark=(\d+)`)
	got := map[int]uint32{}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		sp, _ := strconv.Atoi(m[1])
		mark, _ := strconv.ParseUint(m[2], 10, 32)
		got[sp] = uint32(mark)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	for _, sp := range sports {
		mark, ok := got[sp]
		if !ok {
			t.Errorf("no conntrack entry for source port %d:\n%s", sp, out)
			continue
		}
		if want := trace.DSRBucket(lo, lo, uint16(sp), 9999, 17, mod, seed); mark != want {
			t.Errorf("source port %d: kernel bucket %d, DSRBucket %d", sp, mark, want)
		}
	}
}
