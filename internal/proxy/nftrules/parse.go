package nftrules

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ParseRule parses rule text (statements, without chain or comment) into statements: the
// inverse of Rule.String for what it renders, and the only reader of rule text in ironlb (trace
// uses it on dumped rulesets). Anything outside the grammar of rule.go is an error, never a
// guess.
func ParseRule(text string) ([]Stmt, error) {
	p := &ruleParser{toks: tokenize(text)}
	var out []Stmt
	for !p.done() {
		s, err := p.stmt()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// ParseVerdict parses a verdict as written in a verdict map's element: accept, drop, return, or
// jump or goto and a chain.
func ParseVerdict(s string) (Verdict, error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 2 && f[0] == "goto":
		return Verdict{Goto, f[1]}, nil
	case len(f) == 2 && f[0] == "jump":
		return Verdict{Jump, f[1]}, nil
	case len(f) == 1 && f[0] == "accept":
		return Verdict{Kind: Accept}, nil
	case len(f) == 1 && f[0] == "drop":
		return Verdict{Kind: Drop}, nil
	case len(f) == 1 && f[0] == "return":
		return Verdict{Kind: Return}, nil
	}
	return Verdict{}, fmt.Errorf("unsupported verdict %q", s)
}

// tokenize splits on blanks and separates braces and commas from the words they touch.
func tokenize(text string) []string {
	var toks []string
	for _, f := range strings.Fields(text) {
		for f != "" {
			if f[0] == '{' || f[0] == '}' || f[0] == ',' {
				toks = append(toks, f[:1])
				f = f[1:]
				continue
			}
			i := strings.IndexAny(f, "{},")
			if i < 0 {
				i = len(f)
			}
			toks = append(toks, f[:i])
			f = f[i:]
		}
	}
	return toks
}

type ruleParser struct {
	toks []string
	i    int
}

func (p *ruleParser) done() bool { return p.i >= len(p.toks) }

func (p *ruleParser) peek() string {
	if p.done() {
		return ""
	}
	return p.toks[p.i]
}

func (p *ruleParser) next() (string, error) {
	if p.done() {
		return "", fmt.Errorf("unexpected end of rule")
	}
	t := p.toks[p.i]
	p.i++
	return t, nil
}

func (p *ruleParser) expect(want string) error {
	t, err := p.next()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("want %q, got %q", want, t)
	}
	return nil
}

// name parses @NAME.
func (p *ruleParser) name(what string) (string, error) {
	t, err := p.next()
	if err != nil {
		return "", err
	}
	if len(t) < 2 || t[0] != '@' {
		return "", fmt.Errorf("%s %q, want @name", what, t)
	}
	return t[1:], nil
}

func (p *ruleParser) stmt() (Stmt, error) {
	switch t := p.peek(); t {
	case "jump", "goto":
		p.i++
		target, err := p.next()
		if err != nil {
			return Stmt{}, err
		}
		if !chainName(target) {
			return Stmt{}, fmt.Errorf("%s %q: not a chain name", t, target)
		}
		k := Jump
		if t == "goto" {
			k = Goto
		}
		return Stmt{Kind: StmtVerdict, Verdict: k, Name: target}, nil
	case "return", "accept", "drop":
		p.i++
		v, _ := ParseVerdict(t)
		return Stmt{Kind: StmtVerdict, Verdict: v.Kind}, nil
	case "reject":
		p.i++
		return Stmt{Kind: StmtReject}, nil
	case "counter":
		p.i++
		return Stmt{Kind: StmtCounter}, nil
	case "masquerade":
		p.i++
		s := Stmt{Kind: StmtMasquerade}
		for {
			switch p.peek() {
			case "fully-random":
				s.Masq |= MasqFullyRandom
			case "random":
				s.Masq |= MasqRandom
			case "persistent":
				s.Masq |= MasqPersistent
			default:
				return s, nil
			}
			p.i++
		}
	case "dnat":
		p.i++
		if t := p.peek(); t == "ip" || t == "ip6" {
			// dnat ip to EXPR map @map: the map holds "address . port" values.
			p.i++
			if err := p.expect("to"); err != nil {
				return Stmt{}, err
			}
			e, err := p.key()
			if err != nil {
				return Stmt{}, err
			}
			if len(e) != 1 || e[0].Field != FieldNumgen || e[0].Inc {
				return Stmt{}, fmt.Errorf("dnat map keyed by %q: only numgen random is supported", p.toks[p.i-1])
			}
			if err := p.expect("map"); err != nil {
				return Stmt{}, err
			}
			m, err := p.name("dnat map")
			if err != nil {
				return Stmt{}, err
			}
			return Stmt{Kind: StmtDNATMap, Key: e, Name: m, IP6: t == "ip6"}, nil
		}
		if err := p.expect("to"); err != nil {
			return Stmt{}, err
		}
		t, err := p.next()
		if err != nil {
			return Stmt{}, err
		}
		ap, err := netip.ParseAddrPort(t)
		if err != nil {
			return Stmt{}, fmt.Errorf("dnat target %q: %w", t, err)
		}
		return Stmt{Kind: StmtDNAT, Value: AddrPortValue(ap)}, nil
	case "update":
		p.i++
		set, err := p.name("update of")
		if err != nil {
			return Stmt{}, err
		}
		if err := p.expect("{"); err != nil {
			return Stmt{}, err
		}
		e, err := p.key()
		if err != nil {
			return Stmt{}, err
		}
		if err := p.expect("}"); err != nil {
			return Stmt{}, err
		}
		return Stmt{Kind: StmtUpdate, Name: set, Key: e}, nil
	case "mark":
		if p.i+1 < len(p.toks) && p.toks[p.i+1] == "set" {
			p.i += 2
			if err := p.expect("mark"); err != nil {
				return Stmt{}, err
			}
			op, err := p.next()
			if err != nil {
				return Stmt{}, err
			}
			if op != "or" && op != "xor" {
				return Stmt{}, fmt.Errorf("mark set mark %s: want or or xor", op)
			}
			v, err := p.number()
			if err != nil {
				return Stmt{}, err
			}
			return Stmt{Kind: StmtMarkSet, Xor: op == "xor", Num: v}, nil
		}
	}

	// A match, a set lookup or a verdict map.
	e, err := p.key()
	if err != nil {
		return Stmt{}, err
	}
	s := Stmt{Key: e}
	switch p.peek() {
	case "vmap":
		p.i++
		s.Kind = StmtVmap
		if strings.HasPrefix(p.peek(), "@") {
			s.Name, err = p.name("vmap")
			return s, err
		}
		s.Elems, err = p.vmapLiteral()
		return s, err
	case "!=":
		p.i++
		s.Op = OpNeq
	case "==":
		p.i++
		s.Op = OpEq
	}
	if strings.HasPrefix(p.peek(), "@") {
		s.Kind = StmtLookup
		s.Name, err = p.name("set")
		return s, err
	}
	s.Kind = StmtMatch
	if p.peek() == "{" {
		s.Set, err = p.setLiteral()
	} else {
		s.Value, err = p.value()
	}
	if err != nil {
		return Stmt{}, err
	}
	if len(e) == 1 && e[0].Field == FieldCtStatus && (s.Set != nil || s.Value != SymValue("dnat")) {
		return Stmt{}, fmt.Errorf("ct status: only dnat is supported")
	}
	return s, nil
}

func (p *ruleParser) number() (uint32, error) {
	t, err := p.next()
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(t, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("number %q: %w", t, err)
	}
	return uint32(v), nil
}

// key parses expr ( "." expr )*.
func (p *ruleParser) key() ([]Expr, error) {
	var out []Expr
	for {
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		if p.peek() != "." {
			return out, nil
		}
		p.i++
	}
}

func (p *ruleParser) expr() (Expr, error) {
	for _, f := range wordFields {
		if p.i+len(f.words) <= len(p.toks) && slices.Equal(p.toks[p.i:p.i+len(f.words)], f.words) {
			p.i += len(f.words)
			return f.e, nil
		}
	}
	t, err := p.next()
	if err != nil {
		return Expr{}, err
	}
	switch t {
	case "meta":
		if err := p.expect("mark"); err != nil {
			return Expr{}, err
		}
		return p.mark(true)
	case "mark":
		return p.mark(false)
	case "numgen":
		mode, err := p.next()
		if err != nil {
			return Expr{}, err
		}
		if mode != "random" && mode != "inc" {
			return Expr{}, fmt.Errorf("unsupported numgen %s", mode)
		}
		e := Expr{Field: FieldNumgen, Inc: mode == "inc"}
		if e.Mod, err = p.modulus(); err != nil {
			return Expr{}, err
		}
		if p.peek() == "offset" {
			p.i++
			if e.Offset, err = p.number(); err != nil {
				return Expr{}, err
			}
			if uint64(e.Offset)+uint64(e.Mod) > 1<<32 {
				return Expr{}, fmt.Errorf("numgen offset %d + mod %d overflows", e.Offset, e.Mod)
			}
		}
		return e, nil
	case "jhash":
		fam, err := p.next()
		if err != nil {
			return Expr{}, err
		}
		if fam != "ip" && fam != "ip6" {
			return Expr{}, fmt.Errorf("unsupported jhash over %s", fam)
		}
		if err := p.expect("saddr"); err != nil {
			return Expr{}, err
		}
		e := Expr{Field: FieldJhash, IP6: fam == "ip6"}
		if e.Mod, err = p.modulus(); err != nil {
			return Expr{}, err
		}
		if p.peek() != "seed" {
			// Without a seed the kernel picks a random one: no one can tell the bucket (nftrules
			// always sets one).
			return Expr{}, fmt.Errorf("jhash without a seed")
		}
		p.i++
		if e.Seed, err = p.number(); err != nil {
			return Expr{}, err
		}
		return e, nil
	}
	return Expr{}, fmt.Errorf("unsupported expression %q", t)
}

func (p *ruleParser) modulus() (uint32, error) {
	if err := p.expect("mod"); err != nil {
		return 0, err
	}
	n, err := p.number()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("mod 0")
	}
	return n, nil
}

func (p *ruleParser) mark(meta bool) (Expr, error) {
	e := Expr{Field: FieldMark, Meta: meta}
	if p.peek() == "and" {
		p.i++
		v, err := p.number()
		if err != nil {
			return Expr{}, err
		}
		if v == 0 {
			return Expr{}, fmt.Errorf("mark and 0")
		}
		e.Mask = v
	}
	return e, nil
}

// value parses one literal: an address, a prefix, a number or a symbol.
func (p *ruleParser) value() (Value, error) {
	t, err := p.next()
	if err != nil {
		return Value{}, err
	}
	if p.peek() == "." {
		return Value{}, fmt.Errorf("concatenated value %s . %s: unsupported", t, p.toks[p.i+1:])
	}
	return parseValue(t)
}

func parseValue(t string) (Value, error) {
	if strings.Contains(t, "/") {
		pfx, err := netip.ParsePrefix(t)
		if err != nil {
			return Value{}, fmt.Errorf("value %q: %w", t, err)
		}
		return PrefixValue(pfx), nil
	}
	if a, err := netip.ParseAddr(t); err == nil {
		return AddrValue(a), nil
	}
	if t != "" && t[0] >= '0' && t[0] <= '9' {
		n, err := strconv.ParseUint(t, 0, 32)
		if err != nil {
			return Value{}, fmt.Errorf("value %q: %w", t, err)
		}
		return NumValue(uint32(n)), nil
	}
	if !symbol(t) {
		return Value{}, fmt.Errorf("unexpected %q", t)
	}
	return SymValue(t), nil
}

// symbol reports whether t is a lower-case word such as tcp, local or fully-random.
func symbol(t string) bool {
	if t == "" || t[0] < 'a' || t[0] > 'z' {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// chainName reports whether t can be a chain name: no blanks, braces or commas (tokenize
// took those out) and not a lone symbol of the grammar.
func chainName(t string) bool { return t != "" && t != "{" && t != "}" && t != "," }

// setLiteral parses "{ a , b }".
func (p *ruleParser) setLiteral() ([]Value, error) { return braced(p, "set literal", p.value) }

// vmapLiteral parses "{ key : verdict , ... }".
func (p *ruleParser) vmapLiteral() ([]VmapElem, error) {
	return braced(p, "verdict map literal", func() (VmapElem, error) {
		k, err := p.value()
		if err != nil {
			return VmapElem{}, err
		}
		if err := p.expect(":"); err != nil {
			return VmapElem{}, err
		}
		var verdict []string
		for p.peek() != "," && p.peek() != "}" {
			t, err := p.next()
			if err != nil {
				return VmapElem{}, err
			}
			verdict = append(verdict, t)
		}
		v, err := ParseVerdict(strings.Join(verdict, " "))
		if err != nil {
			return VmapElem{}, err
		}
		return VmapElem{Key: k, Verdict: v}, nil
	})
}

// braced parses "{ item , item ... }" (at least one item), each item with item; what names the
// literal in errors.
func braced[T any](p *ruleParser, what string, item func() (T, error)) ([]T, error) {
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	out := []T{}
	for {
		v, err := item()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		t, err := p.next()
		if err != nil {
			return nil, err
		}
		if t == "}" {
			return out, nil
		}
		if t != "," {
			return nil, fmt.Errorf("in %s: want , or }, got %q", what, t)
		}
	}
}
