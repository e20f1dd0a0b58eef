package nftapply

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// This file encodes the statements of nftrules' rules into the expressions nft itself would send
// to the kernel for their text, so that a rule added over netlink lists (`nft list`, `nft -j
// list`) exactly as the same rule added with `nft -f`. No text is read: the Builder hands its
// rules over as statements (nftrules.RuleWriter). The encoder knows the shapes nftrules writes
// (nftrules/service.go and build.go) and refuses anything else with an *UnsupportedError, which
// sends the sync through nft instead (or fails it without nft).
//
// The encodings follow `nft --debug=netlink` of nft 1.0.x:
//
//	ip daddr 10.96.0.10        payload load 4b @ network header + 16 => reg 1; cmp eq reg 1 <addr>
//	tcp dport 80               meta load l4proto => reg 1; cmp eq reg 1 6;
//	                           payload load 2b @ transport header + 2 => reg 1; cmp eq reg 1 <port>
//	ip saddr != @set           payload ...; lookup reg 1 set set 0x1
//	fib saddr type local       fib saddr type => reg 1; cmp eq reg 1 2
//	numgen random mod 3 0      numgen reg 1 = random mod 3; cmp eq reg 1 0
//	numgen inc mod 9 vmap @m   numgen reg 1 = inc mod 9; lookup reg 1 set m dreg 0
//	jhash ip saddr mod 13 seed 0x1 vmap @m
//	                           payload ... => reg 2; hash reg 1 = jhash(reg 2, 4, 0x1) % mod 13;
//	                           lookup reg 1 set m dreg 0
//	update @set { ip saddr }   payload ... => reg 1; dynset update reg_key 1 set set
//	meta l4proto tcp dnat to 10.0.0.1:8080
//	                           meta ...; cmp ...; immediate reg 1 <addr>; immediate reg 2 <port>;
//	                           nat dnat ip addr_min reg 1 proto_min reg 2 flags 0x2
//	meta l4proto tcp dnat ip to numgen random mod 65536 offset K map @m
//	                           meta ...; cmp ...; numgen reg 1 = random mod 65536 offset K;
//	                           byteorder reg 1 = hton(reg 1, 4, 4); lookup reg 1 set m dreg 1;
//	                           nat dnat ip addr_min reg 1 addr_max reg 1 proto_min reg 9
//	                           proto_max reg 9 flags 0x3 (ip6: proto reg 2, after the address)
//	jump c / goto c / drop     immediate reg 0 <verdict>
//	comment "x"                rule userdata: TLV type 0, "x\x00"
//	ip daddr != 127.0.0.0/8    payload load 1b @ network header + 16 => reg 1; cmp neq reg 1 0x7f
//	                           (a prefix of whole bytes compares them; another is masked first:
//	                           payload 4b; bitwise reg 1 = (reg 1 & mask) ^ 0; cmp)
//	ip saddr != { a , b/n }    payload ...; lookup reg 1 set __setN 0x1, the anonymous set
//	                           constant (an interval set, ranges merged, if it holds a prefix);
//	                           { a } alone is compared with directly
//	ct state new               ct load state => reg 1; bitwise reg 1 = (reg 1 & 0x8) ^ 0;
//	                           cmp neq reg 1 0 (ct status dnat: status, 0x20)
//	mark and 0x4000 == 0       meta load mark => reg 1; bitwise ...; cmp eq reg 1 0
//	mark set mark or 0x4000    meta load mark => reg 1; bitwise reg 1 = (reg 1 & ~0x4000) ^ 0x4000;
//	                           meta set mark with reg 1 (xor: & 0xffffffff ^ 0x4000)
//	ip daddr . meta l4proto . th dport vmap @m
//	                           payload => reg 1; meta load l4proto => reg 9;
//	                           payload => reg 10; lookup reg 1 set m dreg 0 (a concatenation
//	                           fills 4-byte registers: NFT_REG_1..4 on 16-byte boundaries,
//	                           NFT_REG32_xx between; ip6: reg 1, reg 2, reg 13)
//	reject                     reject type 0 code 3 (ip6: code 4, port unreachable)
//	masquerade fully-random    masq flags 0x10

// ruleTranslator encodes rules for one family.
type ruleTranslator struct {
	v6  bool
	ipX string // "ip" or "ip6"
}

func newRuleTranslator(family knftables.Family) ruleTranslator {
	return ruleTranslator{v6: family == knftables.IPv6Family, ipX: string(family)}
}

// Registers as nft allocates them (NFT_REG_1 and NFT_REG_2 of the 16-byte register file).
const (
	reg1 = 1
	reg2 = 2
)

var verdicts = map[nftrules.VerdictKind]expr.VerdictKind{
	nftrules.Jump: expr.VerdictJump, nftrules.Goto: expr.VerdictGoto,
	nftrules.Drop: expr.VerdictDrop, nftrules.Accept: expr.VerdictAccept, nftrules.Return: expr.VerdictReturn,
}

var protocols = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

// rtnLocal is RTN_LOCAL, what `fib ... type local` compares with.
const rtnLocal = 2

// encode returns the expressions of one rule, its userdata (nil without a comment) and the
// anonymous sets its statements compare with (their lookups' set name and ID are left for the
// caller to fill in). Errors are *UnsupportedError with Reason FallbackRule.
func (t ruleTranslator) encode(r *nftrules.Rule) ([]expr.Any, []byte, []*anonSet, error) {
	e := ruleEncoder{t: t, out: make([]expr.Any, 0, 2*len(r.Stmts)+2)}
	exprs, err := e.encode(r.Stmts)
	if err != nil {
		return nil, nil, nil, &UnsupportedError{Reason: FallbackRule, Op: "rule " + r.String(), Detail: err.Error()}
	}
	var ud []byte
	if r.Comment != "" {
		if len(r.Comment) >= 128 { // nft refuses longer comments (NFTNL_UDATA_COMMENT_MAXLEN)
			return nil, nil, nil, &UnsupportedError{Reason: FallbackRule, Op: "rule " + r.String(), Detail: "comment too long"}
		}
		ud = userdata.AppendString(nil, userdata.TypeComment, r.Comment)
	}
	return exprs, ud, e.anon, nil
}

// anonSet is an anonymous set of addresses a rule compares with (`ip saddr != { ... }`): constant,
// an interval set if it holds a prefix.
type anonSet struct {
	lookup   *expr.Lookup
	interval bool
	elems    []nftables.SetElement
	udata    []byte
	open     []byte // the key of the start of a range without end (up to the last address), if any
}

type ruleEncoder struct {
	t   ruleTranslator
	out []expr.Any
	// l4 is the transport protocol a preceding match fixed (for dnat's port), 0 if none.
	l4   byte
	anon []*anonSet
}

func (e *ruleEncoder) emit(x ...expr.Any) { e.out = append(e.out, x...) }

func (e *ruleEncoder) encode(stmts []nftrules.Stmt) ([]expr.Any, error) {
	if len(stmts) == 0 {
		return nil, fmt.Errorf("empty rule")
	}
	for i := range stmts {
		s := &stmts[i]
		var err error
		terminal := true // a verdict, vmap, update, dnat, reject or masquerade ends the rule
		switch s.Kind {
		case nftrules.StmtMarkSet:
			terminal = false
			err = e.markSet(s)
		case nftrules.StmtReject:
			e.reject()
		case nftrules.StmtMasquerade:
			e.emit(&expr.Masq{FullyRandom: s.Masq&nftrules.MasqFullyRandom != 0, Random: s.Masq&nftrules.MasqRandom != 0,
				Persistent: s.Masq&nftrules.MasqPersistent != 0})
		case nftrules.StmtMatch:
			terminal = false
			err = e.match(s)
		case nftrules.StmtLookup:
			terminal = false
			err = e.lookup(s)
		case nftrules.StmtVmap:
			err = e.vmap(s)
		case nftrules.StmtVerdict:
			err = e.verdict(s.AsVerdict())
		case nftrules.StmtUpdate:
			err = e.update(s)
		case nftrules.StmtDNAT:
			err = e.dnat(s)
		case nftrules.StmtDNATMap:
			err = e.dnatMap(s)
		case nftrules.StmtSetMark:
			terminal = false
			err = e.setMark(s)
		case nftrules.StmtNotrack:
			terminal = false
			e.emit(&expr.Notrack{})
		case nftrules.StmtClampMSS:
			terminal = false
			err = e.clampMSS()
		default:
			err = fmt.Errorf("statement %q", s)
		}
		if err != nil {
			return nil, err
		}
		if terminal && i < len(stmts)-1 {
			return nil, fmt.Errorf("%q after the rule's statement", stmts[i+1].String())
		}
	}
	return e.out, nil
}

// addrLoad returns the payload load of the family's saddr or daddr into reg.
func (t ruleTranslator) addrLoad(x nftrules.Expr, reg uint32) (*expr.Payload, error) {
	if x.IP6 != t.v6 {
		return nil, fmt.Errorf("%s in an %s table", x, t.ipX)
	}
	var off, n uint32
	switch {
	case !t.v6 && x.Field == nftrules.FieldSaddr:
		off, n = 12, 4
	case !t.v6 && x.Field == nftrules.FieldDaddr:
		off, n = 16, 4
	case t.v6 && x.Field == nftrules.FieldSaddr:
		off, n = 8, 16
	case t.v6 && x.Field == nftrules.FieldDaddr:
		off, n = 24, 16
	default:
		return nil, fmt.Errorf("unsupported expression %s", x)
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}, nil
}

// addr returns an address of the family (no zone) as bytes.
func (t ruleTranslator) addr(a netip.Addr) ([]byte, error) {
	if !a.IsValid() || a.Zone() != "" || a.Is4() == t.v6 || a.Is4In6() {
		return nil, fmt.Errorf("not an %s address: %s", t.ipX, a)
	}
	return a.AsSlice(), nil
}

// single returns a statement's key if it is one expression.
func single(s *nftrules.Stmt) (nftrules.Expr, error) {
	if len(s.Key) != 1 {
		return nftrules.Expr{}, fmt.Errorf("concatenation in %q", s)
	}
	return s.Key[0], nil
}

// ip saddr|daddr [!=] ADDR|PREFIX|{ SET }, tcp|udp|sctp dport PORT, meta l4proto PROTO,
// fib saddr|daddr type local, numgen|jhash ... VALUE, ct state new, ct status dnat,
// ct status & (BITS) ==|!= BITS, [meta] mark and MASK ==|!= N, meta mark ==|!= N, ct mark ==|!= N
func (e *ruleEncoder) match(s *nftrules.Stmt) error {
	x, err := single(s)
	if err != nil {
		return err
	}
	v := s.Value
	op := expr.CmpOpEq
	if s.Op == nftrules.OpNeq {
		op = expr.CmpOpNeq
	}
	switch x.Field {
	case nftrules.FieldSaddr, nftrules.FieldDaddr:
		if s.Set != nil {
			return e.anonLookup(s, x)
		}
		return e.addrMatch(x, op, v)
	case nftrules.FieldCtMark:
		if v.Kind != nftrules.ValueNum || s.Set != nil {
			return fmt.Errorf("unsupported match %q", s)
		}
		e.emit(&expr.Ct{Register: reg1, Key: expr.CtKeyMARK}, &expr.Cmp{Op: op, Register: reg1, Data: hostU32(v.Num)})
		return nil
	case nftrules.FieldIifname, nftrules.FieldOifname:
		if v.Kind != nftrules.ValueString || s.Set != nil || len(v.Sym) == 0 || len(v.Sym) >= unix.IFNAMSIZ ||
			strings.ContainsAny(v.Sym, "*\\\x00") {
			return fmt.Errorf("unsupported match %q", s)
		}
		key := expr.MetaKeyIIFNAME
		if x.Field == nftrules.FieldOifname {
			key = expr.MetaKeyOIFNAME
		}
		name := make([]byte, unix.IFNAMSIZ) // nft compares the whole name, padded with zeros
		copy(name, v.Sym)
		e.emit(&expr.Meta{Key: key, Register: reg1}, &expr.Cmp{Op: op, Register: reg1, Data: name})
		return nil
	case nftrules.FieldTCPFlags:
		return e.tcpFlags(s, x)
	case nftrules.FieldMark:
		if v.Kind != nftrules.ValueNum || s.Set != nil || x.Mask == 0 && !x.Meta {
			return fmt.Errorf("unsupported match %q", s)
		}
		e.emit(&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1})
		if x.Mask != 0 {
			e.emit(&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: hostU32(x.Mask), Xor: hostU32(0)})
		}
		e.emit(&expr.Cmp{Op: op, Register: reg1, Data: hostU32(v.Num)})
		return nil
	case nftrules.FieldCtStatus:
		if x.Mask == 0 {
			break // ct status dnat, below
		}
		if v.Kind != nftrules.ValueNum || s.Set != nil || v.Num&^x.Mask != 0 {
			return fmt.Errorf("unsupported match %q", s)
		}
		e.emit(&expr.Ct{Register: reg1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: hostU32(x.Mask), Xor: hostU32(0)},
			&expr.Cmp{Op: op, Register: reg1, Data: hostU32(v.Num)})
		return nil
	}
	if s.Op != nftrules.OpNone || s.Set != nil {
		return fmt.Errorf("only a plain comparison with one value: %q", s)
	}
	switch x.Field {
	case nftrules.FieldDport:
		proto, ok := protocols[string(x.Proto)]
		if !ok || v.Kind != nftrules.ValueNum || v.Num > 0xffff {
			return fmt.Errorf("unsupported match %q", s)
		}
		e.l4Match(proto)
		e.emit(
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.BigEndian.AppendUint16(nil, uint16(v.Num))},
		)
	case nftrules.FieldL4Proto:
		proto, ok := protocols[v.Sym]
		if v.Kind != nftrules.ValueSym || !ok {
			return fmt.Errorf("unknown protocol %s", v)
		}
		e.l4Match(proto)
	case nftrules.FieldFibSaddrType, nftrules.FieldFibDaddrType:
		if v != nftrules.SymValue("local") {
			return fmt.Errorf("unsupported match %q", s)
		}
		f := &expr.Fib{Register: reg1, ResultADDRTYPE: true}
		f.FlagSADDR = x.Field == nftrules.FieldFibSaddrType
		f.FlagDADDR = x.Field == nftrules.FieldFibDaddrType
		e.emit(f, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: hostU32(rtnLocal)})
	case nftrules.FieldNumgen, nftrules.FieldJhash:
		if err := e.number(x); err != nil {
			return err
		}
		if v.Kind != nftrules.ValueNum || v.Num >= x.Mod {
			return fmt.Errorf("bad value %s for %s", v, x)
		}
		e.emit(&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: hostU32(v.Num)})
	case nftrules.FieldCtState, nftrules.FieldCtStatus:
		// A flag: ct load; bitwise & FLAG; cmp neq 0.
		key, flag := expr.CtKeySTATE, uint32(ctStateNew)
		if x.Field == nftrules.FieldCtStatus {
			key, flag = expr.CtKeySTATUS, ctStatusDNAT
		}
		if v.Kind != nftrules.ValueSym || (x.Field == nftrules.FieldCtState) != (v.Sym == "new") ||
			(x.Field == nftrules.FieldCtStatus) != (v.Sym == "dnat") {
			return fmt.Errorf("unsupported match %q", s)
		}
		e.emit(&expr.Ct{Register: reg1, Key: key},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: hostU32(flag), Xor: hostU32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: hostU32(0)})
	default:
		return fmt.Errorf("unsupported match %q", s)
	}
	return nil
}

// The bits of `ct state new` (NF_CT_STATE_BIT(IP_CT_NEW)) and `ct status dnat`.
const (
	ctStateNew   = 1 << 3
	ctStatusDNAT = 1 << 5 // IPS_DST_NAT
)

// addrMatch: ip saddr|daddr ==|!= ADDR or PREFIX. A prefix of whole bytes compares those bytes
// only; another is masked first (nft's encodings).
func (e *ruleEncoder) addrMatch(x nftrules.Expr, op expr.CmpOp, v nftrules.Value) error {
	load, err := e.t.addrLoad(x, reg1)
	if err != nil {
		return err
	}
	b, err := e.t.addr(v.Addr)
	if err != nil {
		return err
	}
	switch v.Kind {
	case nftrules.ValueAddr:
		e.emit(load, &expr.Cmp{Op: op, Register: reg1, Data: b})
	case nftrules.ValuePrefix:
		p := v.Prefix()
		if p.Masked() != p {
			return fmt.Errorf("prefix %s", p)
		}
		if p.Bits() > 0 && p.Bits()%8 == 0 {
			load.Len = uint32(p.Bits() / 8)
			e.emit(load, &expr.Cmp{Op: op, Register: reg1, Data: b[:load.Len]})
			return nil
		}
		mask := make([]byte, len(b))
		for i := range p.Bits() {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		e.emit(load, &expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: load.Len, Mask: mask, Xor: make([]byte, len(b))},
			&expr.Cmp{Op: op, Register: reg1, Data: b})
	default:
		return fmt.Errorf("%s %s: not an address or prefix", x, v)
	}
	return nil
}

// anonLookup: ip saddr|daddr [!=] { ADDR|PREFIX , ... }, a lookup in an anonymous set, constant,
// an interval set (its ranges merged) if it holds a prefix.
func (e *ruleEncoder) anonLookup(s *nftrules.Stmt, x nftrules.Expr) error {
	load, err := e.t.addrLoad(x, reg1)
	if err != nil {
		return err
	}
	if len(s.Set) == 0 || s.Op == nftrules.OpEq {
		return fmt.Errorf("unsupported %q", s)
	}
	if len(s.Set) == 1 {
		// nft compares with a set of one element as with the element.
		op := expr.CmpOpEq
		if s.Op == nftrules.OpNeq {
			op = expr.CmpOpNeq
		}
		return e.addrMatch(x, op, s.Set[0])
	}
	a := &anonSet{lookup: &expr.Lookup{SourceRegister: reg1, Invert: s.Op == nftrules.OpNeq}}
	ivs := make([]interval, 0, len(s.Set))
	for _, v := range s.Set {
		if _, err := e.t.addr(v.Addr); err != nil {
			return err
		}
		switch v.Kind {
		case nftrules.ValueAddr:
			ivs = append(ivs, interval{v.Addr, v.Addr})
		case nftrules.ValuePrefix:
			if p := v.Prefix(); p.Masked() != p {
				return fmt.Errorf("prefix %s", p)
			}
			a.interval = true
			ivs = append(ivs, prefixInterval(v.Prefix()))
		default:
			return fmt.Errorf("%s in a set of addresses", v)
		}
	}
	if a.interval {
		a.elems, a.open = intervalElements(ivs)
	} else {
		seen := map[netip.Addr]bool{}
		for _, iv := range ivs {
			if !seen[iv.first] {
				seen[iv.first] = true
				a.elems = append(a.elems, nftables.SetElement{Key: iv.first.AsSlice()})
			}
		}
	}
	a.udata = userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, byteorderBig)
	if a.interval {
		a.udata = userdata.AppendUint32(a.udata, userdata.NFTNL_UDATA_SET_MERGE_ELEMENTS, 1)
	}
	a.udata = userdata.Append(a.udata, userdata.NFTNL_UDATA_SET_KEY_TYPEOF, e.t.addrTypeof(x.Field))
	e.anon = append(e.anon, a)
	e.emit(load, a.lookup)
	return nil
}

// regAt is the register nft loads the part of a concatenation at off (in 4-byte words) into:
// NFT_REG_1..4 at the 16-byte boundaries, NFT_REG32_xx between them.
func regAt(off uint32) uint32 {
	if off%4 == 0 {
		return 1 + off/4
	}
	return 8 + off
}

// loadKey loads a key (one expression or a concatenation) from reg 1 on: addresses, meta
// l4proto, th dport.
func (e *ruleEncoder) loadKey(key []nftrules.Expr) error {
	off := uint32(0)
	for _, x := range key {
		reg := regAt(off)
		switch {
		case x.Field == nftrules.FieldSaddr || x.Field == nftrules.FieldDaddr:
			load, err := e.t.addrLoad(x, reg)
			if err != nil {
				return err
			}
			e.emit(load)
			off += load.Len / 4
		case x == nftrules.Expr{Field: nftrules.FieldL4Proto}:
			e.emit(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg})
			off++
		case x == nftrules.Expr{Field: nftrules.FieldDport}:
			e.emit(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			off++
		case x == nftrules.Expr{Field: nftrules.FieldEtherSaddr} && len(key) == 1:
			// nft's dependency: the input interface is Ethernet.
			e.emit(&expr.Meta{Key: expr.MetaKeyIIFTYPE, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.NativeEndian.AppendUint16(nil, unix.ARPHRD_ETHER)},
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6})
			off += 2
		default:
			return fmt.Errorf("unsupported key %s", x)
		}
	}
	return nil
}

// mark set mark or|xor BITS
func (e *ruleEncoder) markSet(s *nftrules.Stmt) error {
	mask, xor := ^s.Num, s.Num
	if s.Xor {
		mask = 0xffffffff
	}
	e.emit(&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: hostU32(mask), Xor: hostU32(xor)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
	return nil
}

// reject: an ICMP port unreachable of the family.
func (e *ruleEncoder) reject() {
	code := uint8(3) // ICMP_PORT_UNREACH
	if e.t.v6 {
		code = 4 // ICMPV6_PORT_UNREACH
	}
	e.emit(&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code})
}

func (e *ruleEncoder) l4Match(proto byte) {
	e.emit(
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{proto}},
	)
	e.l4 = proto
}

// ip saddr|daddr [!=] @set, ip saddr . ip daddr @set
func (e *ruleEncoder) lookup(s *nftrules.Stmt) error {
	if s.Op == nftrules.OpEq || len(s.Key) == 0 {
		return fmt.Errorf("unsupported lookup %q", s)
	}
	if err := e.loadKey(s.Key); err != nil {
		return err
	}
	e.emit(&expr.Lookup{SourceRegister: reg1, SetName: s.Name, Invert: s.Op == nftrules.OpNeq})
	return nil
}

// number emits a numgen (without offset) or jhash expression into reg 1.
func (e *ruleEncoder) number(x nftrules.Expr) error {
	switch x.Field {
	case nftrules.FieldNumgen:
		if x.Offset != 0 {
			return fmt.Errorf("%s: an offset only in dnat maps", x)
		}
		ng := &expr.Numgen{Register: reg1, Modulus: x.Mod, Type: unix.NFT_NG_RANDOM}
		if x.Inc {
			ng.Type = unix.NFT_NG_INCREMENTAL
		}
		e.emit(ng)
	case nftrules.FieldJhash:
		if x.Seed == 0 {
			// google/nftables leaves a zero seed out, and the kernel then picks a random one.
			return fmt.Errorf("seed 0 cannot be written")
		}
		if x.Flow {
			return e.flowHash(x)
		}
		load, err := e.t.addrLoad(nftrules.Expr{Field: nftrules.FieldSaddr, IP6: x.IP6}, reg2)
		if err != nil {
			return err
		}
		e.emit(load, &expr.Hash{SourceRegister: reg2, DestRegister: reg1, Length: load.Len, Modulus: x.Mod, Seed: x.Seed, Type: expr.HashTypeJenkins})
	default:
		return fmt.Errorf("unsupported expression %s", x)
	}
	return nil
}

// numgen ... vmap @map, jhash ... vmap @map, ip daddr . meta l4proto . th dport vmap @map,
// meta l4proto . th dport vmap @map
func (e *ruleEncoder) vmap(s *nftrules.Stmt) error {
	if s.Name == "" || len(s.Key) == 0 {
		return fmt.Errorf("only a named map may follow vmap")
	}
	if x := s.Key[0]; len(s.Key) == 1 && (x.Field == nftrules.FieldNumgen || x.Field == nftrules.FieldJhash) {
		if err := e.number(x); err != nil {
			return err
		}
	} else if err := e.loadKey(s.Key); err != nil {
		return err
	}
	e.emit(&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: s.Name})
	return nil
}

// update @set { ip saddr }
func (e *ruleEncoder) update(s *nftrules.Stmt) error {
	x, err := single(s)
	if err != nil {
		return err
	}
	load, err := e.t.addrLoad(x, reg1)
	if err != nil {
		return err
	}
	e.emit(load, &expr.Dynset{SrcRegKey: reg1, SetName: s.Name, Operation: unix.NFT_DYNSET_OP_UPDATE})
	return nil
}

func (t ruleTranslator) natFamily() uint32 {
	if t.v6 {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// dnat to ADDR:PORT, after a match that fixed the transport protocol.
func (e *ruleEncoder) dnat(s *nftrules.Stmt) error {
	if e.l4 == 0 {
		return fmt.Errorf("dnat to a port without a transport protocol match")
	}
	if s.Value.Kind != nftrules.ValueAddrPort {
		return fmt.Errorf("dnat to %s: only an address and a port", s.Value)
	}
	a, err := e.t.addr(s.Value.Addr)
	if err != nil {
		return err
	}
	e.emit(
		&expr.Immediate{Register: reg1, Data: a},
		&expr.Immediate{Register: reg2, Data: binary.BigEndian.AppendUint16(nil, uint16(s.Value.Num))},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: e.t.natFamily(), RegAddrMin: reg1, RegProtoMin: reg2, Specified: true},
	)
	return nil
}

// dnat ip to numgen random mod N offset K map @m: the map's values are an address and a port.
func (e *ruleEncoder) dnatMap(s *nftrules.Stmt) error {
	x, err := single(s)
	if err != nil {
		return err
	}
	jhash := x.Field == nftrules.FieldJhash && x.Flow && !e.t.v6
	if s.IP6 != e.t.v6 || (x.Field != nftrules.FieldNumgen || x.Inc) && !jhash {
		return fmt.Errorf("unsupported %q", s)
	}
	if e.l4 == 0 {
		return fmt.Errorf("dnat to a port without a transport protocol match")
	}
	regProto := uint32(9) // NFT_REG32_01: after the 4-byte address
	if e.t.v6 {
		regProto = reg2 // after the 16-byte address
	}
	if jhash {
		// A map keyed by the hash itself, in host byte order (the DSR table's endpoints).
		if err := e.flowHash(x); err != nil {
			return err
		}
	} else {
		// The shared interval map's keys are in network byte order (see dnatElement).
		e.emit(&expr.Numgen{Register: reg1, Type: unix.NFT_NG_RANDOM, Modulus: x.Mod, Offset: x.Offset},
			&expr.Byteorder{SourceRegister: reg1, DestRegister: reg1, Op: expr.ByteorderHton, Len: 4, Size: 4})
	}
	e.emit(
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: s.Name},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: e.t.natFamily(), RegAddrMin: reg1, RegAddrMax: reg1,
			RegProtoMin: regProto, RegProtoMax: regProto, Specified: true},
	)
	return nil
}

// jump|goto CHAIN, drop, accept, return
func (e *ruleEncoder) verdict(v nftrules.Verdict) error {
	k, ok := verdicts[v.Kind]
	if !ok || (v.Kind == nftrules.Jump || v.Kind == nftrules.Goto) && v.Chain == "" {
		return fmt.Errorf("unsupported verdict %q", v)
	}
	e.emit(verdictExpr(v, k))
	return nil
}

func verdictExpr(v nftrules.Verdict, k expr.VerdictKind) *expr.Verdict {
	x := &expr.Verdict{Kind: k}
	if v.Kind == nftrules.Jump || v.Kind == nftrules.Goto {
		x.Chain = v.Chain
	}
	return x
}

// hostU32 is a 32-bit value as the kernel keeps it in a register (host byte order).
func hostU32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// tcp flags SYN (the flags of the value set: bitwise & flags; cmp neq 0), or
// tcp flags & (MASK) == VALUE; after nft's dependency, meta l4proto tcp, unless a match fixed it.
func (e *ruleEncoder) tcpFlags(s *nftrules.Stmt, x nftrules.Expr) error {
	v := s.Value
	if v.Kind != nftrules.ValueNum || v.Num == 0 || v.Num > 0xff || x.Mask > 0xff || s.Set != nil ||
		(x.Mask == 0) != (s.Op == nftrules.OpNone) || s.Op == nftrules.OpNeq || x.Mask != 0 && v.Num&^x.Mask != 0 {
		return fmt.Errorf("unsupported match %q", s)
	}
	if e.l4 != unix.IPPROTO_TCP {
		e.l4Match(unix.IPPROTO_TCP)
	}
	mask, op, data := byte(v.Num), expr.CmpOpNeq, byte(0)
	if x.Mask != 0 {
		mask, op, data = byte(x.Mask), expr.CmpOpEq, byte(v.Num)
	}
	e.emit(&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{mask}, Xor: []byte{0}},
		&expr.Cmp{Op: op, Register: reg1, Data: []byte{data}})
	return nil
}

// flowHash emits jhash ip saddr . th sport . ip daddr . th dport . meta l4proto mod N seed S into
// reg 1: the concatenation loaded from reg 2 on, as nft lays it out (4-byte fields).
func (e *ruleEncoder) flowHash(x nftrules.Expr) error {
	if e.t.v6 || x.IP6 || x.Seed == 0 || x.Mod == 0 {
		return fmt.Errorf("unsupported expression %s", x)
	}
	e.emit(FlowHash(x.Mod, x.Seed)...)
	return nil
}

// FlowHash is the IPv4 flow hash of nftrules' FieldJhash with Flow, `jhash ip saddr . th sport .
// ip daddr . th dport . meta l4proto mod mod seed seed`, into reg 1, as nft lays the concatenation
// out (4-byte fields from reg 2 on). Another table that must pick the same bucket as the DSR table
// (dsrapply's flood table) uses these very expressions.
func FlowHash(mod, seed uint32) []expr.Any {
	th := func(reg, off uint32) *expr.Payload {
		return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2}
	}
	return []expr.Any{
		&expr.Payload{DestRegister: regAt(4), Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		th(regAt(5), 0),
		&expr.Payload{DestRegister: regAt(6), Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		th(regAt(7), 2),
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regAt(8)},
		&expr.Hash{SourceRegister: regAt(4), DestRegister: reg1, Length: 20, Modulus: mod, Seed: seed, Type: expr.HashTypeJenkins},
	}
}

// ct|meta mark set VALUE, or set ct mark, meta mark or a flow hash, through map @m if named.
func (e *ruleEncoder) setMark(s *nftrules.Stmt) error {
	switch {
	case len(s.Key) == 0:
		if s.Value.Kind != nftrules.ValueNum || s.Name != "" {
			return fmt.Errorf("unsupported %q", s)
		}
		e.emit(&expr.Immediate{Register: reg1, Data: hostU32(s.Value.Num)})
	case len(s.Key) > 1:
		return fmt.Errorf("unsupported %q", s)
	case s.Key[0] == nftrules.Expr{Field: nftrules.FieldCtMark}:
		e.emit(&expr.Ct{Register: reg1, Key: expr.CtKeyMARK})
	case s.Key[0] == nftrules.Expr{Field: nftrules.FieldMark, Meta: true}:
		e.emit(&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1})
	case s.Key[0].Field == nftrules.FieldJhash && s.Key[0].Flow && s.Name != "": // a hash is a bucket: mapped to a mark
		if err := e.flowHash(s.Key[0]); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unsupported %q", s)
	}
	if s.Name != "" {
		e.emit(&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: s.Name})
	}
	if s.Ct {
		e.emit(&expr.Ct{Register: reg1, Key: expr.CtKeyMARK, SourceRegister: true})
	} else {
		e.emit(&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
	}
	return nil
}

// tcp option maxseg size set rt mtu, after a match that fixed the protocol to tcp: the route's
// MSS, to network byte order, written into the option.
func (e *ruleEncoder) clampMSS() error {
	if e.l4 != unix.IPPROTO_TCP {
		return fmt.Errorf("tcp option without a tcp match")
	}
	e.emit(&expr.Rt{Register: reg1, Key: expr.RtTCPMSS},
		&expr.Byteorder{SourceRegister: reg1, DestRegister: reg1, Op: expr.ByteorderHton, Len: 2, Size: 2},
		&expr.Exthdr{SourceRegister: reg1, Type: 2 /* TCPOPT_MAXSEG */, Offset: 2, Len: 2, Op: expr.ExthdrOpTcpopt})
	return nil
}
