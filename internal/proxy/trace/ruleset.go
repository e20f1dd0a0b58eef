package trace

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"sigs.k8s.io/knftables"
)

// Ruleset is one nftables table prepared for tracing. It is read-only after construction and
// safe for concurrent use.
type Ruleset struct {
	family knftables.Family
	chains map[string]*chainDef
	// hooks lists each hook's base chains in priority order.
	hooks map[knftables.BaseChainHook][]*chainDef
	sets  map[string]map[string]bool // set name -> elements (joined keys)
	maps  map[string]*mapDef
}

// vmapEntry is an element of a verdict map.
type vmapEntry struct {
	key     string
	verdict nftrules.Verdict
	comment string
}

// mapDef is a map's elements, indexed by key: verdicts in a verdict map; in a DNAT map (data),
// dnat holds the values ("address . port") by key range ("lo-hi").
type mapDef struct {
	entries []vmapEntry
	index   map[string]int
	data    bool
	dnat    []dnatEntry // data maps: entries by key range, sorted
}

type dnatEntry struct {
	lo, hi uint32
	to     netip.AddrPort
}

type chainDef struct {
	name     string
	hook     knftables.BaseChainHook // "" for a regular chain
	priority int
	rules    []*parsedRule
}

type parsedRule struct {
	text    string
	comment string
	stmts   []nftrules.Stmt
}

// FromFake prepares the table of fake, a knftables Fake for one table of family, for tracing.
// It fails if the fake has no table, or a rule uses syntax the tracer does not understand or
// refers to a chain, set or map that does not exist.
func FromFake(family knftables.Family, fake *knftables.Fake) (*Ruleset, error) {
	fake.RLock()
	defer fake.RUnlock()
	if fake.Table == nil {
		return nil, fmt.Errorf("tracing: fake has no table")
	}
	return fromTable(family, fake.Table)
}

// FromDump parses a knftables Fake dump (as Fake.Dump writes it, or a transaction's text) of
// table in family and prepares it for tracing.
func FromDump(family knftables.Family, table, dump string) (*Ruleset, error) {
	fake := knftables.NewFake(family, table)
	if err := fake.ParseDump(dump); err != nil {
		return nil, fmt.Errorf("tracing: parsing dump: %w", err)
	}
	return FromFake(family, fake)
}

func fromTable(family knftables.Family, t *knftables.FakeTable) (*Ruleset, error) {
	if family != knftables.IPv4Family && family != knftables.IPv6Family {
		return nil, fmt.Errorf("tracing: family %q is neither ip nor ip6", family)
	}
	rs := &Ruleset{
		family: family,
		chains: make(map[string]*chainDef, len(t.Chains)),
		hooks:  map[knftables.BaseChainHook][]*chainDef{},
		sets:   make(map[string]map[string]bool, len(t.Sets)),
		maps:   make(map[string]*mapDef, len(t.Maps)),
	}
	for name, s := range t.Sets {
		els := make(map[string]bool, len(s.Elements))
		for _, e := range s.Elements {
			els[joinKey(e.Key)] = true
		}
		rs.sets[name] = els
	}
	for name, m := range t.Maps {
		md := &mapDef{entries: make([]vmapEntry, 0, len(m.Elements)), index: make(map[string]int, len(m.Elements))}
		md.data = strings.HasSuffix(m.Type, ": "+addrType(family)+" . inet_service") ||
			strings.Contains(m.TypeOf, ": ip") && strings.HasSuffix(m.TypeOf, " dport")
		for _, e := range m.Elements {
			ve := vmapEntry{key: joinKey(e.Key)}
			if e.Comment != nil {
				ve.comment = *e.Comment
			}
			value := strings.Join(e.Value, " . ")
			var err error
			if md.data {
				var de dnatEntry
				if de, err = parseDNATEntry(family, ve.key, value); err == nil {
					md.dnat = append(md.dnat, de)
				}
			} else {
				ve.verdict, err = nftrules.ParseVerdict(value)
			}
			if err != nil {
				return nil, fmt.Errorf("tracing: map %s element %s: %w", name, ve.key, err)
			}
			md.index[ve.key] = len(md.entries)
			md.entries = append(md.entries, ve)
		}
		slices.SortFunc(md.dnat, func(a, b dnatEntry) int { return cmp.Compare(a.lo, b.lo) })
		for i := 1; i < len(md.dnat); i++ {
			if md.dnat[i].lo <= md.dnat[i-1].hi {
				return nil, fmt.Errorf("tracing: map %s: intervals %d-%d and %d-%d overlap", name,
					md.dnat[i-1].lo, md.dnat[i-1].hi, md.dnat[i].lo, md.dnat[i].hi)
			}
		}
		rs.maps[name] = md
	}
	for name, c := range t.Chains {
		cd := &chainDef{name: name}
		if c.Hook != nil {
			cd.hook = *c.Hook
			if c.Priority != nil {
				p, err := knftables.ParsePriority(rs.family, string(*c.Priority))
				if err != nil {
					return nil, fmt.Errorf("tracing: chain %s: %w", name, err)
				}
				cd.priority = p
			}
			rs.hooks[cd.hook] = append(rs.hooks[cd.hook], cd)
		}
		for _, r := range c.Rules {
			stmts, err := nftrules.ParseRule(r.Rule)
			if err != nil {
				return nil, fmt.Errorf("tracing: chain %s: rule %q: %w", name, r.Rule, err)
			}
			pr := &parsedRule{text: r.Rule, stmts: stmts}
			if r.Comment != nil {
				pr.comment = *r.Comment
			}
			cd.rules = append(cd.rules, pr)
		}
		rs.chains[name] = cd
	}
	for h := range rs.hooks {
		slices.SortStableFunc(rs.hooks[h], func(a, b *chainDef) int {
			if a.priority != b.priority {
				return a.priority - b.priority
			}
			return strings.Compare(a.name, b.name)
		})
	}
	// Every jump, goto and set reference must resolve.
	for _, c := range rs.chains {
		for _, r := range c.rules {
			for _, s := range r.stmts {
				if err := rs.check(&s); err != nil {
					return nil, fmt.Errorf("tracing: chain %s: rule %q: %w", c.name, r.text, err)
				}
			}
		}
	}
	return rs, nil
}

func (rs *Ruleset) check(s *nftrules.Stmt) error {
	switch s.Kind {
	case nftrules.StmtVerdict:
		return rs.checkVerdict(s.AsVerdict())
	case nftrules.StmtLookup, nftrules.StmtUpdate:
		if _, ok := rs.sets[s.Name]; !ok {
			return fmt.Errorf("no set %q", s.Name)
		}
	case nftrules.StmtDNATMap:
		if m, ok := rs.maps[s.Name]; !ok || !m.data {
			return fmt.Errorf("no DNAT map %q", s.Name)
		}
	case nftrules.StmtVmap:
		if s.Name == "" {
			for _, e := range s.Elems {
				if err := rs.checkVerdict(e.Verdict); err != nil {
					return err
				}
			}
			return nil
		}
		m, ok := rs.maps[s.Name]
		if !ok || m.data {
			return fmt.Errorf("no verdict map %q", s.Name)
		}
		for _, e := range m.entries {
			if err := rs.checkVerdict(e.verdict); err != nil {
				return err
			}
		}
	}
	return nil
}

func (rs *Ruleset) checkVerdict(v nftrules.Verdict) error {
	if (v.Kind == nftrules.Jump || v.Kind == nftrules.Goto) && rs.chains[v.Chain] == nil {
		return fmt.Errorf("no chain %q", v.Chain)
	}
	return nil
}

// joinKey joins a map or set key the way the tracer's expressions produce values: the parts of a
// concatenation separated by " . ". A key that is already joined is unchanged.
func joinKey(parts []string) string { return strings.Join(parts, " . ") }

func addrType(family knftables.Family) string {
	if family == knftables.IPv6Family {
		return "ipv6_addr"
	}
	return "ipv4_addr"
}

// parseDNATEntry parses a DNAT map element: key "lo-hi" (or one number), value "address . port".
func parseDNATEntry(family knftables.Family, key, value string) (dnatEntry, error) {
	var de dnatEntry
	lo, hi, isRange := strings.Cut(key, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 0, 32)
	h, err2 := strconv.ParseUint(hi, 0, 32)
	if err1 != nil || err2 != nil || l > h {
		return de, fmt.Errorf("key %q is not a range of numbers", key)
	}
	addr, port, ok := strings.Cut(value, " . ")
	a, err := netip.ParseAddr(addr)
	if !ok || err != nil || a.Is6() != (family == knftables.IPv6Family) {
		return de, fmt.Errorf("value %q is not an %s address and a port", value, family)
	}
	pt, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return de, fmt.Errorf("value %q: port: %w", value, err)
	}
	return dnatEntry{lo: uint32(l), hi: uint32(h), to: netip.AddrPortFrom(a, uint16(pt))}, nil
}
