// Package benchcfg makes the lab's cluster hold exactly the configuration a side-by-side benchmark
// measures. Benchmarks run one after another in one lab, with ironlb's speaker or MetalLB's: a
// BGPPeer left with a bfdProfile by `lab bench-bgp --bfd 50ms` made MetalLB's native speaker refuse
// its whole configuration in the next run, which then waited minutes for a route that never came.
// So each benchmark names every object it wants; Plan turns that and what the cluster holds into
// steps that replace each wanted configuration object whole (no field of an earlier version
// survives) and delete every object of the owned kinds it does not want; Apply runs them with
// kubectl. Refusal reads why the speaker under test refuses the configuration, in its own words, so
// that the benchmark fails at once instead of timing out.
//
// Plan and Refusal are pure; Apply and Watch are the kubectl side.
package benchcfg

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Namespace is where the configuration lives.
const Namespace = "metallb-system"

// Ref names an object: Resource as kubectl's `-o name` writes it (kind.group, lowercase).
type Ref struct {
	Resource, Namespace, Name string
}

func (r Ref) String() string { return r.Resource + "/" + r.Name }

// Object is an object a benchmark wants, with its manifest (one YAML document).
type Object struct {
	Ref
	Manifest string
	// Replace writes the whole object (create, or replace): for configuration objects, so that a
	// field an earlier version set is gone. Otherwise it is applied (kubectl apply): for workloads,
	// whose server-set fields (a Service's clusterIP) a replace would clear.
	Replace bool
}

// Owned are the configuration kinds a benchmark owns whole in Namespace, in the order their
// unwanted objects are deleted: peers and advertisements before the BFD profiles and communities
// they may name (a BFDProfile in use may not be deleted).
var Owned = []string{"bgppeer.metallb.io", "bgpadvertisement.metallb.io", "bfdprofile.metallb.io", "community.metallb.io"}

// Op is a step's operation.
type Op string

const (
	Put    Op = "put"    // write Object (create/replace or apply, see Object.Replace)
	Delete Op = "delete" // delete Object.Ref
)

// Step is one thing Apply does.
type Step struct {
	Op     Op
	Object Object
}

// Plan returns the steps that leave the cluster, which holds have (the objects of the Owned kinds in
// Namespace), holding want: every wanted object written, in want's order (put a BFDProfile before
// the BGPPeer naming it), then every object of an Owned kind that is not wanted deleted, in Owned's
// order and by name. Objects of other kinds that are not wanted are left alone (the lab's pools,
// advertisements and workloads).
func Plan(want []Object, have []Ref) []Step {
	var steps []Step
	wanted := map[Ref]bool{}
	for _, o := range want {
		wanted[o.Ref] = true
		steps = append(steps, Step{Op: Put, Object: o})
	}
	var del []Ref
	for _, r := range have {
		if !wanted[r] && r.Namespace == Namespace && slices.Contains(Owned, r.Resource) {
			del = append(del, r)
		}
	}
	slices.SortFunc(del, func(a, b Ref) int {
		return cmp.Or(cmp.Compare(slices.Index(Owned, a.Resource), slices.Index(Owned, b.Resource)), cmp.Compare(a.Name, b.Name))
	})
	del = slices.Compact(del)
	for _, r := range del {
		steps = append(steps, Step{Op: Delete, Object: Object{Ref: r}})
	}
	return steps
}

// ParseNames parses `kubectl get ... -n ns -o name` output ("bgppeer.metallb.io/router" per line,
// and kubectl's "No resources found" when there is none) into Refs in ns.
func ParseNames(out, ns string) ([]Ref, error) {
	var refs []Ref
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "No resources found") { // kubectl's stderr, when none
			continue
		}
		res, name, ok := strings.Cut(l, "/")
		if !ok || res == "" || name == "" {
			return nil, fmt.Errorf("kubectl -o name: unexpected line %q", l)
		}
		refs = append(refs, Ref{Resource: res, Namespace: ns, Name: name})
	}
	return refs, sc.Err()
}

// Refusal says why the speaker under test refuses the configuration, from what it reports:
//   - ConfigurationStates (`kubectl get configurationstates -o json`) of speakers (label
//     metallb.io/component-type=speaker, as MetalLB names them speaker-<node>) whose result is
//     Invalid: their errorSummary;
//   - the speakers' log lines since the configuration was applied: MetalLB's ConfigReconciler
//     errors ("failed to parse the configuration", with the error, e.g. "peer 172.18.255.254 has
//     bfd-profile set on native bgp mode"), and ironlb's "invalid bgp configuration" warnings.
//
// It returns "" and false when neither says anything.
func Refusal(statesJSON []byte, logs string) (string, bool) {
	var msgs []string
	var list struct {
		Items []struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Status struct {
				Result       string `json:"result"`
				ErrorSummary string `json:"errorSummary"`
			} `json:"status"`
		} `json:"items"`
	}
	if len(statesJSON) > 0 && json.Unmarshal(statesJSON, &list) == nil {
		for _, it := range list.Items {
			if it.Metadata.Labels["metallb.io/component-type"] == "speaker" && it.Status.Result == "Invalid" {
				msgs = append(msgs, fmt.Sprintf("ConfigurationState %s: %s", it.Metadata.Name, it.Status.ErrorSummary))
			}
		}
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		var m string
		switch {
		case strings.Contains(l, `"level":"error"`) && strings.Contains(l, "ConfigReconciler"):
			m = metallbError(l)
		case strings.Contains(l, "invalid bgp configuration"):
			m = strings.TrimSpace(l)
		}
		if m != "" && !seen[m] {
			seen[m] = true
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 {
		return "", false
	}
	return strings.Join(msgs, "\n"), true
}

// metallbError returns the error of one of MetalLB's JSON log lines (after kubectl's --prefix, if
// any), with the pod prefix.
func metallbError(line string) string {
	prefix, js := "", line
	if i := strings.Index(line, "{"); i > 0 {
		prefix, js = strings.TrimSpace(line[:i])+" ", line[i:]
	}
	var m map[string]any
	if json.Unmarshal([]byte(js), &m) != nil {
		return strings.TrimSpace(line)
	}
	e, _ := m["error"].(string)
	if e == "" {
		e, _ = m["msg"].(string)
	}
	return prefix + e
}

// UDPPort is where Workload's pods answer UDP (whoami's --udp-port).
const UDPPort = 8053

// Workload is the Deployment every side-by-side benchmark sends its traffic to: two whoami pods, one
// on myk8s-worker and one on myk8s-worker2 (never on the node the benchmarks cut). There is one
// definition for all of them because the benchmarks run one after another in one lab: with two
// versions, `lab bench-failover` after `lab bench-bgp` rolled the Deployment from one template to
// the other, and the old pods' required anti-affinity left the surge pod no node, so the rollout
// never finished. The pods also answer UDP on UDPPort (whoami's UDP mode, set through an environment
// variable that the real traefik/whoami ignores), for `lab bench-connections`' UDP flows.
var Workload = Object{
	Ref: Ref{Resource: "deployment.apps", Namespace: "default", Name: "bench-web"},
	Manifest: `apiVersion: apps/v1
kind: Deployment
metadata: {name: bench-web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: bench-web}}
  template:
    metadata: {labels: {app: bench-web}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: kubernetes.io/hostname, operator: In, values: [myk8s-worker, myk8s-worker2]}
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {labelSelector: {matchLabels: {app: bench-web}}, topologyKey: kubernetes.io/hostname}
      containers:
      - name: whoami
        image: traefik/whoami
        env: [{name: WHOAMI_UDP_PORT_NUMBER, value: "8053"}]
        ports: [{containerPort: 80, protocol: TCP}, {containerPort: 8053, protocol: UDP}]
`,
}
