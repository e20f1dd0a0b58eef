package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Issue 8's acceptance: the lab's Prometheus (Debian's package, lab up --prometheus) scrapes every role
// as config/prometheus's PodMonitors say, and every PromQL query of config/grafana's dashboard has data
// for its panel. It runs in the ironlb-proxy lab after the Service suites, which leave allocations,
// proxy syncs and a node's death behind; BGP with BFD and a failed allocation are added here.

// dashboardWindow replaces Grafana's $__rate_interval: wide enough to cover the suites run before.
const dashboardWindow = "30m"

type panelQuery struct {
	Title string
	Exprs []string
}

func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b, err := os.ReadFile("../../config/grafana/ironlb-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []panelQuery
	for _, p := range d.Panels {
		q := panelQuery{Title: p.Title}
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				q.Exprs = append(q.Exprs, strings.ReplaceAll(tg.Expr, "$__rate_interval", dashboardWindow))
			}
		}
		if len(q.Exprs) > 0 {
			out = append(out, q)
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d panels with queries in the dashboard", len(out))
	}
	return out
}

// promSamples evaluates expr on the lab's Prometheus and returns its samples' values (vector or scalar).
func promSamples(expr string) ([]float64, error) {
	out, err := runErr(ironlb, "lab", "promql", expr)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	var r struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	var vals []float64
	parse := func(v [2]any) error {
		s, _ := v[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("value %v: %w", v, err)
		}
		vals = append(vals, f)
		return nil
	}
	switch r.ResultType {
	case "vector":
		var vec []struct {
			Value [2]any `json:"value"`
		}
		if err := json.Unmarshal(r.Result, &vec); err != nil {
			return nil, err
		}
		for _, s := range vec {
			if err := parse(s.Value); err != nil {
				return nil, err
			}
		}
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(r.Result, &v); err != nil {
			return nil, err
		}
		if err := parse(v); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("result type %q", r.ResultType)
	}
	return vals, nil
}

const dashboardConfig = `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: dash-tiny, namespace: metallb-system}
spec:
  addresses: [172.30.9.1/32]
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: dash-tiny, namespace: metallb-system}
spec:
  ipAddressPools: [dash-tiny]
---
apiVersion: v1
kind: Service
metadata: {name: dash-1, annotations: {metallb.io/address-pool: dash-tiny}}
spec: {type: LoadBalancer, selector: {app: webpod}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: dash-2, annotations: {metallb.io/address-pool: dash-tiny}}
spec: {type: LoadBalancer, selector: {app: webpod}, ports: [{port: 80}]}
`

func dashboardSuite(t *testing.T) {
	// Every role is scraped: a target per controller replica and one speaker and proxy per node. The
	// PodMonitors' jobLabel (app) makes every role's job "ironlb", as MetalLB's chart makes "metallb"
	// (its alerting rules select job=~"ironlb.*"); the container label tells the roles apart.
	for role, want := range map[string]int{"controller": 1, "speaker": len(labNodes), "proxy": len(labNodes)} {
		expr := fmt.Sprintf(`sum(up{job="ironlb",container=%q})`, role)
		eventually(t, 60*time.Second, "Prometheus scrapes ironlb-"+role, func() error {
			v, err := promSamples(expr)
			if err != nil {
				return err
			}
			if len(v) != 1 || v[0] < float64(want) {
				return fmt.Errorf("%s = %v, want at least %d targets up", expr, v, want)
			}
			return nil
		})
	}
	// BGP with BFD to the router, and a pool of one address that two Services ask for.
	setupBGP(t)
	applyBGPService(t, "dash-bgp", "172.30.1.9", "")
	if out, err := applyStdin(dashboardConfig); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = runStdin(dashboardConfig, ironlb, "lab", "kubectl", "delete", "--ignore-not-found", "-f", "-")
	})

	start := time.Now()
	var missing []string
	for _, p := range dashboardQueries(t) {
		var last string
		ok := false
		for deadline := time.Now().Add(90 * time.Second); !ok && time.Now().Before(deadline); {
			var got []string
			for _, e := range p.Exprs {
				vals, err := promSamples(e)
				if err != nil {
					t.Fatalf("panel %q: %s: %v", p.Title, e, err)
				}
				for _, v := range vals {
					if !math.IsNaN(v) {
						ok = true
					}
				}
				got = append(got, fmt.Sprintf("%s => %v", e, vals))
			}
			last = strings.Join(got, "; ")
			if !ok {
				time.Sleep(3 * time.Second)
			}
		}
		if ok {
			t.Logf("panel %-28q has data: %s", p.Title, last)
		} else {
			missing = append(missing, fmt.Sprintf("%q (%s)", p.Title, last))
		}
	}
	if len(missing) > 0 {
		t.Errorf("panels without data after %.0fs:\n%s", time.Since(start).Seconds(), strings.Join(missing, "\n"))
	}
}
