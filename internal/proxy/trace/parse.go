package trace

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

type stmtKind uint8

const (
	stMatch      stmtKind = iota + 1 // expr [==|!=] value | { values }
	stLookup                         // expr [!=] @set
	stVmap                           // expr vmap @map | { key : verdict, ... }
	stJump                           // jump chain
	stGoto                           // goto chain
	stReturn                         // return
	stAccept                         // accept
	stDrop                           // drop
	stReject                         // reject
	stMarkSet                        // mark set mark or|xor N
	stMasquerade                     // masquerade [flags]
	stUpdate                         // update @set { expr }
	stDNAT                           // dnat to addr:port
	stDNATMap                        // dnat ip to numgen random mod N offset K map @map
	stCounter                        // counter
)

type primKind uint8

const (
	pSaddr    primKind = iota + 1 // ip saddr / ip6 saddr
	pDaddr                        // ip daddr / ip6 daddr
	pL4Proto                      // meta l4proto
	pDport                        // th dport, or tcp/udp/sctp dport (proto set)
	pFibSaddr                     // fib saddr type
	pFibDaddr                     // fib daddr type
	pCtState                      // ct state
	pCtStatus                     // ct status (only "dnat" is known)
	pMark                         // [meta] mark [and N]
	pNumgen                       // numgen random|inc mod N
	pJhash                        // jhash ip saddr mod N seed S
)

type prim struct {
	kind   primKind
	family string // "ip" or "ip6" for addresses and jhash
	proto  string // for "tcp dport"
	mask   uint32 // for "mark and N"; 0 means none
	inc    bool   // numgen inc (else random)
	mod    uint32
	offset uint32 // numgen offset
	seed   uint32
	text   string
}

type vmapEntry struct {
	key     string
	verdict string
	comment string
}

type stmt struct {
	kind   stmtKind
	expr   []prim
	neg    bool
	values []string // match: literal values (a set literal has several)
	set    string   // lookup, update, vmap @map
	vmap   []vmapEntry
	target string // jump, goto
	markOr bool   // mark set mark or (else xor)
	mark   uint32
	dnat   netip.AddrPort
}

// parseRule parses the rule forms nftrules writes. Anything else is an error.
func parseRule(text string) ([]stmt, error) {
	p := &parser{toks: tokenize(text)}
	var out []stmt
	for !p.done() {
		s, err := p.stmt()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// tokenize splits on blanks and separates braces and commas from the words they touch.
func tokenize(text string) []string {
	var toks []string
	for _, f := range strings.Fields(text) {
		for f != "" {
			switch {
			case f[0] == '{' || f[0] == '}' || f[0] == ',':
				toks = append(toks, f[:1])
				f = f[1:]
			default:
				i := strings.IndexAny(f, "{},")
				if i < 0 {
					toks = append(toks, f)
					f = ""
				} else {
					toks = append(toks, f[:i])
					f = f[i:]
				}
			}
		}
	}
	return toks
}

type parser struct {
	toks []string
	i    int
}

func (p *parser) done() bool { return p.i >= len(p.toks) }

func (p *parser) peek() string {
	if p.done() {
		return ""
	}
	return p.toks[p.i]
}

func (p *parser) next() (string, error) {
	if p.done() {
		return "", fmt.Errorf("unexpected end of rule")
	}
	t := p.toks[p.i]
	p.i++
	return t, nil
}

func (p *parser) expect(want string) error {
	t, err := p.next()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("want %q, got %q", want, t)
	}
	return nil
}

func (p *parser) stmt() (stmt, error) {
	switch t := p.peek(); t {
	case "jump", "goto":
		p.i++
		target, err := p.next()
		if err != nil {
			return stmt{}, err
		}
		k := stJump
		if t == "goto" {
			k = stGoto
		}
		return stmt{kind: k, target: target}, nil
	case "return":
		p.i++
		return stmt{kind: stReturn}, nil
	case "accept":
		p.i++
		return stmt{kind: stAccept}, nil
	case "drop":
		p.i++
		return stmt{kind: stDrop}, nil
	case "reject":
		p.i++
		return stmt{kind: stReject}, nil
	case "counter":
		p.i++
		return stmt{kind: stCounter}, nil
	case "masquerade":
		p.i++
		for p.peek() == "fully-random" || p.peek() == "random" || p.peek() == "persistent" {
			p.i++
		}
		return stmt{kind: stMasquerade}, nil
	case "dnat":
		p.i++
		if t := p.peek(); t == "ip" || t == "ip6" {
			// dnat ip to EXPR map @map: the map holds "address . port" values.
			p.i++
			if err := p.expect("to"); err != nil {
				return stmt{}, err
			}
			e, err := p.expr()
			if err != nil {
				return stmt{}, err
			}
			if len(e) != 1 || e[0].kind != pNumgen || e[0].inc {
				return stmt{}, fmt.Errorf("dnat map keyed by %q: only numgen random is supported", p.toks[p.i-1])
			}
			if err := p.expect("map"); err != nil {
				return stmt{}, err
			}
			m, err := p.next()
			if err != nil {
				return stmt{}, err
			}
			if !strings.HasPrefix(m, "@") || len(m) == 1 {
				return stmt{}, fmt.Errorf("dnat map %q, want @map", m)
			}
			return stmt{kind: stDNATMap, expr: e, set: m[1:]}, nil
		}
		if err := p.expect("to"); err != nil {
			return stmt{}, err
		}
		t, err := p.next()
		if err != nil {
			return stmt{}, err
		}
		ap, err := netip.ParseAddrPort(t)
		if err != nil {
			return stmt{}, fmt.Errorf("dnat target %q: %w", t, err)
		}
		return stmt{kind: stDNAT, dnat: ap}, nil
	case "update":
		p.i++
		t, err := p.next()
		if err != nil {
			return stmt{}, err
		}
		if !strings.HasPrefix(t, "@") {
			return stmt{}, fmt.Errorf("update of %q, want @set", t)
		}
		if err := p.expect("{"); err != nil {
			return stmt{}, err
		}
		e, err := p.expr()
		if err != nil {
			return stmt{}, err
		}
		if err := p.expect("}"); err != nil {
			return stmt{}, err
		}
		return stmt{kind: stUpdate, set: t[1:], expr: e}, nil
	case "mark":
		if p.i+1 < len(p.toks) && p.toks[p.i+1] == "set" {
			p.i += 2
			if err := p.expect("mark"); err != nil {
				return stmt{}, err
			}
			op, err := p.next()
			if err != nil {
				return stmt{}, err
			}
			if op != "or" && op != "xor" {
				return stmt{}, fmt.Errorf("mark set mark %s: want or or xor", op)
			}
			v, err := p.number()
			if err != nil {
				return stmt{}, err
			}
			return stmt{kind: stMarkSet, markOr: op == "or", mark: v}, nil
		}
	}

	// A match, a set lookup or a verdict map.
	e, err := p.expr()
	if err != nil {
		return stmt{}, err
	}
	s := stmt{expr: e}
	switch t := p.peek(); {
	case t == "vmap":
		p.i++
		s.kind = stVmap
		if m := p.peek(); strings.HasPrefix(m, "@") {
			p.i++
			s.set = m[1:]
			return s, nil
		}
		entries, err := p.vmapLiteral()
		if err != nil {
			return stmt{}, err
		}
		s.vmap = entries
		return s, nil
	case t == "!=":
		p.i++
		s.neg = true
	case t == "==":
		p.i++
	}
	if t := p.peek(); strings.HasPrefix(t, "@") {
		p.i++
		s.kind = stLookup
		s.set = t[1:]
		return s, nil
	}
	vals, err := p.values()
	if err != nil {
		return stmt{}, err
	}
	if len(e) == 1 && e[0].kind == pCtStatus && (len(vals) != 1 || vals[0] != "dnat") {
		return stmt{}, fmt.Errorf("ct status %v: only dnat is supported", vals)
	}
	s.kind = stMatch
	s.values = vals
	return s, nil
}

func (p *parser) number() (uint32, error) {
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

// expr parses primary ( "." primary )*.
func (p *parser) expr() ([]prim, error) {
	var out []prim
	for {
		pr, err := p.prim()
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
		if p.peek() != "." {
			return out, nil
		}
		p.i++
	}
}

func (p *parser) prim() (prim, error) {
	start := p.i
	t, err := p.next()
	if err != nil {
		return prim{}, err
	}
	var pr prim
	switch t {
	case "ip", "ip6":
		f, err := p.next()
		if err != nil {
			return prim{}, err
		}
		switch f {
		case "saddr":
			pr = prim{kind: pSaddr, family: t}
		case "daddr":
			pr = prim{kind: pDaddr, family: t}
		default:
			return prim{}, fmt.Errorf("unsupported field %s %s", t, f)
		}
	case "meta":
		f, err := p.next()
		if err != nil {
			return prim{}, err
		}
		switch f {
		case "l4proto":
			pr = prim{kind: pL4Proto}
		case "mark":
			pr, err = p.markExpr()
			if err != nil {
				return prim{}, err
			}
		default:
			return prim{}, fmt.Errorf("unsupported meta %s", f)
		}
	case "mark":
		pr, err = p.markExpr()
		if err != nil {
			return prim{}, err
		}
	case "th", "tcp", "udp", "sctp":
		if err := p.expect("dport"); err != nil {
			return prim{}, err
		}
		pr = prim{kind: pDport}
		if t != "th" {
			pr.proto = t
		}
	case "fib":
		f, err := p.next()
		if err != nil {
			return prim{}, err
		}
		if err := p.expect("type"); err != nil {
			return prim{}, err
		}
		switch f {
		case "saddr":
			pr = prim{kind: pFibSaddr}
		case "daddr":
			pr = prim{kind: pFibDaddr}
		default:
			return prim{}, fmt.Errorf("unsupported fib %s", f)
		}
	case "ct":
		f, err := p.next()
		if err != nil {
			return prim{}, err
		}
		switch f {
		case "state":
			pr = prim{kind: pCtState}
		case "status":
			pr = prim{kind: pCtStatus}
		default:
			return prim{}, fmt.Errorf("unsupported ct %s", f)
		}
	case "numgen":
		mode, err := p.next()
		if err != nil {
			return prim{}, err
		}
		if mode != "random" && mode != "inc" {
			return prim{}, fmt.Errorf("unsupported numgen %s", mode)
		}
		if err := p.expect("mod"); err != nil {
			return prim{}, err
		}
		n, err := p.number()
		if err != nil {
			return prim{}, err
		}
		if n == 0 {
			return prim{}, fmt.Errorf("numgen mod 0")
		}
		pr = prim{kind: pNumgen, inc: mode == "inc", mod: n}
		if p.peek() == "offset" {
			p.i++
			if pr.offset, err = p.number(); err != nil {
				return prim{}, err
			}
			if uint64(pr.offset)+uint64(n) > 1<<32 {
				return prim{}, fmt.Errorf("numgen offset %d + mod %d overflows", pr.offset, n)
			}
		}
	case "jhash":
		fam, err := p.next()
		if err != nil {
			return prim{}, err
		}
		if fam != "ip" && fam != "ip6" {
			return prim{}, fmt.Errorf("unsupported jhash over %s", fam)
		}
		if err := p.expect("saddr"); err != nil {
			return prim{}, err
		}
		if err := p.expect("mod"); err != nil {
			return prim{}, err
		}
		n, err := p.number()
		if err != nil {
			return prim{}, err
		}
		if n == 0 {
			return prim{}, fmt.Errorf("jhash mod 0")
		}
		pr = prim{kind: pJhash, family: fam, mod: n}
		if p.peek() != "seed" {
			// Without a seed the kernel picks a random one: the tracer cannot tell the bucket,
			// and neither can anyone else (nftrules always sets one).
			return prim{}, fmt.Errorf("jhash without a seed")
		}
		p.i++
		if pr.seed, err = p.number(); err != nil {
			return prim{}, err
		}
	default:
		return prim{}, fmt.Errorf("unsupported expression %q", t)
	}
	pr.text = strings.Join(p.toks[start:p.i], " ")
	return pr, nil
}

func (p *parser) markExpr() (prim, error) {
	pr := prim{kind: pMark}
	if p.peek() == "and" {
		p.i++
		v, err := p.number()
		if err != nil {
			return prim{}, err
		}
		pr.mask = v
	}
	return pr, nil
}

// values parses one value, or a set literal "{ a , b }". A value may be a concatenation
// ("a . b").
func (p *parser) values() ([]string, error) {
	if p.peek() != "{" {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		return []string{v}, nil
	}
	p.i++
	var out []string
	for {
		v, err := p.value()
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
			return nil, fmt.Errorf("in set literal: want , or }, got %q", t)
		}
	}
}

func (p *parser) value() (string, error) {
	parts := []string{}
	for {
		t, err := p.next()
		if err != nil {
			return "", err
		}
		if t == "{" || t == "}" || t == "," || t == ":" {
			return "", fmt.Errorf("unexpected %q", t)
		}
		parts = append(parts, t)
		if p.peek() != "." {
			return strings.Join(parts, " . "), nil
		}
		p.i++
	}
}

func (p *parser) vmapLiteral() ([]vmapEntry, error) {
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	var out []vmapEntry
	for {
		k, err := p.value()
		if err != nil {
			return nil, err
		}
		if err := p.expect(":"); err != nil {
			return nil, err
		}
		var verdict []string
		for p.peek() != "," && p.peek() != "}" {
			t, err := p.next()
			if err != nil {
				return nil, err
			}
			verdict = append(verdict, t)
		}
		v := strings.Join(verdict, " ")
		if _, err := parseVerdict(v); err != nil {
			return nil, err
		}
		out = append(out, vmapEntry{key: k, verdict: v})
		t, err := p.next()
		if err != nil {
			return nil, err
		}
		if t == "}" {
			return out, nil
		}
	}
}

// verdict is a map element's verdict.
type verdict struct {
	kind   stmtKind // stJump, stGoto, stAccept, stDrop, stReturn
	target string
}

func parseVerdict(s string) (verdict, error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 2 && f[0] == "goto":
		return verdict{stGoto, f[1]}, nil
	case len(f) == 2 && f[0] == "jump":
		return verdict{stJump, f[1]}, nil
	case len(f) == 1 && f[0] == "accept":
		return verdict{kind: stAccept}, nil
	case len(f) == 1 && f[0] == "drop":
		return verdict{kind: stDrop}, nil
	case len(f) == 1 && f[0] == "return":
		return verdict{kind: stReturn}, nil
	}
	return verdict{}, fmt.Errorf("unsupported verdict %q", s)
}
