package trace_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/ironlb/ironlb/internal/proxy/trace"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestDSRBucketKernel sends UDP datagrams from several source ports in a throwaway network
// namespace whose output chain stores the DSR flow hash in the conntrack mark, and compares the
// marks with DSRBucket. Skipped unless root with nft, ip and conntrack.
func TestDSRBucketKernel(t *testing.T) {
	netnstest.Require(t, "nft", "ip", "conntrack")
	ns := fmt.Sprintf("ironlb-jhashtest-%d", os.Getpid())
	netnstest.Add(t, ns)
	netnstest.Run(t, ns, "ip", "link", "set", "lo", "up")
	const mod, seed = 251, 0x2f9f9bd
	netnstest.Run(t, ns, "nft", "add table ip t; add chain ip t out { type filter hook output priority 0; }; "+
		fmt.Sprintf("add rule ip t out ip daddr 127.0.0.1 udp dport 9999 ct mark set jhash ip saddr . th sport . ip daddr . th dport . meta l4proto mod %d seed %#x", mod, seed))

	sports := []int{1024, 40000, 51234, 60001, 65535}
	netnstest.In(t, ns, func() {
		for _, sp := range sports {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sp}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9999})
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("x"))
			c.Close()
		}
	})

	out := netnstest.Run(t, ns, "conntrack", "-L", "-p", "udp", "--dport", "9999")
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
