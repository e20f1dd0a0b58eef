package trace

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"sigs.k8s.io/knftables"
)

// Origin is where a traced packet enters the node's stack.
type Origin uint8

const (
	// FromNetwork: the packet arrives on an interface, from a client outside the node or from a pod
	// on it: prerouting, then input (local destination) or forward and postrouting.
	FromNetwork Origin = iota
	// FromHost: a process on the node sends it: output and postrouting, then input if the
	// destination is local.
	FromHost
)

func (o Origin) String() string {
	if o == FromHost {
		return "host"
	}
	return "network"
}

// Packet is the first packet of a connection.
type Packet struct {
	Src, Dst netip.Addr
	Protocol string // "tcp", "udp" or "sctp"
	DPort    uint16
	Origin   Origin
}

func (p Packet) String() string {
	return fmt.Sprintf("%s %s -> %s from %s", p.Protocol, p.Src, netip.AddrPortFrom(p.Dst, p.DPort), p.Origin)
}

// Host describes the node the rules run on.
type Host struct {
	// LocalAddrs are the addresses configured on the node (`fib ... type local`, and whether a
	// destination is delivered locally). Loopback addresses always are.
	LocalAddrs []netip.Addr
	// Affinity lists, per affinity set name, client addresses it holds (as if a previous
	// connection had been made); empty by default.
	Affinity map[string][]netip.Addr
}

// Verdict is a path's fate.
type Verdict uint8

const (
	// Accept: the packet leaves the table's chains (delivered or forwarded).
	Accept Verdict = iota
	// Drop: silently discarded.
	Drop
	// Reject: discarded with an ICMP error (connection refused for TCP).
	Reject
)

func (v Verdict) String() string {
	switch v {
	case Drop:
		return "drop"
	case Reject:
		return "reject"
	}
	return "accept"
}

// Step is one rule that matched (or one map entry that was looked up and found).
type Step struct {
	Hook    knftables.BaseChainHook
	Chain   string
	Rule    string
	Comment string
	// Note says what happened: the map entry matched, the choice made, the mark set.
	Note string
}

// Path is one way through the rules. Random and round-robin choices fork a trace into one path
// per choice.
type Path struct {
	Steps   []Step
	Verdict Verdict
	// Delivery is "input" (the destination is this node), "forward" or "" if dropped or rejected.
	Delivery string
	// DNAT is the rewritten destination; invalid if the packet was not DNATed.
	DNAT netip.AddrPort
	// Masquerade is true if the packet's source is rewritten to the node's address.
	Masquerade bool
	// Choice describes the endpoint choice taken on this path ("numgen random: 1 of 3", "jhash
	// bucket 17 of 251"); empty if there was none.
	Choice string
	// Reason explains a drop or reject: the rule's comment, or the map and chain that decided.
	Reason string
}

// Result is the outcome of tracing one packet.
type Result struct {
	Packet Packet
	Paths  []Path
}

// Targets returns the distinct DNAT targets of the paths, sorted; none if nothing was DNATed.
func (r *Result) Targets() []netip.AddrPort {
	var out []netip.AddrPort
	for _, p := range r.Paths {
		if p.DNAT.IsValid() && !slices.Contains(out, p.DNAT) {
			out = append(out, p.DNAT)
		}
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return out
}

// Summary is a one-line outcome for tests: "DNAT 10.0.0.1:80, 10.0.0.2:80 masq" style, or
// "drop" / "reject" (with all paths agreeing), or the paths' outcomes joined with " | ".
func (r *Result) Summary() string {
	var outs []string
	for _, p := range r.Paths {
		s := p.Verdict.String()
		if p.Verdict == Accept {
			s = "accept"
			if p.DNAT.IsValid() {
				s = "DNAT " + p.DNAT.String()
			}
			if p.Masquerade {
				s += " masq"
			}
		}
		if !slices.Contains(outs, s) {
			outs = append(outs, s)
		}
	}
	slices.Sort(outs)
	return strings.Join(outs, " | ")
}

// ErrLoop is returned when a trace runs too many rules, or follows too many paths (a jump cycle,
// or random choices in series).
var ErrLoop = errors.New("tracing: too many steps (loop in the rules?)")

const maxSteps = 10000

// maxNumgenChoices bounds the modulus of a `numgen ... vmap` the tracer follows, one path per
// value. nftrules writes one value per endpoint of a Service port (its shared DNAT maps are
// walked by interval, whatever their modulus).
const maxNumgenChoices = 1 << 16

// Trace walks p through the rules on host h. Errors mean the ruleset or packet is outside what
// the tracer understands (an unsupported expression, a family mismatch) or the rules loop.
func (rs *Ruleset) Trace(p Packet, h Host) (*Result, error) {
	v6 := rs.family == knftables.IPv6Family
	if !p.Src.IsValid() || !p.Dst.IsValid() || p.Src.Unmap().Is6() != v6 || p.Dst.Unmap().Is6() != v6 {
		return nil, fmt.Errorf("tracing: packet %s is not of family %s", p, rs.family)
	}
	switch p.Protocol {
	case "tcp", "udp", "sctp":
	default:
		return nil, fmt.Errorf("tracing: protocol %q is not tcp, udp or sctp", p.Protocol)
	}
	p.Src, p.Dst = p.Src.Unmap(), p.Dst.Unmap()
	t := &tracer{rs: rs, host: h, local: map[netip.Addr]bool{}, affinity: map[string]map[netip.Addr]bool{}}
	for _, a := range h.LocalAddrs {
		t.local[a.Unmap()] = true
	}
	for s, addrs := range h.Affinity {
		t.affinity[s] = map[netip.Addr]bool{}
		for _, a := range addrs {
			t.affinity[s][a.Unmap()] = true
		}
	}
	st := &state{src: p.Src, dst: p.Dst, dport: p.DPort, proto: p.Protocol}
	var hooks []knftables.BaseChainHook
	if p.Origin == FromHost {
		hooks = []knftables.BaseChainHook{knftables.OutputHook, knftables.PostroutingHook, "local-in"}
	} else {
		hooks = []knftables.BaseChainHook{knftables.PreroutingHook, "route"}
	}
	paths, err := t.walk(st, hooks)
	if err != nil {
		return nil, err
	}
	return &Result{Packet: p, Paths: paths}, nil
}

type tracer struct {
	rs       *Ruleset
	host     Host
	local    map[netip.Addr]bool
	affinity map[string]map[netip.Addr]bool
	steps    int
}

// state is one path's packet and history; forks copy it.
type state struct {
	src, dst  netip.Addr
	dport     uint16
	proto     string
	mark      uint32
	dnat      netip.AddrPort
	masq      bool
	hook      knftables.BaseChainHook
	steps     []Step
	choice    string
	final     bool
	verdict   Verdict
	reason    string
	delivery  string
	via       string // the last map entry matched, for reasons
	stack     []frame
	chainDone bool // the current base chain ended early (accept, NAT)
}

type frame struct {
	chain *chainDef
	idx   int
}

func (s *state) clone() *state {
	c := *s
	c.steps = slices.Clone(s.steps)
	c.stack = slices.Clone(s.stack)
	return &c
}

func (t *tracer) isLocal(a netip.Addr) bool { return a.IsLoopback() || t.local[a] }

// walk runs the hooks in order ("route" decides input or forward+postrouting, "local-in" runs
// input if the destination is local) and returns the finished paths.
func (t *tracer) walk(st *state, hooks []knftables.BaseChainHook) ([]Path, error) {
	if st.final || len(hooks) == 0 {
		if !st.final && st.delivery == "" {
			st.delivery = "forward"
			if t.isLocal(st.dst) {
				st.delivery = "input"
			}
		}
		return []Path{st.path()}, nil
	}
	hook, rest := hooks[0], hooks[1:]
	switch hook {
	case "route":
		if t.isLocal(st.dst) {
			st.delivery = "input"
			return t.walk(st, append([]knftables.BaseChainHook{knftables.InputHook}, rest...))
		}
		st.delivery = "forward"
		return t.walk(st, append([]knftables.BaseChainHook{knftables.ForwardHook, knftables.PostroutingHook}, rest...))
	case "local-in":
		if t.isLocal(st.dst) {
			st.delivery = "input"
			return t.walk(st, append([]knftables.BaseChainHook{knftables.InputHook}, rest...))
		}
		st.delivery = "forward"
		return t.walk(st, rest)
	}
	states := []*state{st}
	for _, bc := range t.rs.hooks[hook] {
		var next []*state
		for _, s := range states {
			if s.final {
				next = append(next, s)
				continue
			}
			s.hook = hook
			out, err := t.runBase(s, bc)
			if err != nil {
				return nil, err
			}
			next = append(next, out...)
		}
		states = next
	}
	var paths []Path
	for _, s := range states {
		ps, err := t.walk(s, rest)
		if err != nil {
			return nil, err
		}
		paths = append(paths, ps...)
	}
	return paths, nil
}

func (s *state) path() Path {
	p := Path{Steps: s.steps, DNAT: s.dnat, Masquerade: s.masq, Choice: s.choice, Reason: s.reason}
	if s.final {
		p.Verdict = s.verdict
	} else {
		p.Delivery = s.delivery
	}
	return p
}

// runBase runs base chain bc to its end (or a terminal verdict) and returns the resulting states.
func (t *tracer) runBase(st *state, bc *chainDef) ([]*state, error) {
	st.stack = []frame{{chain: bc}}
	st.chainDone = false
	return t.run(st)
}

func (t *tracer) run(st *state) ([]*state, error) {
	for len(st.stack) > 0 && !st.final && !st.chainDone {
		f := &st.stack[len(st.stack)-1]
		if f.idx >= len(f.chain.rules) {
			st.stack = st.stack[:len(st.stack)-1] // end of chain: return to the caller
			continue
		}
		r := f.chain.rules[f.idx]
		f.idx++
		if t.steps++; t.steps > maxSteps {
			return nil, ErrLoop
		}
		branches, err := t.evalRule(st, f.chain, r)
		if err != nil {
			return nil, fmt.Errorf("tracing: chain %s: rule %q: %w", f.chain.name, r.text, err)
		}
		if len(branches) == 1 && branches[0] == st {
			continue
		}
		var out []*state
		for _, b := range branches {
			res, err := t.run(b)
			if err != nil {
				return nil, err
			}
			out = append(out, res...)
		}
		return out, nil
	}
	st.stack = nil
	return []*state{st}, nil
}

// evalRule evaluates one rule on st. It returns st itself (possibly changed) unless the rule
// forks, in which case it returns the forked states.
func (t *tracer) evalRule(st *state, c *chainDef, r *parsedRule) ([]*state, error) {
	return t.evalFrom(st, c, r, 0, Step{Hook: st.hook, Chain: c.name, Rule: r.text, Comment: r.comment})
}

// evalFrom evaluates r's statements from the i'th on.
func (t *tracer) evalFrom(st *state, c *chainDef, r *parsedRule, i int, step Step) ([]*state, error) {
	for ; i < len(r.stmts); i++ {
		s := &r.stmts[i]
		switch s.Kind {
		case nftrules.StmtMatch, nftrules.StmtLookup:
			if len(s.Key) == 1 && s.Key[0].Field == nftrules.FieldNumgen && s.Kind == nftrules.StmtMatch {
				// A numgen comparison (a cascade): follow both outcomes.
				e := s.Key[0]
				want := strings.Join(values(s), ",")
				taken := st.clone()
				taken.choice = fmt.Sprintf("numgen %s mod %d = %s", numgenMode(e), e.Mod, want)
				ts := step
				ts.Note = appendNote(ts.Note, taken.choice)
				out, err := t.evalFrom(taken, c, r, i+1, ts)
				if err != nil {
					return nil, err
				}
				st.choice = fmt.Sprintf("numgen %s mod %d != %s", numgenMode(e), e.Mod, want)
				return append(out, st), nil
			}
			ok, err := t.match(st, s)
			if err != nil || !ok {
				return []*state{st}, err
			}
		case nftrules.StmtVmap:
			return t.vmap(st, s, step)
		case nftrules.StmtCounter:
		case nftrules.StmtMarkSet:
			if s.Xor {
				st.mark ^= s.Num
			} else {
				st.mark |= s.Num
			}
			step.Note = appendNote(step.Note, fmt.Sprintf("mark %#x", st.mark))
		case nftrules.StmtUpdate:
			step.Note = appendNote(step.Note, "affinity recorded in "+s.Name)
		case nftrules.StmtDNATMap:
			return t.dnatMap(st, s, step)
		case nftrules.StmtDNAT:
			st.dnat = s.Value.AddrPort()
			st.dst, st.dport = st.dnat.Addr(), st.dnat.Port()
			step.Note = appendNote(step.Note, "DNAT to "+st.dnat.String())
			st.steps = append(st.steps, step)
			st.chainDone = true
			return []*state{st}, nil
		case nftrules.StmtMasquerade:
			st.masq = true
			step.Note = appendNote(step.Note, "masquerade")
			st.steps = append(st.steps, step)
			st.chainDone = true
			return []*state{st}, nil
		case nftrules.StmtReject:
			st.steps = append(st.steps, step)
			t.drop(st, Reject, step)
			return []*state{st}, nil
		case nftrules.StmtVerdict:
			st.steps = append(st.steps, step)
			t.verdict(st, s.AsVerdict(), step)
			return []*state{st}, nil
		default:
			return nil, fmt.Errorf("statement %q is not traced", s)
		}
	}
	st.steps = append(st.steps, step)
	return []*state{st}, nil
}

func numgenMode(e nftrules.Expr) string {
	if e.Inc {
		return "inc"
	}
	return "random"
}

// values returns a match's values as text: its value, or the elements of its set.
func values(s *nftrules.Stmt) []string {
	if s.Set == nil {
		return []string{s.Value.String()}
	}
	out := make([]string, len(s.Set))
	for i, v := range s.Set {
		out[i] = v.String()
	}
	return out
}

func appendNote(note, s string) string {
	if note == "" {
		return s
	}
	return note + "; " + s
}

// verdict applies a verdict, given by the rule of step, to st.
func (t *tracer) verdict(st *state, v nftrules.Verdict, step Step) {
	switch v.Kind {
	case nftrules.Jump:
		st.stack = append(st.stack, frame{chain: t.rs.chains[v.Chain]})
	case nftrules.Goto:
		st.stack[len(st.stack)-1] = frame{chain: t.rs.chains[v.Chain]}
	case nftrules.Return:
		st.stack = st.stack[:len(st.stack)-1]
	case nftrules.Accept:
		st.chainDone = true
	case nftrules.Drop:
		t.drop(st, Drop, step)
	}
}

// drop ends st with verdict v (Drop or Reject), given by the rule of step.
func (t *tracer) drop(st *state, v Verdict, step Step) {
	st.final = true
	st.verdict = v
	st.reason = step.Comment
	if st.reason == "" {
		st.reason = fmt.Sprintf("%q in %s", step.Rule, step.Chain)
	}
	if st.via != "" {
		st.reason += ", via " + st.via
	}
}

// vmap looks up s's expression in its map and applies the verdict. numgen expressions fork one
// state per entry.
func (t *tracer) vmap(st *state, s *nftrules.Stmt, step Step) ([]*state, error) {
	var entries []vmapEntry
	var index map[string]int
	if s.Name != "" {
		entries, index = t.rs.maps[s.Name].entries, t.rs.maps[s.Name].index
	} else {
		for _, e := range s.Elems {
			entries = append(entries, vmapEntry{key: e.Key.String(), verdict: e.Verdict})
		}
	}
	if len(s.Key) == 1 && s.Key[0].Field == nftrules.FieldNumgen {
		pr := s.Key[0]
		if pr.Mod > maxNumgenChoices {
			// The walk below tries every value: mod 4294967295 took an hour (found by FuzzTrace).
			return nil, fmt.Errorf("numgen mod %d: more choices than the tracer follows (%d)", pr.Mod, maxNumgenChoices)
		}
		mode := numgenMode(pr)
		nums := numericKeys(entries)
		type choice struct {
			i uint32
			e vmapEntry
		}
		var choices []choice
		for i := uint32(0); i < pr.Mod; i++ {
			if e, ok := lookupNum(entries, index, nums, uint64(i)); ok {
				choices = append(choices, choice{i, e})
			} // else the kernel would fall through on this value; nftrules fills them all
		}
		if len(choices) == 0 {
			return []*state{st}, nil
		}
		// Every path costs a step, so that forks in series cannot multiply the paths without
		// bound; counted before the states are copied, each with its steps so far.
		if t.steps += len(choices) - 1; t.steps > maxSteps {
			return nil, ErrLoop
		}
		out := make([]*state, 0, len(choices))
		for _, c := range choices {
			b := st.clone()
			b.choice = fmt.Sprintf("numgen %s: %d of %d", mode, c.i, pr.Mod)
			bs := step
			bs.Note = fmt.Sprintf("%s -> %s", b.choice, c.e.verdict)
			b.steps = append(b.steps, bs)
			t.verdict(b, c.e.verdict, step)
			out = append(out, b)
		}
		return out, nil
	}
	key, err := t.eval(st, s.Key)
	if err != nil {
		return nil, err
	}
	e, ok := lookup(entries, index, key)
	if !ok {
		return []*state{st}, nil
	}
	if len(s.Key) == 1 && s.Key[0].Field == nftrules.FieldJhash {
		st.choice = fmt.Sprintf("jhash bucket %s of %d", key, s.Key[0].Mod)
		step.Note = st.choice + " -> " + e.verdict.String()
	} else {
		where := "literal map"
		if s.Name != "" {
			where = "@" + s.Name
		}
		step.Note = fmt.Sprintf("%s: %s -> %s", where, key, e.verdict)
		if e.comment != "" {
			step.Note += " (" + e.comment + ")"
		}
		st.via = fmt.Sprintf("%s %s", where, key)
		if e.comment != "" {
			st.via += " (" + e.comment + ")"
		}
	}
	st.steps = append(st.steps, step)
	t.verdict(st, e.verdict, step)
	return []*state{st}, nil
}

// dnatMap DNATs through a map keyed by numgen random mod N offset K: one state per element whose
// keys fall in [K, K+N-1], its choice the share of the N values it owns.
func (t *tracer) dnatMap(st *state, s *nftrules.Stmt, step Step) ([]*state, error) {
	pr := s.Key[0]
	lo, hi := uint64(pr.Offset), uint64(pr.Offset)+uint64(pr.Mod)-1
	n := 0
	for _, e := range t.rs.maps[s.Name].dnat {
		if uint64(e.hi) >= lo && uint64(e.lo) <= hi {
			n++
		}
	}
	if t.steps += max(n-1, 0); t.steps > maxSteps { // as for a numgen vmap's forks
		return nil, ErrLoop
	}
	var out []*state
	for _, e := range t.rs.maps[s.Name].dnat {
		if uint64(e.hi) < lo || uint64(e.lo) > hi {
			continue
		}
		from, to := max(uint64(e.lo), lo)-lo, min(uint64(e.hi), hi)-lo
		b := st.clone()
		b.choice = fmt.Sprintf("numgen random: %d-%d of %d", from, to, pr.Mod)
		bs := step
		bs.Note = fmt.Sprintf("%s -> @%s: DNAT to %s", b.choice, s.Name, e.to)
		b.dnat = e.to
		b.dst, b.dport = e.to.Addr(), e.to.Port()
		b.steps = append(b.steps, bs)
		b.chainDone = true
		out = append(out, b)
	}
	if len(out) == 0 {
		// No element: the kernel goes on with the next rule.
		return []*state{st}, nil
	}
	return out, nil
}

// numRange is the numbers a map key matches (lookup's matchPart on a single number): [lo, hi], or
// none (ok false).
type numRange struct {
	lo, hi uint64
	ok     bool
}

// numericKeys returns the numbers each entry's key matches, in the entries' order.
func numericKeys(entries []vmapEntry) []numRange {
	out := make([]numRange, len(entries))
	for i, e := range entries {
		lo, hi, isRange := strings.Cut(e.key, "-")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.ParseUint(lo, 0, 64)
		h, err2 := strconv.ParseUint(hi, 0, 64)
		out[i] = numRange{l, h, err1 == nil && err2 == nil && l <= h}
	}
	return out
}

// lookupNum is lookup for the number n without formatting and re-parsing every key: the same
// entry, exact text first, else the first whose numbers hold n.
func lookupNum(entries []vmapEntry, index map[string]int, nums []numRange, n uint64) (vmapEntry, bool) {
	key := strconv.FormatUint(n, 10)
	if i, ok := index[key]; ok {
		return entries[i], true
	}
	for _, e := range entries {
		if e.key == key {
			return e, true
		}
	}
	for i, r := range nums {
		if r.ok && r.lo <= n && n <= r.hi {
			return entries[i], true
		}
	}
	return vmapEntry{}, false
}

// lookup finds key among entries: exactly, else by matching each part (prefixes, ranges).
func lookup(entries []vmapEntry, index map[string]int, key string) (vmapEntry, bool) {
	if i, ok := index[key]; ok {
		return entries[i], true
	}
	for _, e := range entries {
		if e.key == key {
			return e, true
		}
	}
	for _, e := range entries {
		if matchValue(key, e.key) {
			return e, true
		}
	}
	return vmapEntry{}, false
}

func (t *tracer) match(st *state, s *nftrules.Stmt) (bool, error) {
	v, err := t.eval(st, s.Key)
	if err != nil {
		return false, err
	}
	if v == "" { // e.g. "tcp dport" on a UDP packet: the expression does not apply
		return false, nil
	}
	var found bool
	if s.Kind == nftrules.StmtLookup {
		if set, ok := t.rs.sets[s.Name]; ok {
			found = set[v]
			if !found {
				for k := range set {
					if matchValue(v, k) {
						found = true
						break
					}
				}
			}
			if !found && len(s.Key) == 1 {
				if a, err := netip.ParseAddr(v); err == nil && t.affinity[s.Name][a] {
					found = true
				}
			}
		}
	} else {
		for _, want := range values(s) {
			if matchValue(v, want) {
				found = true
				break
			}
		}
	}
	return found != (s.Op == nftrules.OpNeq), nil
}

// eval computes an expression's value on st, the parts of a concatenation joined by " . ". It
// returns "" if the expression does not apply to the packet.
func (t *tracer) eval(st *state, key []nftrules.Expr) (string, error) {
	parts := make([]string, 0, len(key))
	v6 := t.rs.family == knftables.IPv6Family
	for _, p := range key {
		switch p.Field {
		case nftrules.FieldSaddr, nftrules.FieldDaddr:
			if p.IP6 != v6 {
				return "", fmt.Errorf("%s in a %s table", p, t.rs.family)
			}
			a := st.src
			if p.Field == nftrules.FieldDaddr {
				a = st.dst
			}
			parts = append(parts, a.String())
		case nftrules.FieldL4Proto:
			parts = append(parts, st.proto)
		case nftrules.FieldDport:
			if p.Proto != "" && string(p.Proto) != st.proto {
				return "", nil
			}
			parts = append(parts, strconv.Itoa(int(st.dport)))
		case nftrules.FieldFibSaddrType, nftrules.FieldFibDaddrType:
			a := st.src
			if p.Field == nftrules.FieldFibDaddrType {
				a = st.dst
			}
			typ := "unicast"
			if t.isLocal(a) {
				typ = "local"
			}
			parts = append(parts, typ)
		case nftrules.FieldCtState:
			parts = append(parts, "new")
		case nftrules.FieldCtStatus:
			if st.dnat.IsValid() {
				parts = append(parts, "dnat")
			} else {
				parts = append(parts, "none")
			}
		case nftrules.FieldMark:
			m := st.mark
			if p.Mask != 0 {
				m &= p.Mask
			}
			parts = append(parts, strconv.FormatUint(uint64(m), 10))
		case nftrules.FieldJhash:
			if p.IP6 != v6 {
				return "", fmt.Errorf("%s in a %s table", p, t.rs.family)
			}
			key := st.src.AsSlice()
			parts = append(parts, strconv.FormatUint(uint64(bucket(jhash(key, p.Seed), p.Mod)), 10))
		case nftrules.FieldNumgen:
			return "", fmt.Errorf("numgen is only supported with vmap")
		default:
			return "", fmt.Errorf("unsupported expression %q", p)
		}
	}
	return strings.Join(parts, " . "), nil
}

// matchValue compares a value with a wanted value part by part: addresses against prefixes,
// numbers numerically (and against ranges "a-b"), anything else as text.
func matchValue(v, want string) bool {
	if v == want {
		return true
	}
	vp := strings.Split(v, " . ")
	wp := strings.Split(want, " . ")
	if len(vp) != len(wp) {
		return false
	}
	for i := range vp {
		if !matchPart(vp[i], wp[i]) {
			return false
		}
	}
	return true
}

func matchPart(v, want string) bool {
	if v == want {
		return true
	}
	if strings.Contains(want, "/") {
		pfx, err1 := netip.ParsePrefix(want)
		a, err2 := netip.ParseAddr(v)
		return err1 == nil && err2 == nil && pfx.Contains(a)
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return false
	}
	if lo, hi, ok := strings.Cut(want, "-"); ok {
		l, err1 := strconv.ParseUint(lo, 0, 64)
		h, err2 := strconv.ParseUint(hi, 0, 64)
		return err1 == nil && err2 == nil && l <= n && n <= h
	}
	w, err := strconv.ParseUint(want, 0, 64)
	return err == nil && n == w
}
