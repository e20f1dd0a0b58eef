package nftapply

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// The DSR table's statements, as nftrules.WriteDSR writes them (ParseRule does not read them).
var (
	dsrTuple    = []nftrules.Expr{{Field: nftrules.FieldDaddr}, {Field: nftrules.FieldL4Proto}, {Field: nftrules.FieldDport}}
	dsrFlowHash = []nftrules.Expr{{Field: nftrules.FieldJhash, Flow: true, Mod: 251, Seed: 0x2f9f9bd}}
	dsrCtMark   = []nftrules.Expr{{Field: nftrules.FieldCtMark}}
	dsrMetaMark = []nftrules.Expr{{Field: nftrules.FieldMark, Meta: true}}
)

func dsrSetMark(ct bool, key []nftrules.Expr, m string, v uint32) nftrules.Stmt {
	return nftrules.Stmt{Kind: nftrules.StmtSetMark, Ct: ct, Key: key, Name: m, Value: nftrules.NumValue(v)}
}

// cat0 concatenates expressions and slices of them.
func cat0(parts ...any) []expr.Any {
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

// TestTranslateDSRRule pins the expressions of the DSR table's rule shapes to what
// `nft --debug=netlink` shows nft 1.0.6 sending for their text (the text each renders to is
// checked too). TestNetlinkDSRMatchesNFT checks the same against the kernel.
func TestTranslateDSRRule(t *testing.T) {
	l4 := func(p byte) []expr.Any {
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
	}
	tuple := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
		&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
	// payload load 4b @ network header + 12 => reg 2; payload load 2b @ transport header + 0 =>
	// reg 13; ... + 16 => reg 14; ... + 2 => reg 15; meta load l4proto => reg 3;
	// hash reg 1 = jhash(reg 2, 20, 0x2f9f9bd) % mod 251
	flow := []expr.Any{
		&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: 13, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
		&expr.Payload{DestRegister: 14, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Payload{DestRegister: 15, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 3},
		&expr.Hash{SourceRegister: 2, DestRegister: 1, Length: 20, Modulus: 251, Seed: 0x2f9f9bd, Type: expr.HashTypeJenkins},
	}
	ether := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFTYPE, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1, 0}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
	}
	ifname := func(key expr.MetaKey) []expr.Any {
		return []expr.Any{&expr.Meta{Key: key, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte("ironlb-dsr0\x00\x00\x00\x00\x00")}}
	}
	setCt := &expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true}
	// tcp flags & (syn | ack) == syn, and ct status & (confirmed | dnat) == confirmed
	synOnly := nftrules.Stmt{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldTCPFlags, Mask: 0x12}}, Op: nftrules.OpEq, Value: nftrules.NumValue(2)}
	synOnlyExprs := cat0(l4(6), &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{2}})
	ctConfirmedOnly := nftrules.Stmt{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldCtStatus, Mask: 0x28}}, Op: nftrules.OpEq, Value: nftrules.NumValue(8)}
	ctConfirmedExprs := []expr.Any{&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(0x28), Xor: hostU32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hostU32(8)}}
	setMeta := &expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1}
	lookupMark := func(m string) *expr.Lookup {
		return &expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: m}
	}
	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	cat := cat0
	for _, tc := range []struct {
		text  string
		stmts []nftrules.Stmt
		want  []expr.Any
	}{{
		"notrack", []nftrules.Stmt{{Kind: nftrules.StmtNotrack}}, cat(&expr.Notrack{}),
	}, {
		// meta load l4proto; cmp eq 6; payload load 1b @ transport header + 13; bitwise & 0x12;
		// cmp eq 0x02; the tuple; lookup reg 1 set svc dreg 0
		"tcp flags & (syn | ack) == syn ip daddr . meta l4proto . th dport vmap @raw-services",
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldTCPFlags, Mask: 0x12}}, Op: nftrules.OpEq, Value: nftrules.NumValue(2)},
			{Kind: nftrules.StmtVmap, Key: dsrTuple, Name: "raw-services"}},
		cat(l4(6), &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{2}},
			tuple, &expr.Lookup{SourceRegister: 1, IsDestRegSet: true, SetName: "raw-services"}),
	}, {
		// oifname; l4proto tcp; tcp flags & syn != 0; rt load tcpmss => reg 1;
		// byteorder reg 1 = hton(reg 1, 2, 2); exthdr write tcpopt reg 1 => 2b @ 2 + 2
		`oifname "ironlb-dsr0" tcp flags syn tcp option maxseg size set rt mtu`,
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldOifname}}, Value: nftrules.StringValue("ironlb-dsr0")},
			{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldTCPFlags}}, Value: nftrules.NumValue(2)},
			{Kind: nftrules.StmtClampMSS}},
		cat(ifname(expr.MetaKeyOIFNAME), l4(6), &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{2}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0}},
			&expr.Rt{Register: 1, Key: expr.RtTCPMSS},
			&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 2, Size: 2},
			&expr.Exthdr{SourceRegister: 1, Type: 2, Offset: 2, Len: 2, Op: expr.ExthdrOpTcpopt}),
	}, {
		"meta mark and 0xfff0000 == 65536 ip daddr . meta l4proto . th dport vmap @local-services",
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldMark, Meta: true, Mask: 0x0fff0000}}, Op: nftrules.OpEq, Value: nftrules.NumValue(0x10000)},
			{Kind: nftrules.StmtVmap, Key: dsrTuple, Name: "local-services"}},
		cat(&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(0x0fff0000), Xor: hostU32(0)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hostU32(0x10000)},
			tuple, &expr.Lookup{SourceRegister: 1, IsDestRegSet: true, SetName: "local-services"}),
	}, {
		// meta load iiftype; cmp eq 1; payload load 6b @ link header + 6; lookup; immediate reg 1
		// 0xc0a8010a; ct set mark with reg 1; immediate reg 1 0x00010000; meta set mark; return
		"ether saddr @peer-macs ct mark set 0xc0a8010a meta mark set 0x10000 return",
		[]nftrules.Stmt{{Kind: nftrules.StmtLookup, Key: []nftrules.Expr{{Field: nftrules.FieldEtherSaddr}}, Name: "peer-macs"},
			dsrSetMark(true, nil, "", 0xc0a8010a), dsrSetMark(false, nil, "", 0x10000), {Kind: nftrules.StmtVerdict, Verdict: nftrules.Return}},
		cat(ether, &expr.Lookup{SourceRegister: 1, SetName: "peer-macs"},
			&expr.Immediate{Register: 1, Data: hostU32(0xc0a8010a)}, setCt,
			&expr.Immediate{Register: 1, Data: hostU32(0x10000)}, setMeta, ret),
	}, {
		`iifname "ironlb-dsr0" return`,
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldIifname}}, Value: nftrules.StringValue("ironlb-dsr0")},
			{Kind: nftrules.StmtVerdict, Verdict: nftrules.Return}},
		cat(ifname(expr.MetaKeyIIFNAME), ret),
	}, {
		// ct state new; ct load mark => reg 1; cmp eq reg 1 0; the flow hash; lookup reg 1 set
		// own dreg 1; ct set mark with reg 1
		"ct state new ct mark 0 ct mark set jhash " + nftrules.FlowKey + " mod 251 seed 0x2f9f9bd map @own",
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldCtState}}, Value: nftrules.SymValue("new")},
			{Kind: nftrules.StmtMatch, Key: dsrCtMark, Value: nftrules.NumValue(0)},
			dsrSetMark(true, dsrFlowHash, "own", 0)},
		cat(&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(8), Xor: hostU32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: hostU32(0)},
			&expr.Ct{Register: 1, Key: expr.CtKeyMARK}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hostU32(0)},
			flow, lookupMark("own"), setCt),
	}, {
		"meta mark set ct mark map @nodes return",
		[]nftrules.Stmt{dsrSetMark(false, dsrCtMark, "nodes", 0), {Kind: nftrules.StmtVerdict, Verdict: nftrules.Return}},
		cat(&expr.Ct{Register: 1, Key: expr.CtKeyMARK}, lookupMark("nodes"), setMeta, ret),
	}, {
		"meta mark set jhash " + nftrules.FlowKey + " mod 251 seed 0x2f9f9bd map @own",
		[]nftrules.Stmt{dsrSetMark(false, dsrFlowHash, "own", 0)},
		cat(flow, lookupMark("own"), setMeta),
	}, {
		"ct mark set meta mark",
		[]nftrules.Stmt{dsrSetMark(true, dsrMetaMark, "", 0)},
		cat(&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, setCt),
	}, {
		"meta mark set meta mark map @nodes",
		[]nftrules.Stmt{dsrSetMark(false, dsrMetaMark, "nodes", 0)},
		cat(&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, lookupMark("nodes"), setMeta),
	}, {
		// The SYN re-hash rule (issue 19's reuse row): l4proto tcp; tcp flags & 0x12 == 0x02;
		// ct load status => reg 1; bitwise & 0x28; cmp eq 0x08; the flow hash; lookup own dreg 1;
		// meta set mark; meta load mark => reg 1; cmp neq 0xc0a8010a; meta load mark; ct set mark
		"tcp flags & (syn | ack) == syn ct status & (confirmed | dnat) == confirmed meta mark set jhash " + nftrules.FlowKey +
			" mod 251 seed 0x2f9f9bd map @own meta mark != 3232235786 ct mark set meta mark",
		[]nftrules.Stmt{synOnly, ctConfirmedOnly, dsrSetMark(false, dsrFlowHash, "own", 0),
			{Kind: nftrules.StmtMatch, Key: dsrMetaMark, Op: nftrules.OpNeq, Value: nftrules.NumValue(0xc0a8010a)},
			dsrSetMark(true, dsrMetaMark, "", 0)},
		cat(synOnlyExprs, ctConfirmedExprs, flow, lookupMark("own"), setMeta,
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: hostU32(0xc0a8010a)},
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, setCt),
	}, {
		// ... at a node without a slot: the hash's owner straight into the ct mark
		"tcp flags & (syn | ack) == syn ct status & (confirmed | dnat) == confirmed ct mark set jhash " + nftrules.FlowKey +
			" mod 251 seed 0x2f9f9bd map @own",
		[]nftrules.Stmt{synOnly, ctConfirmedOnly, dsrSetMark(true, dsrFlowHash, "own", 0)},
		cat(synOnlyExprs, ctConfirmedExprs, flow, lookupMark("own"), setCt),
	}, {
		// The rejoin rule's jump: tcp flags & 0x12 == 0x10; ct state new; the flow hash; lookup
		// reg 1 set rejoin dreg 0
		"tcp flags & (syn | ack) == ack ct state new jhash " + nftrules.FlowKey + " mod 251 seed 0x2f9f9bd vmap @rejoin",
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldTCPFlags, Mask: 0x12}}, Op: nftrules.OpEq, Value: nftrules.NumValue(0x10)},
			{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldCtState}}, Value: nftrules.SymValue("new")},
			{Kind: nftrules.StmtVmap, Key: dsrFlowHash, Name: "rejoin"}},
		cat(l4(6), &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x10}},
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(8), Xor: hostU32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: hostU32(0)},
			flow, &expr.Lookup{SourceRegister: 1, IsDestRegSet: true, SetName: "rejoin"}),
	}, {
		// The rejoin chain's first rule: ct load mark; cmp eq 0; the flow hash; lookup alt dreg 1;
		// ct set mark
		"ct mark 0 ct mark set jhash " + nftrules.FlowKey + " mod 251 seed 0x2f9f9bd map @alt",
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: dsrCtMark, Value: nftrules.NumValue(0)}, dsrSetMark(true, dsrFlowHash, "alt", 0)},
		cat(&expr.Ct{Register: 1, Key: expr.CtKeyMARK}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hostU32(0)},
			flow, lookupMark("alt"), setCt),
	}, {
		"ct status & (assured | confirmed) != assured",
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldCtStatus, Mask: 0xc}}, Op: nftrules.OpNeq, Value: nftrules.NumValue(4)}},
		cat(&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(0xc), Xor: hostU32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: hostU32(4)}),
	}, {
		"jhash " + nftrules.FlowKey + " mod 251 seed 0x2f9f9bd vmap @rawm",
		[]nftrules.Stmt{{Kind: nftrules.StmtVmap, Key: dsrFlowHash, Name: "rawm"}},
		cat(flow, &expr.Lookup{SourceRegister: 1, IsDestRegSet: true, SetName: "rawm"}),
	}, {
		// ... lookup reg 1 set eps dreg 1; nat dnat ip addr_min reg 1 addr_max reg 1 proto_min
		// reg 9 proto_max reg 9 flags 0x3 (no byteorder: the map's keys are host-order buckets)
		"meta l4proto udp dnat ip to jhash " + nftrules.FlowKey + " mod 251 seed 0x2f9f9bd map @eps",
		[]nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldL4Proto}}, Value: nftrules.SymValue("udp")},
			{Kind: nftrules.StmtDNATMap, Key: dsrFlowHash, Name: "eps"}},
		cat(l4(17), flow, lookupMark("eps"),
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 9, RegProtoMax: 9, Specified: true}),
	}} {
		t.Run(tc.text, func(t *testing.T) {
			r := &nftrules.Rule{Stmts: tc.stmts}
			if r.String() != tc.text {
				t.Errorf("renders %q, want %q", r.String(), tc.text)
			}
			got, _, _, err := newRuleTranslator(knftables.IPv4Family).encode(r)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("expressions:\n got %s\nwant %s", dump(got), dump(tc.want))
			}
		})
	}
}

// TestTranslateDSRRuleRejects: shapes outside what the encoder knows fail with a rule fallback
// rather than encoding something else.
func TestTranslateDSRRuleRejects(t *testing.T) {
	tcpFlags := func(mask, v uint32, op nftrules.Op) nftrules.Stmt {
		return nftrules.Stmt{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldTCPFlags, Mask: mask}}, Op: op, Value: nftrules.NumValue(v)}
	}
	ifname := func(s string) nftrules.Stmt {
		return nftrules.Stmt{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldIifname}}, Value: nftrules.StringValue(s)}
	}
	for _, tc := range []struct {
		name  string
		fam   knftables.Family
		stmts []nftrules.Stmt
	}{
		{"mss clamp without a tcp match", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtClampMSS}}},
		{"tcp flags != syn", knftables.IPv4Family, []nftrules.Stmt{tcpFlags(0x12, 2, nftrules.OpNeq)}},
		{"tcp flags value outside the mask", knftables.IPv4Family, []nftrules.Stmt{tcpFlags(0x10, 2, nftrules.OpEq)}},
		{"tcp flags mask without ==", knftables.IPv4Family, []nftrules.Stmt{tcpFlags(0x12, 2, nftrules.OpNone)}},
		{"tcp flags 0", knftables.IPv4Family, []nftrules.Stmt{tcpFlags(0, 0, nftrules.OpNone)}},
		{"ct status bits outside the mask", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtMatch,
			Key: []nftrules.Expr{{Field: nftrules.FieldCtStatus, Mask: 0x28}}, Op: nftrules.OpEq, Value: nftrules.NumValue(4)}}},
		{"ct status & bits compared with a symbol", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtMatch,
			Key: []nftrules.Expr{{Field: nftrules.FieldCtStatus, Mask: 0x28}}, Op: nftrules.OpEq, Value: nftrules.SymValue("confirmed")}}},
		{"ct status & bits in a set", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtMatch,
			Key: []nftrules.Expr{{Field: nftrules.FieldCtStatus, Mask: 0x28}}, Value: nftrules.NumValue(8), Set: []nftrules.Value{nftrules.NumValue(8)}}}},
		{"a mark without meta or a mask", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtMatch,
			Key: []nftrules.Expr{{Field: nftrules.FieldMark}}, Op: nftrules.OpNeq, Value: nftrules.NumValue(1)}}},
		{"meta mark compared with an address", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtMatch,
			Key: dsrMetaMark, Op: nftrules.OpNeq, Value: nftrules.AddrValue(netip.MustParseAddr("192.0.2.1"))}}},
		{"interface name too long", knftables.IPv4Family, []nftrules.Stmt{ifname("a-name-of-16-chr")}},
		{"interface wildcard", knftables.IPv4Family, []nftrules.Stmt{ifname("eth*")}},
		{"interface name not a string", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtMatch, Key: []nftrules.Expr{{Field: nftrules.FieldIifname}}, Value: nftrules.SymValue("eth0")}}},
		{"a hash set as a mark", knftables.IPv4Family, []nftrules.Stmt{dsrSetMark(true, dsrFlowHash, "", 0)}},
		{"a mark set through a map from nothing", knftables.IPv4Family, []nftrules.Stmt{dsrSetMark(true, nil, "m", 1)}},
		{"a masked mark set", knftables.IPv4Family, []nftrules.Stmt{dsrSetMark(true, []nftrules.Expr{{Field: nftrules.FieldMark, Meta: true, Mask: 1}}, "", 0)}},
		{"flow hash in ip6", knftables.IPv6Family, []nftrules.Stmt{{Kind: nftrules.StmtVmap, Key: []nftrules.Expr{{Field: nftrules.FieldJhash, Flow: true, IP6: true, Mod: 3, Seed: 1}}, Name: "m"}}},
		{"flow hash seed 0", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtVmap, Key: []nftrules.Expr{{Field: nftrules.FieldJhash, Flow: true, Mod: 3}}, Name: "m"}}},
		{"dnat map by flow hash without a protocol", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtDNATMap, Key: dsrFlowHash, Name: "eps"}}},
		{"ether saddr in a concatenation", knftables.IPv4Family, []nftrules.Stmt{{Kind: nftrules.StmtLookup,
			Key: []nftrules.Expr{{Field: nftrules.FieldEtherSaddr}, {Field: nftrules.FieldSaddr}}, Name: "s"}}},
	} {
		_, _, _, err := newRuleTranslator(tc.fam).encode(&nftrules.Rule{Stmts: tc.stmts})
		var u *UnsupportedError
		if !errors.As(err, &u) || u.Reason != FallbackRule {
			t.Errorf("%s: %v, want a rule fallback", tc.name, err)
		}
	}
}

// TestTranslateDSRObjects pins the DSR table's declarations to the userdata nft 1.0.6 writes for
// them (read back from the kernel after nft created them), and its elements to nft's encoding.
func TestTranslateDSRObjects(t *testing.T) {
	tr, err := newTranslator(knftables.IPv4Family, nftrules.DSRTableName)
	if err != nil {
		t.Fatal(err)
	}
	comment := "o"
	ops := []op{
		{verbAdd, &knftables.Chain{Name: "raw-prerouting", Type: ptr(knftables.FilterType), Hook: ptr(knftables.PreroutingHook), Priority: ptr(knftables.RawPriority)}},
		{verbAdd, &knftables.Chain{Name: "dsr-x", Comment: ptr("c1")}},
		{verbAdd, &knftables.Set{Name: "peer-macs", Type: "ether_addr", Comment: ptr("m")}},
		{verbAdd, &knftables.Map{Name: "own", TypeOf: "numgen random mod 2 : meta mark", Comment: &comment}},
		{verbAdd, &knftables.Map{Name: "nodes", TypeOf: "meta mark : meta mark"}},
		{verbAdd, &knftables.Map{Name: "eps", TypeOf: "numgen random mod 2 : ip daddr . tcp dport"}},
		{verbAdd, &knftables.Element{Set: "peer-macs", Key: []string{"02:42:ac:12:00:03"}}},
		{verbAdd, &knftables.Element{Map: "own", Key: []string{"7"}, Value: []string{"0xc0a8010c"}}},
		{verbAdd, &knftables.Element{Map: "nodes", Key: []string{"0xc0a8010c"}, Value: []string{"0x20000"}}},
		{verbAdd, &knftables.Element{Map: "eps", Key: []string{"0"}, Value: []string{"10.244.1.5 . 8080"}}},
	}
	cmds, err := tr.translate(ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != len(ops) {
		t.Fatalf("%d commands for %d operations", len(cmds), len(ops))
	}
	if p := cmds[0].chain.Priority; p == nil || *p != -300 || cmds[0].udata != nil {
		t.Errorf("raw-prerouting: priority %v, userdata %x; want -300, none", p, cmds[0].udata)
	}
	if want := []byte{0, 3, 'c', '1', 0}; !slices.Equal(cmds[1].udata, want) {
		t.Errorf("chain comment userdata %x, want %x", cmds[1].udata, want)
	}
	for i, tc := range []struct {
		key, data string
		udata     string
	}{
		{"ether_addr", "", "000402000000 07026d00"},
		{"integer", "mark", "000401000000 010401000000 031a 000417000000 0112 000401000000 010402000000 020400000000 040e 000409000000 0106 000403000000 060400000000 07026f00"},
		{"mark", "mark", "000401000000 010401000000 030e 000409000000 0106 000403000000 040e 000409000000 0106 000403000000 060400000000"},
	} {
		c := cmds[2+i]
		if c.set.KeyType.Name != tc.key || c.set.DataType.Name != tc.data || !slices.Equal(c.udata, unhexT(t, tc.udata)) {
			t.Errorf("%s: key %q data %q udata %x, want %q %q %s", c.set.Name, c.set.KeyType.Name, c.set.DataType.Name, c.udata, tc.key, tc.data, tc.udata)
		}
	}
	for i, want := range []nftables.SetElement{
		{Key: []byte{0x02, 0x42, 0xac, 0x12, 0, 3}},
		{Key: hostU32(7), Val: hostU32(0xc0a8010c)},
		{Key: hostU32(0xc0a8010c), Val: hostU32(0x20000)},
		{Key: hostU32(0), Val: []byte{10, 244, 1, 5, 0x1f, 0x90, 0, 0}},
	} {
		c := cmds[6+i]
		if c.kind != cmdAddElems || len(c.elems) != 1 || !reflect.DeepEqual(c.elems[0], want) {
			t.Errorf("element %d: %+v, want %+v", i, c.elems, want)
		}
	}
	// Elements that do not fit their declared types, and elements of maps not declared in the
	// batch (which go by name, as the main table's: here refused).
	for _, bad := range []*knftables.Element{
		{Set: "peer-macs", Key: []string{"10.0.0.1"}},
		{Map: "own", Key: []string{"x"}, Value: []string{"0x1"}},
		{Map: "own", Key: []string{"1"}, Value: []string{"goto c"}},
		{Map: "nodes", Key: []string{"0x1"}, Value: []string{"0x1ffffffff"}},
		{Map: "eps", Key: []string{"0"}, Value: []string{"10.244.1.5"}},
	} {
		_, err := tr.translate(append(slices.Clone(ops[:6]), op{verbAdd, bad}))
		var u *UnsupportedError
		if !errors.As(err, &u) || u.Reason != FallbackElement {
			t.Errorf("%+v: %v, want an element fallback", bad, err)
		}
	}
}

// unhexT decodes hex, blanks ignored.
func unhexT(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTranslateDSRPlans: the whole DSR table of random models (randomDSRPlan) translates in one
// batch, as dsrapply writes it: nothing WriteDSR writes is left to a fallback that the
// proxy, without nft, would not have.
func TestTranslateDSRPlans(t *testing.T) {
	tr, err := newTranslator(knftables.IPv4Family, nftrules.DSRTableName)
	if err != nil {
		t.Fatal(err)
	}
	ports := 0
	for seed := range uint64(40) {
		plan := randomDSRPlan(seed)
		ports += len(plan.Ports)
		tx := &Transaction{}
		tx.Add(&knftables.Table{})
		tx.Delete(&knftables.Table{})
		nftrules.WriteDSR(tx, &plan)
		if _, err := tr.translate(tx.rec.ops); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
	if ports < 40 {
		t.Errorf("%d DSR ports in all: the models hardly exercise the table", ports)
	}
}

// randomDSRPlan is the DSR plan of a random model: every Service asking for DSR, or the default
// mode DSR; nodes with or without MACs, this node with or without a slot.
func randomDSRPlan(seed uint64) nftrules.DSRPlan {
	a := netip.MustParseAddr
	g := nftrulestest.NewGen(seed)
	m := g.Model(12)
	cfg := nftrules.DSRConfig{Default: nftrules.ExternalDSR, TableSize: []int{0, 13}[seed%2],
		NodeIPs:  map[string]netip.Addr{"node-b": a("192.0.2.11"), "node-c": a("192.0.2.12")},
		NodeMACs: map[string][]nftrules.EtherAddr{"node-b": {{2, 0, 0, 0, 0, 0x0b}}}}
	if seed%3 != 0 { // else this node has no address: no slot
		cfg.NodeIPs[nftrulestest.ThisNode] = a("192.0.2.10")
		cfg.NodeMACs[nftrulestest.ThisNode] = []nftrules.EtherAddr{{2, 0, 0, 0, 0, 0x0a}}
	}
	for _, s := range m.Services {
		if seed%2 == 0 {
			s.ExternalMode = nftrules.ExternalDSR
		}
	}
	return nftrules.PlanDSR(m, cfg)
}
