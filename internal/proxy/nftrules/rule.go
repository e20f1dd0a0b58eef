package nftrules

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// This file is the grammar of the rules (see "One grammar" in the package doc): the statements
// the Builder writes, as data, and their one rendering to nft syntax. It covers the shapes
// nftrules writes, and a few more that trace's tests and hand-written rulesets use (counter,
// accept, literal verdict maps, `==`, `th dport`, `meta mark`, masquerade flags).

// Field is what an Expr reads from the packet (or computes).
type Field uint8

// The fields.
const (
	FieldSaddr        Field = iota + 1 // ip saddr, ip6 saddr
	FieldDaddr                         // ip daddr, ip6 daddr
	FieldL4Proto                       // meta l4proto
	FieldDport                         // th dport, or tcp|udp|sctp dport (Expr.Proto)
	FieldFibSaddrType                  // fib saddr type
	FieldFibDaddrType                  // fib daddr type
	FieldCtState                       // ct state
	FieldCtStatus                      // ct status
	FieldMark                          // mark [and Mask], meta mark [and Mask]
	FieldNumgen                        // numgen random|inc mod Mod [offset Offset]
	FieldJhash                         // jhash ip saddr mod Mod seed Seed (Flow: jhash of the flow)
	// The fields of the DSR table (dsr.go), which ParseRule does not read.
	FieldEtherSaddr // ether saddr
	FieldIifname    // iifname (compared with a ValueString)
	FieldOifname    // oifname (compared with a ValueString)
	FieldTCPFlags   // tcp flags [& (Mask)]
	FieldCtMark     // ct mark
	// FieldCtStatus with a Mask (ct status & (confirmed | dnat), compared with a ValueNum of
	// status bits) is the DSR table's too; without one it is the Builder's `ct status dnat`.
)

// Expr is one expression of a statement's key; a key of several is their concatenation
// (`ip daddr . meta l4proto . th dport`).
type Expr struct {
	Field Field
	// IP6: FieldSaddr, FieldDaddr and FieldJhash name ip6 rather than ip.
	IP6 bool
	// Proto: FieldDport's protocol (`tcp dport`, which also matches the protocol); empty for
	// `th dport`.
	Proto Protocol
	// Meta: FieldMark is written `meta mark`.
	Meta bool
	// Inc: FieldNumgen counts (`numgen inc`) rather than draws (`numgen random`).
	Inc bool
	// Flow: FieldJhash hashes the flow, `ip saddr . th sport . ip daddr . th dport . meta
	// l4proto` (ip only), rather than `ip saddr`.
	Flow bool
	// Mask is FieldMark's `and` mask (0: none), FieldTCPFlags' (0: the flags of the value are
	// tested, `tcp flags syn`; else `tcp flags & (MASK) == VALUE`), FieldCtStatus's (0: `ct
	// status SYM`; else `ct status & (MASK) == VALUE`, both in status bits), Mod the modulus of FieldNumgen and FieldJhash
	// (not 0), Offset FieldNumgen's offset, Seed FieldJhash's seed.
	Mask, Mod, Offset, Seed uint32
}

// ValueKind says which field of a Value holds it.
type ValueKind uint8

// The kinds of values.
const (
	ValueAddr     ValueKind = iota + 1 // an address: Addr
	ValuePrefix                        // a prefix: Addr and Bits
	ValueNum                           // a number: Num, written in decimal
	ValueSym                           // a symbol (tcp, local, new, dnat): Sym
	ValueAddrPort                      // an address and a port (dnat's target): Addr, Num
	ValueString                        // a quoted string (an interface name): Sym
)

// Value is a literal a statement compares with.
type Value struct {
	Addr netip.Addr
	Sym  string
	Num  uint32
	Bits uint8
	Kind ValueKind
}

// AddrValue, PrefixValue, NumValue and SymValue make Values.
func AddrValue(a netip.Addr) Value { return Value{Kind: ValueAddr, Addr: a} }
func PrefixValue(p netip.Prefix) Value {
	return Value{Kind: ValuePrefix, Addr: p.Addr(), Bits: uint8(max(p.Bits(), 0))}
}
func NumValue(n uint32) Value { return Value{Kind: ValueNum, Num: n} }
func SymValue(s string) Value { return Value{Kind: ValueSym, Sym: s} }

// StringValue makes a ValueString.
func StringValue(s string) Value { return Value{Kind: ValueString, Sym: s} }

// AddrPortValue makes a ValueAddrPort.
func AddrPortValue(ap netip.AddrPort) Value {
	return Value{Kind: ValueAddrPort, Addr: ap.Addr(), Num: uint32(ap.Port())}
}

// AddrPort returns a ValueAddrPort as a netip.AddrPort.
func (v Value) AddrPort() netip.AddrPort { return netip.AddrPortFrom(v.Addr, uint16(v.Num)) }

// Prefix returns a ValuePrefix as a netip.Prefix.
func (v Value) Prefix() netip.Prefix { return netip.PrefixFrom(v.Addr, int(v.Bits)) }

func (v Value) String() string {
	var buf [64]byte
	return string(v.appendText(buf[:0]))
}

func (v Value) appendText(b []byte) []byte {
	switch v.Kind {
	case ValueAddr:
		return v.Addr.AppendTo(b)
	case ValuePrefix:
		return v.Prefix().AppendTo(b)
	case ValueNum:
		return strconv.AppendUint(b, uint64(v.Num), 10)
	case ValueAddrPort:
		return v.AddrPort().AppendTo(b)
	case ValueString:
		return strconv.AppendQuote(b, v.Sym)
	}
	return append(b, v.Sym...)
}

// VerdictKind is what a verdict does.
type VerdictKind uint8

// The verdicts.
const (
	Jump VerdictKind = iota + 1
	Goto
	Return
	Accept
	Drop
)

// Verdict is a verdict statement or a verdict map's value. Chain is Jump's and Goto's target.
type Verdict struct {
	Kind  VerdictKind
	Chain string
}

func (v Verdict) String() string {
	switch v.Kind {
	case Jump:
		return "jump " + v.Chain
	case Goto:
		return "goto " + v.Chain
	case Return:
		return "return"
	case Accept:
		return "accept"
	case Drop:
		return "drop"
	}
	return "verdict(" + strconv.Itoa(int(v.Kind)) + ")"
}

func (v Verdict) appendText(b []byte) []byte {
	switch v.Kind {
	case Jump:
		return append(append(b, "jump "...), v.Chain...)
	case Goto:
		return append(append(b, "goto "...), v.Chain...)
	}
	return append(b, v.String()...) // a constant
}

// StmtKind is a statement's form.
type StmtKind uint8

// The statements.
const (
	StmtMatch      StmtKind = iota + 1 // Key [==|!=] Value, or Key [==|!=] { Set }
	StmtLookup                         // Key [!=] @Name
	StmtVmap                           // Key vmap @Name, or Key vmap { Elems }
	StmtVerdict                        // Verdict [Name]
	StmtReject                         // reject
	StmtCounter                        // counter
	StmtMarkSet                        // mark set mark or|xor Num
	StmtMasquerade                     // masquerade [fully-random] [random] [persistent]
	StmtUpdate                         // update @Name { Key }
	StmtDNAT                           // dnat to Value (a ValueAddrPort)
	StmtDNATMap                        // dnat ip|ip6 to Key map @Name (Key: one numgen random, or jhash)
	// The statements of the DSR table (dsr.go), which ParseRule does not read.
	StmtSetMark  // ct|meta mark set Value (a ValueNum), or set Key [map @Name]
	StmtNotrack  // notrack
	StmtClampMSS // tcp option maxseg size set rt mtu
)

// Op is a match's or lookup's comparison.
type Op uint8

// The comparisons: OpNone is written as nothing and means equality.
const (
	OpNone Op = iota
	OpEq
	OpNeq
)

// Masquerade flags.
const (
	MasqFullyRandom uint8 = 1 << iota
	MasqRandom
	MasqPersistent
)

// VmapElem is an element of a literal verdict map.
type VmapElem struct {
	Key     Value
	Verdict Verdict
}

// Stmt is one statement of a rule. Kind says which fields are used.
type Stmt struct {
	// Key is what StmtMatch, StmtLookup, StmtVmap and StmtUpdate look at, and StmtDNATMap's
	// index (one FieldNumgen).
	Key []Expr
	// Value is StmtMatch's value, unless Set is not nil: then it compares with an anonymous set,
	// written `{ a , b }`. It is also StmtDNAT's target (a ValueAddrPort).
	Value Value
	Set   []Value
	// Name is the set or map of StmtLookup, StmtVmap (empty for a literal map: Elems),
	// StmtUpdate and StmtDNATMap, without the @, or the chain of a jump or goto.
	Name  string
	Elems []VmapElem
	// Num is StmtMarkSet's bits; Xor makes it `mark xor` (else `mark or`).
	Num uint32
	Xor bool
	// Kind is the statement's form, Op StmtMatch's and StmtLookup's comparison.
	Kind StmtKind
	Op   Op
	// Masq is StmtMasquerade's flags (Masq...).
	Masq uint8
	// IP6: StmtDNATMap is written `dnat ip6`.
	IP6 bool
	// Ct: StmtSetMark sets the conntrack mark (`ct mark set`), not the packet's (`meta mark set`).
	Ct bool
	// Verdict is StmtVerdict's kind (its chain is Name).
	Verdict VerdictKind
}

// AsVerdict returns a StmtVerdict's verdict.
func (s *Stmt) AsVerdict() Verdict { return Verdict{s.Verdict, s.Name} }

// Rule is a rule of a chain: statements and a comment ("" for none).
type Rule struct {
	Chain   string
	Stmts   []Stmt
	Comment string
}

// String renders the rule's statements as nft reads them (without the chain and comment).
func (r *Rule) String() string {
	var buf [128]byte
	return string(AppendStmts(buf[:0], r.Stmts))
}

// Object returns the rule as a knftables operand, its text rendered.
func (r *Rule) Object() *knftables.Rule {
	k := &knftables.Rule{Chain: r.Chain, Rule: r.String()}
	if r.Comment != "" {
		k.Comment = knftables.PtrTo(r.Comment)
	}
	return k
}

// Equal reports whether r and o are the same rule.
func (r *Rule) Equal(o *Rule) bool {
	return r.Chain == o.Chain && r.Comment == o.Comment && slices.EqualFunc(r.Stmts, o.Stmts, Stmt.Equal)
}

// Equal reports whether s and o are the same statement.
func (s Stmt) Equal(o Stmt) bool {
	return s.Kind == o.Kind && s.Op == o.Op && s.Value == o.Value && s.Name == o.Name && s.Verdict == o.Verdict &&
		s.Num == o.Num && s.Xor == o.Xor && s.Masq == o.Masq && s.IP6 == o.IP6 && s.Ct == o.Ct &&
		slices.Equal(s.Key, o.Key) && (s.Set == nil) == (o.Set == nil) && slices.Equal(s.Set, o.Set) &&
		slices.Equal(s.Elems, o.Elems)
}

// AppendStmts appends the statements, separated by blanks, to b.
func AppendStmts(b []byte, stmts []Stmt) []byte {
	for i := range stmts {
		if i > 0 {
			b = append(b, ' ')
		}
		b = stmts[i].appendText(b)
	}
	return b
}

func (s Stmt) String() string {
	var buf [128]byte
	return string(s.appendText(buf[:0]))
}

func (e Expr) String() string {
	var buf [64]byte
	return string(e.appendText(buf[:0]))
}

func appendKey(b []byte, key []Expr) []byte {
	for i := range key {
		if i > 0 {
			b = append(b, " . "...)
		}
		b = key[i].appendText(b)
	}
	return b
}

func ipX(v6 bool) string {
	if v6 {
		return "ip6"
	}
	return "ip"
}

func appendHex(b []byte, n uint32) []byte {
	return strconv.AppendUint(append(b, "0x"...), uint64(n), 16)
}

// wordFields are the expressions written as fixed words, for ParseRule and rendering alike.
var wordFields = []struct {
	text  string
	words []string
	e     Expr
}{
	{"ip daddr", nil, Expr{Field: FieldDaddr}},
	{"ip saddr", nil, Expr{Field: FieldSaddr}},
	{"ip6 daddr", nil, Expr{Field: FieldDaddr, IP6: true}},
	{"ip6 saddr", nil, Expr{Field: FieldSaddr, IP6: true}},
	{"meta l4proto", nil, Expr{Field: FieldL4Proto}},
	{"th dport", nil, Expr{Field: FieldDport}},
	{"tcp dport", nil, Expr{Field: FieldDport, Proto: TCP}},
	{"udp dport", nil, Expr{Field: FieldDport, Proto: UDP}},
	{"sctp dport", nil, Expr{Field: FieldDport, Proto: SCTP}},
	{"fib saddr type", nil, Expr{Field: FieldFibSaddrType}},
	{"fib daddr type", nil, Expr{Field: FieldFibDaddrType}},
	{"ct state", nil, Expr{Field: FieldCtState}},
	{"ct status", nil, Expr{Field: FieldCtStatus}},
}

func init() {
	for i := range wordFields {
		wordFields[i].words = strings.Fields(wordFields[i].text)
	}
}

func (e Expr) appendText(b []byte) []byte {
	for i := range wordFields {
		if wordFields[i].e == e {
			return append(b, wordFields[i].text...)
		}
	}
	switch e.Field {
	case FieldMark:
		if e.Meta {
			b = append(b, "meta "...)
		}
		b = append(b, "mark"...)
		if e.Mask != 0 {
			b = appendHex(append(b, " and "...), e.Mask)
		}
		return b
	case FieldNumgen:
		b = append(b, "numgen "...)
		if e.Inc {
			b = append(b, "inc"...)
		} else {
			b = append(b, "random"...)
		}
		b = strconv.AppendUint(append(b, " mod "...), uint64(e.Mod), 10)
		if e.Offset != 0 {
			b = strconv.AppendUint(append(b, " offset "...), uint64(e.Offset), 10)
		}
		return b
	case FieldJhash:
		if e.Flow {
			b = append(b, "jhash "+FlowKey+" mod "...)
		} else {
			b = append(append(append(b, "jhash "...), ipX(e.IP6)...), " saddr mod "...)
		}
		b = strconv.AppendUint(b, uint64(e.Mod), 10)
		return appendHex(append(b, " seed "...), e.Seed)
	case FieldEtherSaddr:
		return append(b, "ether saddr"...)
	case FieldIifname:
		return append(b, "iifname"...)
	case FieldOifname:
		return append(b, "oifname"...)
	case FieldCtMark:
		return append(b, "ct mark"...)
	case FieldTCPFlags:
		b = append(b, "tcp flags"...)
		if e.Mask != 0 {
			b = append(appendTCPFlags(append(b, " & ("...), e.Mask), ')')
		}
		return b
	case FieldCtStatus: // with a Mask: without one it is a word field
		return append(appendFlags(append(b, "ct status & ("...), e.Mask, ctStatusBits), ')')
	}
	return append(b, "field("+strconv.Itoa(int(e.Field))+")"...)
}

// FlowKey is the flow a FieldJhash with Flow hashes.
const FlowKey = "ip saddr . th sport . ip daddr . th dport . meta l4proto"

// tcpFlags are the names of the TCP flags, lowest bit first.
var tcpFlags = []string{"fin", "syn", "rst", "psh", "ack", "urg", "ecn", "cwr"}

// ctStatusBits are the names nft gives the conntrack status bits (IPS_*), lowest bit first; ""
// for one it has no name for.
var ctStatusBits = []string{"expected", "seen-reply", "assured", "confirmed", "snat", "dnat", "", "", "", "dying"}

// The conntrack status bits of the DSR table's rules (IPS_CONFIRMED, IPS_DST_NAT).
const (
	ctStatusConfirmed = 1 << 3
	ctStatusDNAT      = 1 << 5
)

// appendTCPFlags appends the flags of bits, as `syn | ack`.
func appendTCPFlags(b []byte, bits uint32) []byte { return appendFlags(b, bits, tcpFlags) }

// appendFlags appends the bits by their names, as `syn | ack`; bits without a name, and 0, as a
// hexadecimal number after them.
func appendFlags(b []byte, bits uint32, names []string) []byte {
	first := true
	var rest uint32
	for i := range 32 {
		if bits&(1<<i) == 0 {
			continue
		}
		if i >= len(names) || names[i] == "" {
			rest |= 1 << i
			continue
		}
		if !first {
			b = append(b, " | "...)
		}
		b, first = append(b, names[i]...), false
	}
	if rest != 0 || bits == 0 {
		if !first {
			b = append(b, " | "...)
		}
		b = appendHex(b, rest)
	}
	return b
}

func (s Stmt) appendText(b []byte) []byte {
	switch s.Kind {
	case StmtMatch, StmtLookup:
		b = appendKey(b, s.Key)
		switch s.Op {
		case OpEq:
			b = append(b, " =="...)
		case OpNeq:
			b = append(b, " !="...)
		}
		switch {
		case s.Kind == StmtLookup:
			return append(append(b, " @"...), s.Name...)
		case len(s.Key) == 1 && s.Key[0].Field == FieldTCPFlags && s.Set == nil:
			return appendTCPFlags(append(b, ' '), s.Value.Num)
		case len(s.Key) == 1 && s.Key[0].Field == FieldCtStatus && s.Key[0].Mask != 0 && s.Set == nil:
			return appendFlags(append(b, ' '), s.Value.Num, ctStatusBits)
		case s.Set != nil:
			b = append(b, " {"...)
			for i, v := range s.Set {
				if i > 0 {
					b = append(b, " ,"...)
				}
				b = v.appendText(append(b, ' '))
			}
			return append(b, " }"...)
		}
		return s.Value.appendText(append(b, ' '))
	case StmtVmap:
		b = append(appendKey(b, s.Key), " vmap "...)
		if s.Name != "" || s.Elems == nil {
			return append(append(b, '@'), s.Name...)
		}
		b = append(b, '{')
		for i, e := range s.Elems {
			if i > 0 {
				b = append(b, " ,"...)
			}
			b = e.Key.appendText(append(b, ' '))
			b = e.Verdict.appendText(append(b, " : "...))
		}
		return append(b, " }"...)
	case StmtVerdict:
		return s.AsVerdict().appendText(b)
	case StmtReject:
		return append(b, "reject"...)
	case StmtCounter:
		return append(b, "counter"...)
	case StmtMarkSet:
		if s.Xor {
			b = append(b, "mark set mark xor "...)
		} else {
			b = append(b, "mark set mark or "...)
		}
		return appendHex(b, s.Num)
	case StmtMasquerade:
		b = append(b, "masquerade"...)
		if s.Masq&MasqFullyRandom != 0 {
			b = append(b, " fully-random"...)
		}
		if s.Masq&MasqRandom != 0 {
			b = append(b, " random"...)
		}
		if s.Masq&MasqPersistent != 0 {
			b = append(b, " persistent"...)
		}
		return b
	case StmtUpdate:
		b = append(append(append(b, "update @"...), s.Name...), " { "...)
		return append(appendKey(b, s.Key), " }"...)
	case StmtDNAT:
		return s.Value.appendText(append(b, "dnat to "...))
	case StmtDNATMap:
		b = append(append(append(b, "dnat "...), ipX(s.IP6)...), " to "...)
		return append(append(appendKey(b, s.Key), " map @"...), s.Name...)
	case StmtSetMark:
		if s.Ct {
			b = append(b, "ct mark set "...)
		} else {
			b = append(b, "meta mark set "...)
		}
		if len(s.Key) == 0 {
			return appendHex(b, s.Value.Num)
		}
		b = appendKey(b, s.Key)
		if s.Name != "" {
			b = append(append(b, " map @"...), s.Name...)
		}
		return b
	case StmtNotrack:
		return append(b, "notrack"...)
	case StmtClampMSS:
		return append(b, "tcp option maxseg size set rt mtu"...)
	}
	return append(b, "stmt("+strconv.Itoa(int(s.Kind))+")"...)
}

// Keys and statements the Builder writes often. Key slices are shared: never modify them.
var (
	keyL4Proto      = []Expr{{Field: FieldL4Proto}}
	keyThDport      = []Expr{{Field: FieldDport}}
	keyPortTuple    = []Expr{{Field: FieldL4Proto}, {Field: FieldDport}}
	keyCtState      = []Expr{{Field: FieldCtState}}
	keyCtStatus     = []Expr{{Field: FieldCtStatus}}
	keyFibSaddrType = []Expr{{Field: FieldFibSaddrType}}
	keyFibDaddrType = []Expr{{Field: FieldFibDaddrType}}
	keyDport        = map[Protocol][]Expr{
		TCP: {{Field: FieldDport, Proto: TCP}}, UDP: {{Field: FieldDport, Proto: UDP}}, SCTP: {{Field: FieldDport, Proto: SCTP}},
	}
)

func match(key []Expr, v Value) Stmt     { return Stmt{Kind: StmtMatch, Key: key, Value: v} }
func notMatch(key []Expr, v Value) Stmt  { return Stmt{Kind: StmtMatch, Key: key, Op: OpNeq, Value: v} }
func lookup(key []Expr, set string) Stmt { return Stmt{Kind: StmtLookup, Key: key, Name: set} }
func notLookup(key []Expr, set string) Stmt {
	return Stmt{Kind: StmtLookup, Key: key, Op: OpNeq, Name: set}
}
func vmap(key []Expr, m string) Stmt     { return Stmt{Kind: StmtVmap, Key: key, Name: m} }
func verdict(k VerdictKind) Stmt         { return Stmt{Kind: StmtVerdict, Verdict: k} }
func jump(chain string) Stmt             { return Stmt{Kind: StmtVerdict, Verdict: Jump, Name: chain} }
func gotoChain(chain string) Stmt        { return Stmt{Kind: StmtVerdict, Verdict: Goto, Name: chain} }
func markSet(bits uint32, xor bool) Stmt { return Stmt{Kind: StmtMarkSet, Num: bits, Xor: xor} }
func l4proto(p Protocol) Stmt            { return match(keyL4Proto, SymValue(string(p))) }
