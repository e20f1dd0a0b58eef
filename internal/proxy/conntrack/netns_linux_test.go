package conntrack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/testbed/netnstest"
)

// TestKernel deletes entries from a real conntrack table, in a throwaway network namespace, with
// each Deleter (the conntrack tool and netlink): the filters select exactly the entries they mean to.
// Skipped unless root with conntrack and ip (the tool also writes the fixtures).
func TestKernel(t *testing.T) {
	netnstest.Require(t, "conntrack", "ip")
	ct, _ := exec.LookPath("conntrack")
	ip, _ := exec.LookPath("ip")
	for _, tc := range []struct {
		name string
		del  func(t *testing.T, ns string) Deleter
	}{
		{"exec", func(t *testing.T, ns string) Deleter {
			return NewExecPath(ip, func(ctx context.Context, name string, args ...string) ([]byte, int, error) {
				return osRun(ctx, name, append([]string{"netns", "exec", ns, ct}, args...)...)
			})
		}},
		{"netlink", func(t *testing.T, ns string) Deleter {
			h, err := netns.GetFromName(ns)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			n, err := NewNetlinkAt(h)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(n.Close)
			return n
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("ironlb-cttest-%d-%s", os.Getpid(), tc.name)
			inNS := fixtureTable(t, ns)
			e := tc.del(t, ns)
			ctx := context.Background()
			for _, tc := range []struct {
				f    Filter
				want int
			}{
				{Filter{Protocol: nftrules.UDP, OrigDst: a("10.96.0.10"), DPort: 53, ReplySrc: a("10.244.2.5")}, 1},
				{Filter{Protocol: nftrules.UDP, OrigDst: a("10.96.0.10"), DPort: 53, ReplySrc: a("10.244.2.5")}, 0},
				{Filter{Protocol: nftrules.UDP, DPort: 30053, ReplySrc: a("10.244.2.5")}, 1},
				{Filter{IPv6: true, Protocol: nftrules.UDP, OrigDst: a("fd00::10"), DPort: 53, ReplySrc: a("fd00:244:2::5")}, 1},
			} {
				n, err := e.Delete(ctx, tc.f)
				if err != nil || n != tc.want {
					t.Errorf("%s: deleted %d, %v; want %d", tc.f, n, err, tc.want)
				}
			}
			left := inNS("-L") + inNS("-L", "-f", "ipv6")
			if strings.Count(left, "udp ") != 1 || !strings.Contains(left, "src=10.244.3.5") {
				t.Errorf("left in the table:\n%s", left)
			}
			// DSRMoved's filters: not DNATed (reply source the address itself) and a mark.
			for _, e := range []string{
				"-I -p udp -s 192.0.2.100 -d 192.168.1.240 --sport 4005 --dport 53 --reply-src 192.168.1.240 --reply-dst 192.0.2.100 --reply-port-src 53 --reply-port-dst 4005 -m 7 -t 100",
				"-I -p udp -s 192.0.2.100 -d 192.168.1.240 --sport 4006 --dport 53 --reply-src 192.168.1.240 --reply-dst 192.0.2.100 --reply-port-src 53 --reply-port-dst 4006 -m 8 -t 100",
				"-I -p udp -s 192.0.2.100 -d 192.168.1.240 --sport 4007 --dport 53 --reply-src 10.244.2.5 --reply-dst 192.0.2.100 --reply-port-src 5353 --reply-port-dst 4007 -m 7 -t 100",
			} {
				inNS(strings.Fields(e)...)
			}
			mf := Filter{Protocol: nftrules.UDP, OrigDst: a("192.168.1.240"), DPort: 53, ReplySrc: a("192.168.1.240"), Mark: 7}
			if n, err := e.Delete(ctx, mf); err != nil || n != 1 {
				t.Errorf("%s: deleted %d, %v; want 1", mf, n, err)
			}
			left = inNS("-L", "-d", "192.168.1.240")
			if strings.Count(left, "udp ") != 2 || strings.Contains(left, "sport=4005 ") {
				t.Errorf("left to 192.168.1.240 after %s:\n%s", mf, left)
			}
		})
	}
	// A batch: one dump per family, every filter applied, TCP left alone.
	t.Run("netlink batch", func(t *testing.T) {
		ns := fmt.Sprintf("ironlb-cttest-%d-batch", os.Getpid())
		inNS := fixtureTable(t, ns)
		inNS(strings.Fields("-I -p tcp -s 10.244.1.9 -d 10.96.0.10 --sport 4004 --dport 53 --reply-src 10.244.2.5 --reply-dst 10.244.1.9 --reply-port-src 5353 --reply-port-dst 4004 --state ESTABLISHED -t 100")...)
		h, err := netns.GetFromName(ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		n, err := NewNetlinkAt(h)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		got, err := n.DeleteAll(context.Background(), []Filter{
			{Protocol: nftrules.UDP, OrigDst: a("10.96.0.10"), DPort: 53},
			{Protocol: nftrules.UDP, DPort: 30053},
			{IPv6: true, Protocol: nftrules.UDP, ReplySrc: a("fd00:244:2::5")},
		})
		if err != nil || got != 4 {
			t.Errorf("DeleteAll: deleted %d, %v; want 4", got, err)
		}
		left := inNS("-L") + inNS("-L", "-f", "ipv6")
		if strings.Count(left, "udp ") != 0 || strings.Count(left, "tcp ") != 1 {
			t.Errorf("left in the table:\n%s", left)
		}
	})
}

// fixtureTable creates the network namespace ns (removed when the test ends) holding four UDP
// entries: a client to a ClusterIP DNATed to two endpoints, a node-port flow and an IPv6 one. It
// returns a function running the conntrack tool in ns.
func fixtureTable(t *testing.T, ns string) func(args ...string) string {
	t.Helper()
	netnstest.Add(t, ns)
	inNS := func(args ...string) string {
		t.Helper()
		return netnstest.Run(t, ns, append([]string{"conntrack"}, args...)...)
	}
	for _, e := range []string{
		"-I -p udp -s 10.244.1.9 -d 10.96.0.10 --sport 4000 --dport 53 --reply-src 10.244.2.5 --reply-dst 10.244.1.9 --reply-port-src 5353 --reply-port-dst 4000 -t 100",
		"-I -p udp -s 10.244.1.9 -d 10.96.0.10 --sport 4001 --dport 53 --reply-src 10.244.3.5 --reply-dst 10.244.1.9 --reply-port-src 5353 --reply-port-dst 4001 -t 100",
		"-I -p udp -s 192.168.5.5 -d 192.168.0.10 --sport 4002 --dport 30053 --reply-src 10.244.2.5 --reply-dst 192.168.0.10 --reply-port-src 5353 --reply-port-dst 4002 -t 100",
		"-I -p udp -s fd00:244:1::9 -d fd00::10 --sport 4003 --dport 53 --reply-src fd00:244:2::5 --reply-dst fd00:244:1::9 --reply-port-src 5353 --reply-port-dst 4003 -t 100",
	} {
		inNS(strings.Fields(e)...)
	}
	return inNS
}
