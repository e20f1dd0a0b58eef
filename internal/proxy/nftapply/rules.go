package nftapply

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// This file turns the rule text nftrules writes into the expressions nft itself would send to
// the kernel for it, so that a rule added over netlink lists (`nft list`, `nft -j list`) exactly
// as the same rule added with `nft -f`. The text stays the single source of truth; the translator
// knows only the shapes nftrules writes into per-Service chains (see nftrules/service.go) and
// refuses anything else with an *UnsupportedError, which sends the sync through nft instead.
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

// ruleTranslator translates rule text for one family.
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

var verdicts = map[string]expr.VerdictKind{"drop": expr.VerdictDrop, "accept": expr.VerdictAccept, "return": expr.VerdictReturn}

var protocols = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

// rtnLocal is RTN_LOCAL, what `fib ... type local` compares with.
const rtnLocal = 2

// translate returns the expressions of one rule and its userdata (nil without a comment). Errors
// are *UnsupportedError with Reason FallbackRule.
func (t ruleTranslator) translate(text string, comment *string) ([]expr.Any, []byte, error) {
	p := ruleParser{t: t, toks: strings.Fields(text)}
	exprs, err := p.parse()
	if err != nil {
		return nil, nil, &UnsupportedError{Reason: FallbackRule, Op: "rule " + text, Detail: err.Error()}
	}
	var ud []byte
	if comment != nil {
		if len(*comment) >= 128 { // nft refuses longer comments (NFTNL_UDATA_COMMENT_MAXLEN)
			return nil, nil, &UnsupportedError{Reason: FallbackRule, Op: "rule " + text, Detail: "comment too long"}
		}
		ud = userdata.AppendString(nil, userdata.TypeComment, *comment)
	}
	return exprs, ud, nil
}

type ruleParser struct {
	t    ruleTranslator
	toks []string
	out  []expr.Any
	// l4 is the transport protocol a preceding match fixed (for dnat's port), 0 if none.
	l4 byte
	// done is set after a terminal statement (verdict, vmap, update, dnat).
	done bool
}

func (p *ruleParser) next() (string, bool) {
	if len(p.toks) == 0 {
		return "", false
	}
	tok := p.toks[0]
	p.toks = p.toks[1:]
	return tok, true
}

func (p *ruleParser) expect(want string) error {
	tok, ok := p.next()
	if !ok || tok != want {
		return fmt.Errorf("expected %q, got %q", want, tok)
	}
	return nil
}

func (p *ruleParser) emit(e ...expr.Any) { p.out = append(p.out, e...) }

func (p *ruleParser) parse() ([]expr.Any, error) {
	if len(p.toks) == 0 {
		return nil, fmt.Errorf("empty rule")
	}
	for len(p.toks) > 0 {
		if p.done {
			return nil, fmt.Errorf("unexpected %q after the rule's statement", p.toks[0])
		}
		tok, _ := p.next()
		var err error
		switch tok {
		case p.t.ipX:
			err = p.addrMatch()
		case "tcp", "udp", "sctp":
			err = p.portMatch(tok)
		case "meta":
			err = p.metaMatch()
		case "fib":
			err = p.fibMatch()
		case "numgen":
			err = p.numgen()
		case "jhash":
			err = p.jhash()
		case "update":
			err = p.update()
		case "dnat":
			err = p.dnat()
		case "jump", "goto":
			err = p.chainVerdict(tok)
		case "drop", "accept", "return":
			p.emit(&expr.Verdict{Kind: verdicts[tok]})
			p.done = true
		default:
			err = fmt.Errorf("unknown %q", tok)
		}
		if err != nil {
			return nil, err
		}
	}
	return p.out, nil
}

// addrLoad returns the payload load of the family's saddr or daddr into reg.
func (t ruleTranslator) addrLoad(field string, reg uint32) (*expr.Payload, error) {
	var off, n uint32
	switch {
	case !t.v6 && field == "saddr":
		off, n = 12, 4
	case !t.v6 && field == "daddr":
		off, n = 16, 4
	case t.v6 && field == "saddr":
		off, n = 8, 16
	case t.v6 && field == "daddr":
		off, n = 24, 16
	default:
		return nil, fmt.Errorf("unknown field %q", field)
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}, nil
}

// addr parses an address of the family (no prefix, no zone).
func (t ruleTranslator) addr(s string) ([]byte, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4() == t.v6 || a.Is4In6() {
		return nil, fmt.Errorf("not an %s address: %q", t.ipX, s)
	}
	return a.AsSlice(), nil
}

// ip saddr|daddr ( ADDR | @set | != @set )
func (p *ruleParser) addrMatch() error {
	field, _ := p.next()
	load, err := p.t.addrLoad(field, reg1)
	if err != nil {
		return err
	}
	val, ok := p.next()
	if !ok {
		return fmt.Errorf("%s %s without a value", p.t.ipX, field)
	}
	invert := false
	if val == "!=" {
		invert = true
		if val, ok = p.next(); !ok || !strings.HasPrefix(val, "@") {
			return fmt.Errorf("only a named set may follow !=, got %q", val)
		}
	}
	if set, ok := strings.CutPrefix(val, "@"); ok {
		if set == "" {
			return fmt.Errorf("empty set name")
		}
		p.emit(load, &expr.Lookup{SourceRegister: reg1, SetName: set, Invert: invert})
		return nil
	}
	b, err := p.t.addr(val)
	if err != nil {
		return err
	}
	p.emit(load, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: b})
	return nil
}

// tcp|udp|sctp dport PORT
func (p *ruleParser) portMatch(proto string) error {
	if err := p.expect("dport"); err != nil {
		return err
	}
	s, _ := p.next()
	port, err := parsePort(s)
	if err != nil {
		return err
	}
	p.l4Match(protocols[proto])
	p.emit(
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: port},
	)
	return nil
}

func (p *ruleParser) l4Match(proto byte) {
	p.emit(
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{proto}},
	)
	p.l4 = proto
}

// meta l4proto PROTO
func (p *ruleParser) metaMatch() error {
	if err := p.expect("l4proto"); err != nil {
		return err
	}
	s, _ := p.next()
	proto, ok := protocols[s]
	if !ok {
		return fmt.Errorf("unknown protocol %q", s)
	}
	p.l4Match(proto)
	return nil
}

// fib saddr|daddr type local
func (p *ruleParser) fibMatch() error {
	field, _ := p.next()
	f := &expr.Fib{Register: reg1, ResultADDRTYPE: true}
	switch field {
	case "saddr":
		f.FlagSADDR = true
	case "daddr":
		f.FlagDADDR = true
	default:
		return fmt.Errorf("unknown fib field %q", field)
	}
	if err := p.expect("type"); err != nil {
		return err
	}
	if err := p.expect("local"); err != nil {
		return err
	}
	p.emit(f, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: hostU32(rtnLocal)})
	return nil
}

// numgen random|inc mod N ( VALUE | vmap @map )
func (p *ruleParser) numgen() error {
	mode, _ := p.next()
	ng := &expr.Numgen{Register: reg1}
	switch mode {
	case "random":
		ng.Type = unix.NFT_NG_RANDOM
	case "inc":
		ng.Type = unix.NFT_NG_INCREMENTAL
	default:
		return fmt.Errorf("unknown numgen mode %q", mode)
	}
	mod, err := p.modulus()
	if err != nil {
		return err
	}
	ng.Modulus = mod
	p.emit(ng)
	return p.valueOrVmap(mod)
}

func (p *ruleParser) modulus() (uint32, error) {
	if err := p.expect("mod"); err != nil {
		return 0, err
	}
	s, _ := p.next()
	mod, err := strconv.ParseUint(s, 10, 32)
	if err != nil || mod == 0 {
		return 0, fmt.Errorf("bad modulus %q", s)
	}
	return uint32(mod), nil
}

// valueOrVmap follows an expression in reg 1 whose values are below mod: a value to compare
// with, or a verdict-map lookup.
func (p *ruleParser) valueOrVmap(mod uint32) error {
	tok, ok := p.next()
	if !ok {
		return fmt.Errorf("expression without a value or vmap")
	}
	if tok == "vmap" {
		m, _ := p.next()
		name, ok := strings.CutPrefix(m, "@")
		if !ok || name == "" {
			return fmt.Errorf("only a named map may follow vmap, got %q", m)
		}
		p.emit(&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: name})
		p.done = true
		return nil
	}
	v, err := strconv.ParseUint(tok, 10, 32)
	if err != nil || v >= uint64(mod) {
		return fmt.Errorf("bad value %q", tok)
	}
	p.emit(&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: hostU32(uint32(v))})
	return nil
}

// jhash ip saddr mod M seed S vmap @map (or a value)
func (p *ruleParser) jhash() error {
	if err := p.expect(p.t.ipX); err != nil {
		return err
	}
	field, _ := p.next()
	load, err := p.t.addrLoad(field, reg2)
	if err != nil {
		return err
	}
	mod, err := p.modulus()
	if err != nil {
		return err
	}
	if err := p.expect("seed"); err != nil {
		return err
	}
	s, _ := p.next()
	seed, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return fmt.Errorf("bad seed %q", s)
	}
	if seed == 0 {
		// google/nftables leaves a zero seed out, and the kernel then picks a random one.
		return fmt.Errorf("seed 0 cannot be written")
	}
	p.emit(load, &expr.Hash{SourceRegister: reg2, DestRegister: reg1, Length: load.Len, Modulus: mod, Seed: uint32(seed), Type: expr.HashTypeJenkins})
	return p.valueOrVmap(mod)
}

// update @set { ip saddr }
func (p *ruleParser) update() error {
	s, _ := p.next()
	set, ok := strings.CutPrefix(s, "@")
	if !ok || set == "" {
		return fmt.Errorf("update needs a named set, got %q", s)
	}
	if err := p.expect("{"); err != nil {
		return err
	}
	if err := p.expect(p.t.ipX); err != nil {
		return err
	}
	field, _ := p.next()
	load, err := p.t.addrLoad(field, reg1)
	if err != nil {
		return err
	}
	if err := p.expect("}"); err != nil {
		return err
	}
	p.emit(load, &expr.Dynset{SrcRegKey: reg1, SetName: set, Operation: unix.NFT_DYNSET_OP_UPDATE})
	p.done = true
	return nil
}

// dnat to ADDR:PORT, after a match that fixed the transport protocol; or
// dnat ip to numgen random mod N offset K map @m.
func (p *ruleParser) dnat() error {
	if len(p.toks) > 0 && p.toks[0] == p.t.ipX {
		p.next()
		return p.dnatMap()
	}
	if err := p.expect("to"); err != nil {
		return err
	}
	s, _ := p.next()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return fmt.Errorf("dnat target %q: only address:port is supported", s)
	}
	if p.l4 == 0 {
		return fmt.Errorf("dnat to a port without a transport protocol match")
	}
	a, err := p.t.addr(ap.Addr().String())
	if err != nil {
		return err
	}
	family := uint32(unix.NFPROTO_IPV4)
	if p.t.v6 {
		family = unix.NFPROTO_IPV6
	}
	p.emit(
		&expr.Immediate{Register: reg1, Data: a},
		&expr.Immediate{Register: reg2, Data: binary.BigEndian.AppendUint16(nil, ap.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: reg1, RegProtoMin: reg2, Specified: true},
	)
	p.done = true
	return nil
}

// dnatMap parses "to numgen random mod N offset K map @m" after "dnat ip": the map's values are
// an address and a port.
func (p *ruleParser) dnatMap() error {
	if err := p.expect("to"); err != nil {
		return err
	}
	if err := p.expect("numgen"); err != nil {
		return err
	}
	if err := p.expect("random"); err != nil {
		return err
	}
	mod, err := p.modulus()
	if err != nil {
		return err
	}
	if err := p.expect("offset"); err != nil {
		return err
	}
	s, _ := p.next()
	off, err := strconv.ParseUint(s, 10, 32)
	if err != nil || off+uint64(mod) > 1<<32 {
		return fmt.Errorf("bad offset %q", s)
	}
	if err := p.expect("map"); err != nil {
		return err
	}
	m, _ := p.next()
	name, ok := strings.CutPrefix(m, "@")
	if !ok || name == "" {
		return fmt.Errorf("only a named map may follow map, got %q", m)
	}
	if p.l4 == 0 {
		return fmt.Errorf("dnat to a port without a transport protocol match")
	}
	family, regProto := uint32(unix.NFPROTO_IPV4), uint32(9) // NFT_REG32_01: after the 4-byte address
	if p.t.v6 {
		family, regProto = unix.NFPROTO_IPV6, reg2 // after the 16-byte address
	}
	p.emit(
		&expr.Numgen{Register: reg1, Type: unix.NFT_NG_RANDOM, Modulus: mod, Offset: uint32(off)},
		&expr.Byteorder{SourceRegister: reg1, DestRegister: reg1, Op: expr.ByteorderHton, Len: 4, Size: 4},
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: name},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: reg1, RegAddrMax: reg1,
			RegProtoMin: regProto, RegProtoMax: regProto, Specified: true},
	)
	p.done = true
	return nil
}

// jump|goto CHAIN
func (p *ruleParser) chainVerdict(verb string) error {
	chain, ok := p.next()
	if !ok || chain == "" {
		return fmt.Errorf("%s without a chain", verb)
	}
	kind := expr.VerdictJump
	if verb == "goto" {
		kind = expr.VerdictGoto
	}
	p.emit(&expr.Verdict{Kind: kind, Chain: chain})
	p.done = true
	return nil
}

func parsePort(s string) ([]byte, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port %q", s)
	}
	return binary.BigEndian.AppendUint16(nil, uint16(n)), nil
}

// hostU32 is a 32-bit value as the kernel keeps it in a register (host byte order).
func hostU32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
