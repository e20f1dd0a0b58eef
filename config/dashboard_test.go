package manifests_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// registeredMetrics returns the names of the Prometheus metrics ironlb's Go source defines: the Name
// (with Namespace and Subsystem) of every prometheus.{Counter,Gauge,Histogram,Summary}Opts literal and
// the name of every prometheus.NewDesc, plus the _bucket, _sum and _count series of histograms and
// summaries.
func registeredMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				kind := promSel(n.Type)
				if !strings.HasSuffix(kind, "Opts") {
					return true
				}
				parts := map[string]string{}
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok {
							parts[k.Name] = strLit(kv.Value)
						}
					}
				}
				var name []string
				for _, p := range []string{parts["Namespace"], parts["Subsystem"], parts["Name"]} {
					if p != "" {
						name = append(name, p)
					}
				}
				if parts["Name"] != "" {
					add(out, strings.Join(name, "_"), kind == "HistogramOpts" || kind == "SummaryOpts")
				}
			case *ast.CallExpr:
				if promSel(n.Fun) == "NewDesc" && len(n.Args) > 0 {
					if s := strLit(n.Args[0]); s != "" {
						add(out, s, false)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func add(m map[string]bool, name string, series bool) {
	m[name] = true
	if series {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			m[name+s] = true
		}
	}
}

// promSel returns X for an expression prometheus.X, else "".
func promSel(e ast.Expr) string {
	if s, ok := e.(*ast.SelectorExpr); ok {
		if id, ok := s.X.(*ast.Ident); ok && id.Name == "prometheus" {
			return s.Sel.Name
		}
	}
	return ""
}

func strLit(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		s, _ := strconv.Unquote(b.Value)
		return s
	}
	return ""
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promBraces    = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`\$?[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	promKeywords  = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "bool": true, "offset": true, "and": true, "or": true, "unless": true, "inf": true, "nan": true}
	promNumberish = regexp.MustCompile(`^[0-9]`)
)

// metricNames returns the metric names a PromQL expression reads: identifiers that are neither
// functions or aggregations (followed by a parenthesis), nor keywords, label names (in braces and
// grouping clauses), durations, strings or Grafana variables.
func metricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, " ")
	s = promBraces.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if loc[0] > 0 && (promNumberish.MatchString(s[loc[0]-1:loc[0]]) || s[loc[0]-1] == '.') {
			continue // the exponent or tail of a number
		}
		if strings.HasPrefix(tok, "$") || strings.HasSuffix(tok, "(") {
			continue
		}
		if name := strings.TrimSpace(tok); !promKeywords[name] {
			out = append(out, name)
		}
	}
	return out
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (pool) (rate(ironlb_allocator_allocations_total[$__rate_interval]))`, []string{"ironlb_allocator_allocations_total"}},
		{`histogram_quantile(0.99, sum by (le, kind) (rate(x_bucket{kind="full", a=~"b.*"}[5m])))`, []string{"x_bucket"}},
		{`100 * sum by (pool) (a) / on (pool) group_left (family) sum without (instance) (b) > bool 1e3`, []string{"a", "b"}},
		{`time() - max by (node) (c) offset 5m`, []string{"c"}},
		{`min(d) or vector(0)`, []string{"d"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, metricNames(tt.expr)); diff != "" {
			t.Errorf("metricNames(%q) (-want +got):\n%s", tt.expr, diff)
		}
	}
}

// TestDashboardMetricsExist checks that every PromQL expression of the Grafana dashboard reads only
// metrics ironlb's code defines, and that the dashboard covers each role.
func TestDashboardMetricsExist(t *testing.T) {
	b, err := os.ReadFile("grafana/ironlb-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Type    string
		Targets []struct{ Expr string }
		Panels  []json.RawMessage
	}
	var d struct{ Panels []panel }
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	known := registeredMetrics(t, "../internal")
	used := map[string]bool{}
	exprs := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: %q reads no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				used[n] = true
				if !known[n] {
					t.Errorf("panel %q: %q reads %s, which no Go source defines", p.Title, tg.Expr, n)
				}
			}
		}
	}
	if exprs == 0 {
		t.Fatal("no PromQL expression in the dashboard")
	}
	for _, want := range []string{
		"metallb_allocator_addresses_in_use_total", "ironlb_allocator_allocations_total", // allocations and pool use
		"ironlb_speaker_announced_addresses", "ironlb_speaker_takeovers_total", "ironlb_speaker_detection_seconds_bucket",
		"ironlb_speaker_bgp_session_up", "ironlb_speaker_bfd_session_up",
		"ironlb_proxy_sync_duration_seconds_bucket", "ironlb_proxy_sync_operations", "ironlb_proxy_service_chains",
	} {
		if !used[want] {
			t.Errorf("the dashboard charts no %s", want)
		}
	}
	if !slices.Contains(keysOf(known), "ironlb_proxy_sync_duration_seconds_bucket") {
		t.Errorf("histogram series not derived; found %v", keysOf(known))
	}
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
