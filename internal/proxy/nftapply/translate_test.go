package nftapply

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

func ptr[T any](v T) *T { return &v }

// translateText encodes a rule written as text, read with nftrules.ParseRule: the tests state
// rules as nft shows them. A parse error is an *UnsupportedError like an encoding error.
func translateText(tr ruleTranslator, text string, comment *string) ([]expr.Any, []byte, error) {
	stmts, err := nftrules.ParseRule(text)
	if err != nil {
		return nil, nil, &UnsupportedError{Reason: FallbackRule, Op: "rule " + text, Detail: err.Error()}
	}
	r := &nftrules.Rule{Stmts: stmts}
	if comment != nil {
		r.Comment = *comment
	}
	exprs, ud, _, err := tr.encode(r)
	return exprs, ud, err
}

// TestTranslateRule pins the expressions of each rule shape to what `nft --debug=netlink` shows
// nft 1.0.6 sending (see rules.go). The netns tests check the same against the kernel.
func TestTranslateRule(t *testing.T) {
	v4payload := func(off uint32, reg uint32) *expr.Payload {
		return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4}
	}
	v6payload := func(off uint32, reg uint32) *expr.Payload {
		return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 16}
	}
	l4 := func(p byte) []expr.Any {
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
	}
	cat := func(parts ...any) []expr.Any {
		var out []expr.Any
		for _, p := range parts {
			switch p := p.(type) {
			case expr.Any:
				out = append(out, p)
			case []expr.Any:
				out = append(out, p...)
			}
		}
		return out
	}
	v6addr := []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}
	tests := []struct {
		fam     knftables.Family
		rule    string
		comment *string
		want    []expr.Any
		ud      []byte
	}{{
		fam:     knftables.IPv4Family,
		rule:    "ip daddr 10.96.0.10 tcp dport 80 ip saddr != @cluster-cidrs jump mark-for-masquerade",
		comment: ptr("masquerade traffic from outside the cluster"),
		want: cat(v4payload(16, 1), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{10, 96, 0, 10}},
			l4(6),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 80}},
			v4payload(12, 1), &expr.Lookup{SourceRegister: 1, SetName: "cluster-cidrs", Invert: true},
			&expr.Verdict{Kind: expr.VerdictJump, Chain: "mark-for-masquerade"}),
		ud: append([]byte{0, 44}, "masquerade traffic from outside the cluster\x00"...),
	}, {
		fam:  knftables.IPv4Family,
		rule: "ip saddr @affinity-X-ns/s/tcp/p__10.0.0.1/80 goto endpoint-X-ns/s/tcp/p__10.0.0.1/80",
		want: cat(v4payload(12, 1), &expr.Lookup{SourceRegister: 1, SetName: "affinity-X-ns/s/tcp/p__10.0.0.1/80"},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: "endpoint-X-ns/s/tcp/p__10.0.0.1/80"}),
	}, {
		fam:  knftables.IPv4Family,
		rule: "numgen inc mod 3 0 goto endpoint-a",
		want: cat(&expr.Numgen{Register: 1, Modulus: 3, Type: unix.NFT_NG_INCREMENTAL},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hostU32(0)},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: "endpoint-a"}),
	}, {
		fam:  knftables.IPv4Family,
		rule: "numgen random mod 9 vmap @service-X-ns/s/tcp/p",
		want: cat(&expr.Numgen{Register: 1, Modulus: 9, Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: 1, IsDestRegSet: true, SetName: "service-X-ns/s/tcp/p"}),
	}, {
		fam:  knftables.IPv6Family,
		rule: "jhash ip6 saddr mod 13 seed 0xdeadbeef vmap @m",
		want: cat(v6payload(8, 2),
			&expr.Hash{SourceRegister: 2, DestRegister: 1, Length: 16, Modulus: 13, Seed: 0xdeadbeef, Type: expr.HashTypeJenkins},
			&expr.Lookup{SourceRegister: 1, IsDestRegSet: true, SetName: "m"}),
	}, {
		fam:  knftables.IPv4Family,
		rule: "fib saddr type local goto service-X",
		want: cat(&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hostU32(2)},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: "service-X"}),
	}, {
		fam:  knftables.IPv6Family,
		rule: "update @aff { ip6 saddr }",
		want: cat(v6payload(8, 1), &expr.Dynset{SrcRegKey: 1, SetName: "aff", Operation: unix.NFT_DYNSET_OP_UPDATE}),
	}, {
		fam:  knftables.IPv6Family,
		rule: "meta l4proto sctp dnat to [fd00::5]:8080",
		want: cat(l4(132), &expr.Immediate{Register: 1, Data: v6addr}, &expr.Immediate{Register: 2, Data: []byte{0x1f, 0x90}},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV6, RegAddrMin: 1, RegProtoMin: 2, Specified: true}),
	}, {
		fam:     knftables.IPv4Family,
		rule:    "drop",
		comment: ptr("x"),
		want:    cat(&expr.Verdict{Kind: expr.VerdictDrop}),
		ud:      []byte{0, 2, 'x', 0},
	}, {
		// nft --debug=netlink: numgen reg 1 = random mod 65536 offset 131072; byteorder reg 1 =
		// hton(reg 1, 4, 4); lookup reg 1 set m dreg 1; nat dnat ip addr_min reg 1 addr_max reg 1
		// proto_min reg 9 proto_max reg 9 flags 0x3
		fam:  knftables.IPv4Family,
		rule: "meta l4proto tcp dnat ip to numgen random mod 65536 offset 131072 map @dnat-endpoints-tcp-0",
		want: cat(l4(6),
			&expr.Numgen{Register: 1, Type: unix.NFT_NG_RANDOM, Modulus: 65536, Offset: 131072},
			&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 4, Size: 4},
			&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: "dnat-endpoints-tcp-0"},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 9, RegProtoMax: 9, Specified: true}),
	}, {
		// ip6: the port follows the 16-byte address, in reg 2.
		fam:  knftables.IPv6Family,
		rule: "meta l4proto sctp dnat ip6 to numgen random mod 65536 offset 65536 map @dnat-endpoints-sctp-0",
		want: cat(l4(132),
			&expr.Numgen{Register: 1, Type: unix.NFT_NG_RANDOM, Modulus: 65536, Offset: 65536},
			&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 4, Size: 4},
			&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: "dnat-endpoints-sctp-0"},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV6, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true}),
	}}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			got, ud, err := translateText(newRuleTranslator(tc.fam), tc.rule, tc.comment)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("expressions:\n got %s\nwant %s", dump(got), dump(tc.want))
			}
			if !reflect.DeepEqual(ud, tc.ud) {
				t.Errorf("userdata %q, want %q", ud, tc.ud)
			}
		})
	}
}

func dump(es []expr.Any) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n  %T %+v", e, e)
	}
	return b.String()
}

// TestTranslateRuleUnsupported: shapes the translator does not know are refused with
// FallbackRule, never guessed.
func TestTranslateRuleUnsupported(t *testing.T) {
	for _, rule := range []string{
		"ip saddr == { 192.168.0.0/16 , 10.0.0.1 } drop", // == with a set: nftrules writes none
		"ip daddr . ip saddr vmap { 10.0.0.1 : drop }",   // a literal map
		"counter drop",
		"mark 0x4000 drop", // a mark without mask
		"ct state established accept",
		"ip6 daddr 10.0.0.1 drop", // other family
		"ip daddr 10.0.0.0/8 . tcp dport @x",
		"dnat to 10.0.0.1:80", // no protocol
		"numgen random mod 2 2 goto x",
		"jhash ip saddr mod 13 seed 0x0 vmap @m",
		"goto a goto b",
		"reject drop",
		"",
	} {
		_, _, err := translateText(newRuleTranslator(knftables.IPv4Family), rule, nil)
		var u *UnsupportedError
		if !errors.As(err, &u) || u.Reason != FallbackRule {
			t.Errorf("%q: err %v, want an UnsupportedError (rule)", rule, err)
		}
	}
}

// TestTranslateBuilderOutput runs the builder over random models of both families, with and
// without the DSR skip mark and masquerade-all, full and incremental, and checks that every
// operation translates: nothing nftrules writes needs nft. (The netns tests check that the
// kernel then holds what nft would have written.)
func TestTranslateBuilderOutput(t *testing.T) {
	counts := map[string]int{}
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		for _, cfg := range []nftrules.Config{{Family: fam, MaglevTableSize: 13}, {Family: fam, SkipMark: nftrules.DSRMarkMask, MasqueradeAll: true}} {
			b, err := nftrules.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := newTranslator(fam, nftrules.TableName)
			if err != nil {
				t.Fatal(err)
			}
			for seed := range uint64(20) {
				g := nftrulestest.NewGen(seed)
				m := g.Model(20)
				rec := &recorder{}
				b.Full(rec, m, nftrules.Existing{}, nil)
				inc := &recorder{}
				b.Incremental(inc, m, g.Mutate(m, 25), b.StateOf(m))
				for _, o := range append(rec.ops, inc.ops...) {
					if _, err := tr.translate([]op{o}); err != nil {
						t.Errorf("%s: %v", describe(o), err)
					}
					counts[fmt.Sprintf("%s %T", o.verb, o.obj)]++
				}
				if _, err := tr.translate(rec.ops); err != nil {
					t.Errorf("seed %d: the whole full sync: %v", seed, err)
				}
			}
		}
	}
	t.Logf("%v", counts)
}

// TestTranslateElements pins key and value encodings.
func TestTranslateElements(t *testing.T) {
	tr, _ := newTranslator(knftables.IPv4Family, nftrules.TableName)
	tr6, _ := newTranslator(knftables.IPv6Family, nftrules.TableName)
	tests := []struct {
		tr      *translator
		verb    verb
		el      *knftables.Element
		kind    cmdKind
		key     []byte
		verdict *expr.Verdict
		comment string
	}{
		{tr, verbAdd, &knftables.Element{Set: "cluster-ips", Key: []string{"10.96.0.10"}}, cmdAddElems, []byte{10, 96, 0, 10}, nil, ""},
		{tr, verbAdd, &knftables.Element{Map: "service-ips", Key: []string{"10.96.0.10", "tcp", "80"}, Value: []string{"goto service-X"}},
			cmdAddElems, []byte{10, 96, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0}, &expr.Verdict{Kind: expr.VerdictGoto, Chain: "service-X"}, ""},
		{tr, verbAdd, &knftables.Element{Map: "no-endpoint-nodeports", Key: []string{"udp", "30053"}, Value: []string{"drop"}, Comment: ptr("ns/a:dns")},
			cmdAddElems, []byte{17, 0, 0, 0, 0x75, 0x65, 0, 0}, &expr.Verdict{Kind: expr.VerdictDrop}, "ns/a:dns"},
		{tr, verbDelete, &knftables.Element{Map: "service-X-ns/s/tcp/p", Key: []string{"7"}, Value: []string{"goto endpoint-Y"}},
			cmdDelElems, hostU32(7), nil, ""},
		{tr6, verbAdd, &knftables.Element{Map: "no-endpoint-services", Key: []string{"fd00::5", "sctp", "80"}, Value: []string{"goto reject-chain"}},
			cmdAddElems, []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 132, 0, 0, 0, 0, 80, 0, 0},
			&expr.Verdict{Kind: expr.VerdictGoto, Chain: "reject-chain"}, ""},
	}
	for _, tc := range tests {
		cmds, err := tc.tr.translate([]op{{tc.verb, tc.el}})
		if err != nil {
			t.Fatalf("%+v: %v", tc.el, err)
		}
		c := cmds[0]
		want := nftables.SetElement{Key: tc.key, VerdictData: tc.verdict, Comment: tc.comment}
		if c.kind != tc.kind || len(c.elems) != 1 || !reflect.DeepEqual(c.elems[0], want) {
			t.Errorf("%+v: got kind %d %+v, want kind %d %+v", tc.el, c.kind, c.elems, tc.kind, want)
		}
	}
	// DNAT maps: an interval is a start element with the value, the key in network byte order,
	// and an interval-end element at the last key + 1; deleting it deletes both.
	for _, tc := range []struct {
		tr   *translator
		verb verb
		el   *knftables.Element
		want []nftables.SetElement
	}{
		{tr, verbAdd, &knftables.Element{Map: "dnat-endpoints-tcp-0", Key: []string{"131072-163839"}, Value: []string{"10.244.0.5 . 8080"}},
			[]nftables.SetElement{{Key: []byte{0, 2, 0, 0}, Val: []byte{10, 244, 0, 5, 0x1f, 0x90, 0, 0}}, {Key: []byte{0, 2, 0x80, 0}, IntervalEnd: true}}},
		{tr, verbDelete, &knftables.Element{Map: "dnat-endpoints-tcp-0", Key: []string{"131072-163839"}, Value: []string{"10.244.0.5 . 8080"}},
			[]nftables.SetElement{{Key: []byte{0, 2, 0, 0}}, {Key: []byte{0, 2, 0x80, 0}, IntervalEnd: true}}},
		{tr6, verbAdd, &knftables.Element{Map: "dnat-endpoints-udp-1", Key: []string{"4194304-4259839"}, Value: []string{"fd00::5 . 53"}},
			[]nftables.SetElement{{Key: []byte{0, 0x40, 0, 0}, Val: append(slices.Clone(v6addrTest), 0, 53, 0, 0)}, {Key: []byte{0, 0x41, 0, 0}, IntervalEnd: true}}},
		{tr, verbAdd, &knftables.Element{Set: nftrules.HairpinSet, Key: []string{"10.244.0.5", "10.244.0.5"}},
			[]nftables.SetElement{{Key: []byte{10, 244, 0, 5, 10, 244, 0, 5}}}},
		{tr, verbAdd, &knftables.Element{Set: "cluster-cidrs", Key: []string{"10.244.0.0/16"}},
			[]nftables.SetElement{{Key: []byte{10, 244, 0, 0}}, {Key: []byte{10, 245, 0, 0}, IntervalEnd: true}}},
	} {
		cmds, err := tc.tr.translate([]op{{tc.verb, tc.el}})
		if err != nil {
			t.Fatalf("%+v: %v", tc.el, err)
		}
		if len(cmds) != 1 || !reflect.DeepEqual(cmds[0].elems, tc.want) {
			t.Errorf("%s %+v: got %+v, want %+v", tc.verb, tc.el, cmds[0].elems, tc.want)
		}
	}
	for _, el := range []*knftables.Element{
		{Map: "dnat-endpoints-tcp-0", Key: []string{"131072"}, Value: []string{"10.244.0.5 . 8080"}},
		{Map: "dnat-endpoints-tcp-0", Key: []string{"0-4294967295"}, Value: []string{"10.244.0.5 . 8080"}},
		{Map: "dnat-endpoints-tcp-0", Key: []string{"1-2"}, Value: []string{"10.244.0.5"}},
		{Set: "cluster-cidrs", Key: []string{"10.244.0.1/16"}},  // not masked
		{Set: "cluster-cidrs", Key: []string{"255.255.0.0/16"}}, // up to the last address
		{Set: "cluster-cidrs", Key: []string{"fd00::/64"}},
		{Map: "service-ips", Key: []string{"fd00::1", "tcp", "80"}, Value: []string{"drop"}},
		{Map: "service-ips", Key: []string{"10.0.0.1", "icmp", "80"}, Value: []string{"drop"}},
		{Map: "service-ips", Key: []string{"10.0.0.1", "tcp", "80"}, Value: []string{"reject"}},
	} {
		var u *UnsupportedError
		if _, err := tr.translate([]op{{verbAdd, el}}); !errors.As(err, &u) || u.Reason != FallbackElement {
			t.Errorf("%+v: %v, want an element fallback", el, err)
		}
	}
}

// TestTranslateMergesElements: consecutive element operations on one map become one message.
func TestTranslateMergesElements(t *testing.T) {
	tr, _ := newTranslator(knftables.IPv4Family, nftrules.TableName)
	el := func(port string) *knftables.Element {
		return &knftables.Element{Map: "service-nodeports", Key: []string{"tcp", port}, Value: []string{"drop"}}
	}
	cmds, err := tr.translate([]op{
		{verbAdd, el("1")}, {verbAdd, el("2")}, {verbDelete, el("3")}, {verbAdd, el("4")},
		{verbAdd, &knftables.Element{Set: "cluster-ips", Key: []string{"10.0.0.1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, c := range cmds {
		got = append(got, len(c.elems))
	}
	if !reflect.DeepEqual(got, []int{2, 1, 1, 1}) {
		t.Errorf("elements per message %v, want [2 1 1 1]", got)
	}

	// Many: messages of at most 512 elements (the kernel misreads a longer element list, whose
	// nested attribute's 16-bit length overflows, as ENOENT).
	var ops []op
	for i := range 1300 {
		a := netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}).String()
		ops = append(ops, op{verbAdd, &knftables.Element{Set: nftrules.HairpinSet, Key: []string{a, a}}})
	}
	if cmds, err = tr.translate(ops); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, c := range cmds {
		got = append(got, len(c.elems))
	}
	if !reflect.DeepEqual(got, []int{512, 512, 276}) {
		t.Errorf("elements per message %v, want [512 512 276]", got)
	}
}

// TestTranslateSet: affinity sets as nft writes them; other sets fall back.
func TestTranslateSet(t *testing.T) {
	tr, _ := newTranslator(knftables.IPv6Family, nftrules.TableName)
	cmds, err := tr.translate([]op{{verbAdd, &knftables.Set{Name: "affinity-X", Type: "ipv6_addr",
		Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}, Timeout: ptr(600 * time.Second)}}})
	if err != nil {
		t.Fatal(err)
	}
	s := cmds[0].set
	if cmds[0].kind != cmdAddSet || s.KeyType.Name != "ipv6_addr" || !s.Dynamic || !s.HasTimeout || s.Timeout != 600*time.Second {
		t.Errorf("got %+v", s)
	}
	for _, bad := range []*knftables.Set{
		{Name: "x", Type: "ipv4_addr"}, // other family
		{Name: "x", Type: "ipv6_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag, knftables.TimeoutFlag}},
		{Name: "x", Type: "ipv6_addr . ipv6_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}},
		{Name: "x", Type: "ipv6_addr", Comment: ptr(strings.Repeat("c", 128))},
		{Name: "x", Type: "ipv6_addr", Size: ptr(uint64(10))},
		{Name: "x", TypeOf: "ip6 saddr"},
	} {
		var u *UnsupportedError
		if _, err := tr.translate([]op{{verbAdd, bad}}); !errors.As(err, &u) || u.Reason != FallbackObject {
			t.Errorf("%+v: %v, want an object fallback", bad, err)
		}
	}
}

// FuzzTranslateRule: the rule parser never panics, and what it accepts encodes.
func FuzzTranslateRule(f *testing.F) {
	for _, s := range []string{
		"ip daddr 10.96.0.10 tcp dport 80 ip saddr != @cluster-cidrs jump mark-for-masquerade",
		"numgen random mod 3 0 goto e", "jhash ip saddr mod 13 seed 0x1 vmap @m",
		"update @a { ip saddr }", "meta l4proto tcp dnat to 10.0.0.1:80", "fib saddr type local goto x",
		"ip saddr != { 1.2.3.4 } drop", "meta l4proto udp dnat ip to numgen random mod 65536 offset 65536 map @dnat-endpoints-udp-0",
	} {
		f.Add(s)
	}
	tr := newRuleTranslator(knftables.IPv4Family)
	f.Fuzz(func(t *testing.T, rule string) {
		exprs, _, err := translateText(tr, rule, nil)
		if err != nil {
			return
		}
		for _, e := range exprs {
			if _, err := expr.Marshal(unix.NFPROTO_IPV4, e); err != nil {
				t.Fatalf("%q: accepted but does not encode: %v", rule, err)
			}
		}
	})
}

var v6addrTest = []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}

// TestTranslateMap pins the declarations of maps to the userdata nft 1.0.6 writes for them (read
// back from the kernel after nft created them), without their comments.
func TestTranslateMap(t *testing.T) {
	tr, _ := newTranslator(knftables.IPv4Family, nftrules.TableName)
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		m     *knftables.Map
		key   string
		data  string
		udata []byte
	}{
		{&knftables.Map{Name: "service-X", TypeOf: "numgen random mod 2 : verdict"}, "integer", "verdict",
			unhex("000401000000 010400000000 031a 000417000000 0112 000401000000 010402000000 020400000000 0408 000401000000 0100 060400000000")},
		{&knftables.Map{Name: "dnat-endpoints-tcp-0", TypeOf: "numgen random mod 65536 : ip daddr . tcp dport", Flags: []knftables.SetFlag{knftables.IntervalFlag}},
			"integer", "ipv4_addr . inet_service",
			unhex("000401000000010400000000031a0004170000000112000401000000010400000100020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c000408000000010402000000060400000000")},
		{&knftables.Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict"}, "ipv4_addr . inet_proto . inet_service", "verdict",
			unhex("000400000000 010400000000 0308 00040d000000 0100 060400000000")},
	} {
		cmds, err := tr.translate([]op{{verbAdd, tc.m}})
		if err != nil {
			t.Fatalf("%+v: %v", tc.m, err)
		}
		s := cmds[0].set
		if s.KeyType.Name != tc.key || s.DataType.Name != tc.data || !s.IsMap || !slices.Equal(cmds[0].udata, tc.udata) {
			t.Errorf("%s: key %q data %q udata %x, want %q %q %x", tc.m.Name, s.KeyType.Name, s.DataType.Name, cmds[0].udata, tc.key, tc.data, tc.udata)
		}
	}
	for _, bad := range []*knftables.Map{
		{Name: "x", TypeOf: "numgen inc mod 2 : verdict"},
		{Name: "x", TypeOf: "numgen random mod 2 : ip6 daddr . tcp dport"}, // other family
		{Name: "x", TypeOf: "numgen random mod 2 : ip daddr . icmp dport"},
		{Name: "x", Type: "ipv4_addr : verdict"},
		{Name: "x", Type: "inet_proto . inet_service : verdict", Flags: []knftables.SetFlag{knftables.IntervalFlag}},
		{Name: "x", Type: "inet_proto . inet_service : verdict", Size: ptr(uint64(3))},
	} {
		var u *UnsupportedError
		if _, err := tr.translate([]op{{verbAdd, bad}}); !errors.As(err, &u) || u.Reason != FallbackMap {
			t.Errorf("%+v: %v, want a map fallback", bad, err)
		}
	}
}
