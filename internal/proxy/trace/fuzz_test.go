package trace

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/knftables"
)

// FuzzTrace feeds arbitrary rulesets (a table dump, as `ironlb trace` and the tests hand the
// tracer) and packets: FromDump and Trace never panic; a ruleset that loads traces every packet
// of its family to at least one path, each with its verdict (an accepted packet is delivered to
// input or forwarded, a dropped or rejected one is not), or fails with a "tracing:" error; a
// packet of the other family, or a protocol other than tcp, udp and sctp, is such an error; and
// tracing is deterministic: the same packet twice, and through the same dump loaded again, gives
// the same result.
func FuzzTrace(f *testing.F) {
	f.Add(handDump, "10.1.0.2", "10.0.0.1", "tcp", uint16(80), false)
	f.Add(handDump, "10.9.0.1", "10.0.0.100", "udp", uint16(22), true)
	f.Add(handDump, "fd00::1", "10.0.0.1", "tcp", uint16(80), false)
	f.Add("add table ip t\nadd chain ip t c { type nat hook prerouting priority -100 ; }\nadd chain ip t l\n"+
		"add rule ip t c jump l\nadd rule ip t l jump c\n", "10.0.0.1", "10.0.0.2", "sctp", uint16(1), false)
	for _, name := range []string{"lb-cluster", "lb-local", "maglev", "affinity", "dualstack-v6"} {
		b, err := os.ReadFile(filepath.Join("..", "nftrules", "testdata", name+".golden"))
		if err != nil {
			f.Fatal(err)
		}
		var dump strings.Builder
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "add ") {
				dump.WriteString(l + "\n")
			}
		}
		src, dst := "10.244.1.5", "172.18.255.200"
		if strings.Contains(name, "v6") {
			src, dst = "fd00:10:244:1::5", "fd00:ff::1"
		}
		f.Add(dump.String(), src, dst, "tcp", uint16(80), false)
	}
	f.Fuzz(func(t *testing.T, dump, src, dst, proto string, dport uint16, fromHost bool) {
		fam, table := knftables.IPv4Family, "t"
		if first, _, _ := strings.Cut(dump, "\n"); strings.HasPrefix(first, "add table ip6 ") {
			fam = knftables.IPv6Family
		}
		if f := strings.Fields(dump); len(f) > 3 && f[0] == "add" && f[1] == "table" {
			table = f[3]
		}
		rs, err := FromDump(fam, table, dump)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tracing: ") {
				t.Fatalf("FromDump error without the prefix: %v", err)
			}
			return
		}
		s, _ := netip.ParseAddr(src)
		d, _ := netip.ParseAddr(dst)
		p := Packet{Src: s, Dst: d, Protocol: proto, DPort: dport}
		if fromHost {
			p.Origin = FromHost
		}
		h := Host{LocalAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("fd00::100")}}
		res, err := rs.Trace(p, h)
		v6 := fam == knftables.IPv6Family
		familyOK := s.IsValid() && d.IsValid() && s.Unmap().Is6() == v6 && d.Unmap().Is6() == v6
		protoOK := proto == "tcp" || proto == "udp" || proto == "sctp"
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tracing: ") {
				t.Fatalf("Trace error without the prefix: %v", err)
			}
			return
		}
		if !familyOK || !protoOK {
			t.Fatalf("traced %s through an %s ruleset", p, fam)
		}
		if len(res.Paths) == 0 {
			t.Fatalf("no path for %s", p)
		}
		for _, path := range res.Paths {
			switch path.Verdict {
			case Accept:
				if path.Delivery != "input" && path.Delivery != "forward" {
					t.Fatalf("accepted path delivered to %q", path.Delivery)
				}
			case Drop, Reject:
				if path.Delivery != "" {
					t.Fatalf("%s path delivered to %q", path.Verdict, path.Delivery)
				}
			default:
				t.Fatalf("path with verdict %d", path.Verdict)
			}
		}
		if res.Summary() == "" || res.String() == "" {
			t.Fatal("empty summary")
		}
		again, err := rs.Trace(p, h)
		if err != nil {
			t.Fatalf("second trace: %v", err)
		}
		opts := cmp.Options{cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})}
		if diff := cmp.Diff(res, again, opts); diff != "" {
			t.Fatalf("tracing twice differs (-first +second):\n%s", diff)
		}
		rs2, err := FromDump(fam, table, dump)
		if err != nil {
			t.Fatalf("the dump loads once, not twice: %v", err)
		}
		other, err := rs2.Trace(p, h)
		if err != nil {
			t.Fatalf("trace through the reloaded dump: %v", err)
		}
		if diff := cmp.Diff(res, other, opts); diff != "" {
			t.Fatalf("the reloaded dump traces differently (-first +reloaded):\n%s", diff)
		}
	})
}
