package nftrules_test

import (
	"fmt"
	"testing"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/ironlb/ironlb/internal/proxy/nftrules/nftrulestest"
	"sigs.k8s.io/knftables"
)

// ruleCollector is a RuleWriter that keeps the rules and drops everything else.
type ruleCollector struct{ rules []*nftrules.Rule }

func (c *ruleCollector) Add(knftables.Object)     {}
func (c *ruleCollector) Flush(knftables.Object)   {}
func (c *ruleCollector) Delete(knftables.Object)  {}
func (c *ruleCollector) AddRule(r *nftrules.Rule) { c.rules = append(c.rules, r) }

// builtRules returns every rule the Builder writes for random models of both families, in
// every configuration that changes the rules' shapes.
func builtRules(t testing.TB) []*nftrules.Rule {
	var out []*nftrules.Rule
	for _, cfg := range []nftrules.Config{
		{Family: knftables.IPv4Family, MaglevTableSize: 13},
		{Family: knftables.IPv6Family, MaglevTableSize: 13},
		{Family: knftables.IPv4Family, MasqueradeAll: true, MasqueradeMark: 1},
	} {
		b := builder(t, cfg)
		for seed := range uint64(10) {
			m := nftrulestest.NewGen(seed).Model(20)
			if seed%2 == 1 {
				m.Node.NodePortAddresses = nil
			}
			c := &ruleCollector{}
			b.Full(c, m, nftrules.Existing{}, nil)
			out = append(out, c.rules...)
		}
	}
	return out
}

// TestRuleRoundTrip: every rule the Builder writes parses back into its statements
// (parse(render(ast)) == ast), and the text rendered from those is the text parsed
// (render(parse(x)) == x).
func TestRuleRoundTrip(t *testing.T) {
	shapes := map[nftrules.StmtKind]bool{}
	for _, r := range builtRules(t) {
		text := r.String()
		got, err := nftrules.ParseRule(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		back := &nftrules.Rule{Chain: r.Chain, Stmts: got, Comment: r.Comment}
		if !back.Equal(r) {
			t.Fatalf("%q: parsed as\n%s\nwant\n%s", text, dumpStmts(got), dumpStmts(r.Stmts))
		}
		if s := back.String(); s != text {
			t.Fatalf("%q parses into statements rendered as %q", text, s)
		}
		for _, s := range got {
			shapes[s.Kind] = true
		}
	}
	for _, k := range []nftrules.StmtKind{nftrules.StmtMatch, nftrules.StmtLookup, nftrules.StmtVmap, nftrules.StmtVerdict,
		nftrules.StmtReject, nftrules.StmtMarkSet, nftrules.StmtMasquerade, nftrules.StmtUpdate, nftrules.StmtDNAT, nftrules.StmtDNATMap} {
		if !shapes[k] {
			t.Errorf("no rule with statement kind %d: the models do not cover it", k)
		}
	}
}

// TestParseRuleRejects: text outside the grammar is an error, never a guess.
func TestParseRuleRejects(t *testing.T) {
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
		"ip saddr != @",
		"ip daddr { 1.2.3.4 ,",
	} {
		if s, err := nftrules.ParseRule(rule); err == nil {
			t.Errorf("%q: parsed as %+v, want an error", rule, s)
		}
	}
}

// TestParseRuleRejectsDSR: the DSR table's statements (dsr.go) render to nft's text, which
// ParseRule, the tracer's reader of the main table, does not read: an error, never a guess.
func TestParseRuleRejectsDSR(t *testing.T) {
	m, cfg := dsrModel()
	cfg.NodeMACs = map[string][]nftrules.EtherAddr{"node-b": {{2, 0, 0, 0, 0, 3}}}
	plan := nftrules.PlanDSR(m, cfg)
	w := &ruleRecorder{}
	nftrules.WriteDSR(w, &plan)
	parsed := 0
	for _, r := range w.rules {
		if _, err := nftrules.ParseRule(r.String()); err == nil {
			parsed++ // a shape of the main table's grammar (ip saddr @set return, vmaps by tuple)
		}
	}
	for _, rule := range []string{
		"notrack",
		"ct mark set 0x1",
		"meta mark set ct mark map @m return",
		`iifname "x" return`,
		"ether saddr @peer-macs return",
		"tcp flags & (syn | ack) == syn ip daddr . meta l4proto . th dport vmap @m",
		"jhash " + nftrules.FlowKey + " mod 3 seed 0x1 vmap @m",
		"tcp option maxseg size set rt mtu",
		"ct status & (confirmed | dnat) == confirmed",
		"ct mark 0",
	} {
		if s, err := nftrules.ParseRule(rule); err == nil {
			t.Errorf("%q: parsed as %+v, want an error", rule, s)
		}
	}
	if len(w.rules) == 0 || parsed == len(w.rules) {
		t.Errorf("%d of the DSR table's %d rules parse", parsed, len(w.rules))
	}
}

// ruleRecorder is a RuleWriter that keeps the rules.
type ruleRecorder struct{ rules []*nftrules.Rule }

func (r *ruleRecorder) Add(knftables.Object)        {}
func (r *ruleRecorder) Flush(knftables.Object)      {}
func (r *ruleRecorder) Delete(knftables.Object)     {}
func (r *ruleRecorder) AddRule(rule *nftrules.Rule) { r.rules = append(r.rules, rule) }

// FuzzParseRule: parsing never panics, and what parses renders to text that parses into the
// same statements and renders to itself (parse(render(ast)) == ast, render(parse(x)) == x for
// rendered x). The corpus starts with every rule the Builder writes.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"ip daddr . meta l4proto . th dport vmap @m",
		"jhash ip saddr mod 13 seed 0x1 vmap { 0 : goto a , 1 : goto b }",
		"ip saddr != { 10.0.0.0/8 , 1.2.3.4 } drop",
		"update @s { ip6 saddr }",
		"meta l4proto tcp dnat to [fd00::1]:80",
		"mark and 0x4000 == 0 return",
		"meta mark 3 counter accept",
		"masquerade random persistent",
	} {
		f.Add(s)
	}
	seen := map[string]bool{}
	for _, r := range builtRules(f) {
		if s := r.String(); !seen[s] {
			seen[s] = true
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, text string) {
		stmts, err := nftrules.ParseRule(text)
		if err != nil {
			return
		}
		r := &nftrules.Rule{Stmts: stmts}
		rendered := r.String()
		again, err := nftrules.ParseRule(rendered)
		if err != nil {
			t.Fatalf("%q parsed, but its rendering %q does not: %v", text, rendered, err)
		}
		if !r.Equal(&nftrules.Rule{Stmts: again}) {
			t.Fatalf("%q -> %q parses differently:\n%s\nthen\n%s", text, rendered, dumpStmts(stmts), dumpStmts(again))
		}
		if back := (&nftrules.Rule{Stmts: again}).String(); back != rendered {
			t.Fatalf("%q renders as %q, which renders as %q", text, rendered, back)
		}
	})
}

func dumpStmts(stmts []nftrules.Stmt) string {
	var out string
	for _, s := range stmts {
		out += fmt.Sprintf("  %+v\n", s)
	}
	return out
}
