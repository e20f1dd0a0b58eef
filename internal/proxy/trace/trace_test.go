package trace

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"sigs.k8s.io/knftables"
)

var update = flag.Bool("update", false, "rewrite testdata/")

var a = netip.MustParseAddr

// handDump exercises the verdict semantics the tracer implements: jump and return, goto, accept
// ending one base chain but not the next, vmaps with concatenations and prefixes, marks.
const handDump = `
add table ip t
add chain ip t pre { type filter hook prerouting priority -110 ; }
add chain ip t nat-pre { type nat hook prerouting priority -100 ; }
add chain ip t fwd { type filter hook forward priority 0 ; }
add chain ip t in { type filter hook input priority 0 ; }
add chain ip t post { type nat hook postrouting priority 100 ; }
add chain ip t sub
add chain ip t pick
add chain ip t ep1
add chain ip t ep2
add chain ip t mark
add map ip t svc { type ipv4_addr . inet_proto . inet_service : verdict ; }
add set ip t blocked { type ipv4_addr ; flags interval ; }
add rule ip t pre ip saddr @blocked drop comment "blocked source"
add rule ip t pre jump sub
add rule ip t pre accept
add rule ip t pre drop comment "never reached: accept ended the chain"
add rule ip t sub meta l4proto udp return
add rule ip t sub mark set mark or 0x10
add rule ip t nat-pre ip daddr . meta l4proto . th dport vmap @svc
add rule ip t pick numgen random mod 2 vmap { 0 : goto ep1 , 1 : goto ep2 }
add rule ip t ep1 meta l4proto tcp dnat to 10.1.0.1:80
add rule ip t ep2 ip saddr 10.1.0.2 jump mark
add rule ip t ep2 meta l4proto tcp dnat to 10.1.0.2:80
add rule ip t mark mark set mark or 0x4000
add rule ip t fwd tcp dport 22 reject comment "no ssh"
add rule ip t post mark and 0x4000 == 0 return
add rule ip t post masquerade
add element ip t svc { 10.0.0.1 . tcp . 80 : goto pick }
add element ip t svc { 10.0.0.2 . tcp . 80 : drop }
add element ip t blocked { 192.0.2.0/24 }
`

func TestTraceSemantics(t *testing.T) {
	rs, err := FromDump(knftables.IPv4Family, "t", handDump)
	if err != nil {
		t.Fatal(err)
	}
	host := Host{LocalAddrs: []netip.Addr{a("10.0.0.100")}}
	var out strings.Builder
	for _, tc := range []struct {
		name string
		pkt  Packet
		want string
	}{
		{"fork, hairpin on one branch", Packet{Src: a("10.1.0.2"), Dst: a("10.0.0.1"), Protocol: "tcp", DPort: 80}, "DNAT 10.1.0.1:80 | DNAT 10.1.0.2:80 masq"},
		{"map verdict drop", Packet{Src: a("10.9.0.1"), Dst: a("10.0.0.2"), Protocol: "tcp", DPort: 80}, "drop"},
		{"interval set", Packet{Src: a("192.0.2.7"), Dst: a("10.0.0.1"), Protocol: "tcp", DPort: 80}, "drop"},
		{"reject after forward", Packet{Src: a("10.9.0.1"), Dst: a("10.5.0.1"), Protocol: "tcp", DPort: 22}, "reject"},
		{"udp returns early, untouched", Packet{Src: a("10.9.0.1"), Dst: a("10.5.0.1"), Protocol: "udp", DPort: 22}, "accept"},
		{"local delivery skips forward", Packet{Src: a("10.9.0.1"), Dst: a("10.0.0.100"), Protocol: "tcp", DPort: 22}, "accept"},
	} {
		res, err := rs.Trace(tc.pkt, host)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := res.Summary(); got != tc.want {
			t.Errorf("%s: got %s, want %s\n%s", tc.name, got, tc.want, res)
		}
		out.WriteString("# " + tc.name + "\n" + res.String() + "\n")
	}
	// The printed form is part of the CLI's output: keep it under review.
	path := filepath.Join("testdata", "semantics.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if diff := cmp.Diff(string(want), out.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestUnsupportedRules(t *testing.T) {
	for _, rule := range []string{
		"ip saddr 1.2.3.4 log",
		"jhash ip saddr mod 4 vmap { 0 : goto a }",
		"tcp sport 80 drop",
		"numgen random mod 0 vmap { 0 : goto a }",
		"ip daddr . meta l4proto vmap { 1.2.3.4 . tcp : counter }",
		"dnat to nowhere",
		"mark set mark and 0x1",
		"update @s { ip saddr",
		"meta l4proto tcp dnat ip to numgen inc mod 65536 offset 65536 map @m",
		"meta l4proto tcp dnat ip to jhash ip saddr mod 13 seed 0x1 map @m",
		"meta l4proto tcp dnat ip to numgen random mod 65536 offset 4294967295 map @m",
		"ct status snat",
	} {
		if _, err := nftrules.ParseRule(rule); err == nil {
			t.Errorf("%q: parsed, want an error", rule)
		}
	}
}

func TestBadReferences(t *testing.T) {
	for _, dump := range []string{
		"add table ip t\nadd chain ip t c\nadd map ip t m { type inet_service : verdict ; }\nadd rule ip t c th dport vmap @m\nadd element ip t m { 80 : goto c }\n",
	} {
		if _, err := FromDump(knftables.IPv4Family, "t", dump); err != nil {
			t.Errorf("valid dump rejected: %v", err)
		}
	}
	if _, err := FromDump(knftables.IPv4Family, "t", "add table ip t\nadd chain ip t c\nadd rule ip t c ip saddr 1.2.3.4 log\n"); err == nil {
		t.Error("unsupported rule accepted")
	}
	if _, err := FromDump("inet", "t", "add table inet t\n"); err == nil {
		t.Error("inet family accepted")
	}
}

func TestPacketChecks(t *testing.T) {
	rs, err := FromDump(knftables.IPv4Family, "t", handDump)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Packet{
		{Src: a("fd00::1"), Dst: a("10.0.0.1"), Protocol: "tcp", DPort: 80},
		{Src: a("10.0.0.9"), Dst: a("10.0.0.1"), Protocol: "icmp"},
		{Dst: a("10.0.0.1"), Protocol: "tcp"},
	} {
		if _, err := rs.Trace(p, Host{}); err == nil {
			t.Errorf("%v: traced, want an error", p)
		}
	}
}

func TestLoop(t *testing.T) {
	rs, err := FromDump(knftables.IPv4Family, "t", "add table ip t\nadd chain ip t pre { type filter hook prerouting priority 0 ; }\nadd chain ip t x\nadd rule ip t pre jump x\nadd rule ip t x jump x\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Trace(Packet{Src: a("10.0.0.1"), Dst: a("10.0.0.2"), Protocol: "tcp", DPort: 1}, Host{}); err != ErrLoop {
		t.Errorf("err = %v, want ErrLoop", err)
	}
}

// TestJhashBucket: buckets stay in range and spread evenly (the kernel's reciprocal_scale).
func TestJhashBucket(t *testing.T) {
	const n = 7
	count := make([]int, n)
	for i := range 7000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		b := bucket(jhash(ip.AsSlice(), 0x1234), n)
		if b >= n {
			t.Fatalf("bucket %d out of range", b)
		}
		count[b]++
	}
	for i, c := range count {
		if c < 850 || c > 1150 {
			t.Errorf("bucket %d got %d of 7000", i, c)
		}
	}
}

// dnatDump has a DNAT map with two windows (the second split between two endpoints) and the
// hairpin masquerade through a set of address pairs, as nftrules writes them.
const dnatDump = `
add table ip t
add chain ip t nat-pre { type nat hook prerouting priority -100 ; }
add chain ip t post { type nat hook postrouting priority 100 ; }
add chain ip t svc-a
add chain ip t svc-b
add map ip t svc { type ipv4_addr . inet_proto . inet_service : verdict ; }
add map ip t dnat-endpoints-tcp-0 { typeof numgen random mod 65536 : ip daddr . tcp dport ; flags interval ; }
add set ip t hairpin { type ipv4_addr . ipv4_addr ; }
add rule ip t nat-pre ip daddr . meta l4proto . th dport vmap @svc
add rule ip t svc-a meta l4proto tcp dnat ip to numgen random mod 65536 offset 65536 map @dnat-endpoints-tcp-0
add rule ip t svc-b meta l4proto tcp dnat ip to numgen random mod 65536 offset 131072 map @dnat-endpoints-tcp-0
add rule ip t post ct status dnat ip saddr . ip daddr @hairpin masquerade
add element ip t svc { 10.96.0.1 . tcp . 80 : goto svc-a }
add element ip t svc { 10.96.0.2 . tcp . 80 : goto svc-b }
add element ip t dnat-endpoints-tcp-0 { 65536-131071 : 10.244.0.9 . 8080 }
add element ip t dnat-endpoints-tcp-0 { 131072-152917 : 10.244.0.5 . 8080 }
add element ip t dnat-endpoints-tcp-0 { 152918-196607 : 10.244.0.6 . 9090 }
add element ip t hairpin { 10.244.0.5 . 10.244.0.5 }
add element ip t hairpin { 10.244.0.6 . 10.244.0.6 }
`

// TestDNATMap: a DNAT map rule forks one path per interval of its window, each with its share
// and target, and only the hairpin path is masqueraded.
func TestDNATMap(t *testing.T) {
	rs, err := FromDump(knftables.IPv4Family, "t", dnatDump)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src, dst string
		want     string
		choices  []string
	}{
		{"10.244.1.1", "10.96.0.1", "DNAT 10.244.0.9:8080", []string{"numgen random: 0-65535 of 65536"}},
		{"10.244.1.1", "10.96.0.2", "DNAT 10.244.0.5:8080 | DNAT 10.244.0.6:9090",
			[]string{"numgen random: 0-21845 of 65536", "numgen random: 21846-65535 of 65536"}},
		{"10.244.0.5", "10.96.0.2", "DNAT 10.244.0.5:8080 masq | DNAT 10.244.0.6:9090", nil},
	} {
		res, err := rs.Trace(Packet{Src: a(tc.src), Dst: a(tc.dst), Protocol: "tcp", DPort: 80}, Host{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Summary(); got != tc.want {
			t.Errorf("%s -> %s: %s, want %s\n%s", tc.src, tc.dst, got, tc.want, res)
		}
		if tc.choices != nil {
			var got []string
			for _, p := range res.Paths {
				got = append(got, p.Choice)
			}
			if diff := cmp.Diff(tc.choices, got); diff != "" {
				t.Errorf("%s -> %s: choices (-want +got):\n%s", tc.src, tc.dst, diff)
			}
		}
	}
	// A rule must name a DNAT map, and a DNAT map's intervals must not overlap.
	for _, dump := range []string{
		strings.Replace(dnatDump, "map @dnat-endpoints-tcp-0", "map @svc", 1),
		dnatDump + "add element ip t dnat-endpoints-tcp-0 { 100000-100001 : 10.244.0.7 . 80 }\n",
		dnatDump + "add element ip t dnat-endpoints-tcp-0 { 300000-300001 : 10.244.0.7 }\n",
	} {
		if _, err := FromDump(knftables.IPv4Family, "t", dump); err == nil {
			t.Errorf("bad DNAT map accepted:\n%s", dump[len(dump)-120:])
		}
	}
}
