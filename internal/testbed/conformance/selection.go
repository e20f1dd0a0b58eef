// Package conformance runs the upstream Kubernetes [sig-network] e2e suite (e2e.test, built by
// hack/e2e-binaries.sh) against the lab and reports it: a progress line per test while it runs, a table
// of passed / failed / skipped tests, the closing line "N passed, N failed", and a side-by-side table of
// two runs (kube-proxy and ironlb's proxy) with the regressions marked.
//
// The pure parts (the selection, the e2e.test command line, reading the suite's JUnit file and progress
// lines, the tables) are in selection.go and report.go and unit-tested; run.go is the adapter that
// starts e2e.test in the lab's client namespace.
package conformance

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultFocus selects issue 16's scope of the [sig-network] suite: Services (all of it), Networking's
// Granular Checks (Pods and Services), the basic DNS tests, Conntrack, HostPort, EndpointSlice, topology
// hints and traffic distribution, and the LoadBalancers tests.
const DefaultFocus = `\[sig-network\] (Services |Networking Granular Checks|DNS should|Conntrack |HostPort |EndpointSlice |Topology Hints |Traffic Distribution |LoadBalancers )`

// SkipReasons are the tests the default selection leaves out, each with its reason (docs/conformance.md
// lists them). DefaultSkip is their patterns joined.
var SkipReasons = []struct{ Pattern, Reason string }{
	{`SCTP`, "SCTP: the lab machine's kernel boots without modules, so there is no sctp module"},
	{`\[Disruptive\]`, "[Disruptive]: reboots or restarts nodes over SSH; the lab's nodes have no SSH"},
	{`\[Flaky\]`, "[Flaky]: upstream marks them flaky and CI skips them too"},
	{`\[Feature:NetworkingPerformance\]`, "iperf2 throughput measurements, not a pass/fail check (and no iperf on this machine)"},
	{`\[Feature:PerformanceDNS\]`, "DNS load test, not a pass/fail check"},
	{`\[Feature:IPv6DualStack\]`, "dual-stack tests: run them against `lab up --ip-family=dual` with --focus"},
	{`LoadBalancers .*should handle load balancer cleanup finalizer for service`, "the finalizer service.kubernetes.io/load-balancer-cleanup is a cloud provider's service controller's (cloud-controller-manager's): MetalLB does not add it and neither does ironlb (MetalLB's behaviour unchanged; a finalizer whose controller is uninstalled blocks every LoadBalancer Service's deletion); the test waits for it until the suite's timeout (869 s here on either proxy)"},
	{`LoadBalancers .*should be able to switch session affinity for LoadBalancer service with Local traffic policy`, "layer 2 has one announcing node per address, and externalTrafficPolicy Local sends what it receives to that node's own pods only: with affinity off the test still sees one pod and fails (\"Affinity shouldn't hold but did\", 740 s on either proxy); it needs a load balancer that spreads over nodes (a cloud's, or BGP ECMP)"},
	{`Services should be rejected for evicted pods`, "the lab's node agent has no eviction manager: the Pod that outgrows its ephemeral-storage limit is never evicted (the test waits 5 minutes for it, then fails on either proxy)"},
}

// DefaultSkip is the default --skip: every pattern of SkipReasons.
func DefaultSkip() string {
	var p []string
	for _, s := range SkipReasons {
		p = append(p, s.Pattern)
	}
	return strings.Join(p, "|")
}

// LongPattern matches the tests of the default scope that alone take as long as the rest of it at
// DefaultProcs: the two rolling-update tests roll a DaemonSet of pods with a 60 s shutdown delay five
// times over every schedulable node, one node at a time (5 x 3 x 60 s = 15 min in the lab), and the
// source-ranges test waits out its firewall checks (13 min here). Run starts them at once in a lane of
// their own, beside the others, instead of wherever the queue puts them.
const LongPattern = `should not have connectivity disruption during rolling update with externalTrafficPolicy|should only allow access from service loadbalancer source ranges`

// Lanes splits a run of the tests selected (Select's result, by s) into the long lane, the selected
// tests long matches, each focused by its exact name, and the main lane, s without them; n is the
// long lane's number of tests. long is nil
// (no split) when no selected test is long, or when every one is.
func Lanes(s Selection, selected []Result, long *regexp.Regexp) (main, longLane *Selection, n int) {
	var names []string
	for _, r := range selected {
		if long.MatchString(r.Name) {
			names = append(names, regexp.QuoteMeta(r.Name))
		}
	}
	if len(names) == 0 || len(names) == len(selected) {
		return &s, nil, 0
	}
	// Ginkgo matches --focus and --skip against the suite's description, a space and the test's full
	// text, so a name is anchored at its end and after a space.
	exact := "(^| )(" + strings.Join(names, "|") + ")$"
	skip := exact
	if s.Skip != "" {
		skip = s.Skip + "|" + exact
	}
	return &Selection{Focus: s.Focus, Skip: skip}, &Selection{Focus: exact, Skip: s.Skip}, len(names)
}

// Selection is which tests run: ginkgo's --focus and --skip regular expressions (RE2, as ginkgo reads
// them) over the tests' full names.
type Selection struct {
	Focus, Skip string
}

// Validate reports a focus or skip that is not a regular expression.
func (s Selection) Validate() error {
	if strings.TrimSpace(s.Focus) == "" {
		return fmt.Errorf("--focus is empty: it would select the whole suite (give a pattern, or leave the default scope)")
	}
	if _, err := regexp.Compile(s.Focus); err != nil {
		return fmt.Errorf("--focus %q: %w", s.Focus, err)
	}
	if _, err := regexp.Compile(s.Skip); err != nil {
		return fmt.Errorf("--skip %q: %w", s.Skip, err)
	}
	return nil
}

// DefaultProcs is `lab conformance`'s default --procs: the tests mostly wait (for pods, endpoints,
// timeouts), so more processes than this machine's two cores pay. 12 is the one value measured so far
// (docs/conformance.md: 110 of the scope's 120 tests in 15 minutes on kube-proxy, at load 10-14).
const DefaultProcs = 12

// Invocation is one run of e2e.test: on its own (Procs 0 or 1, or a dry run), or under the ginkgo CLI
// with Procs parallel processes, as upstream's CI runs the suite (`ginkgo --procs=N e2e.test -- ...`).
type Invocation struct {
	Binary     string // e2e.test
	Ginkgo     string // the ginkgo CLI (hack/ginkgo-binary.sh); used when Procs > 1
	Procs      int    // parallel test processes; 0 or 1 runs e2e.test alone, serially
	Kubeconfig string
	Kubectl    string // the kubectl the tests run (kubectl exec, ...)
	JUnit      string // where ginkgo writes its JUnit report
	OutputDir  string // the suite's --e2e-output-dir
	Timeout    time.Duration
	DryRun     bool // list the selected tests without running them (no cluster needed)
	Selection
}

// Parallel says whether inv runs under the ginkgo CLI.
func (inv Invocation) Parallel() bool { return inv.Procs > 1 && !inv.DryRun }

// Argv is the command line for inv: e2e.test's, or (Parallel) the ginkgo CLI's.
//
// Under the CLI, ginkgo's own settings (focus, skip, report, timeout) are the CLI's flags, which it
// hands to each process, and the suite's flags follow "--". The CLI has the processes' reports merged
// into one JUnit file: it writes each suite's report into --output-dir, named after the suite, then
// merges them into --output-dir/<--junit-report> (a name, not a path: the CLI joins it to the output
// dir), so the JUnit file's directory is the output dir and its base name the report.
func (inv Invocation) Argv() []string {
	if inv.Parallel() {
		argv := []string{inv.Ginkgo,
			"--procs=" + strconv.Itoa(inv.Procs),
			"--focus=" + inv.Focus,
			"--no-color",
			"--output-dir=" + filepath.Dir(inv.JUnit),
			"--junit-report=" + filepath.Base(inv.JUnit),
		}
		if inv.Skip != "" {
			argv = append(argv, "--skip="+inv.Skip)
		}
		if inv.Timeout > 0 {
			argv = append(argv, "--timeout="+inv.Timeout.String())
		}
		argv = append(argv, inv.Binary, "--", "--provider=local")
		return append(argv, inv.suiteFlags()...)
	}
	argv := []string{inv.Binary,
		"--provider=local",
		"--ginkgo.focus=" + inv.Focus,
		"--ginkgo.no-color",
		"--ginkgo.junit-report=" + inv.JUnit,
	}
	if inv.Skip != "" {
		argv = append(argv, "--ginkgo.skip="+inv.Skip)
	}
	if inv.DryRun {
		return append(argv, "--ginkgo.dry-run")
	}
	argv = append(argv, inv.suiteFlags()...)
	if inv.Timeout > 0 {
		argv = append(argv, "--ginkgo.timeout="+inv.Timeout.String())
	}
	return argv
}

// suiteFlags are e2e.test's own flags for a run against the lab.
func (inv Invocation) suiteFlags() []string {
	var f []string
	if inv.Kubeconfig != "" {
		f = append(f, "--kubeconfig="+inv.Kubeconfig)
	}
	if inv.Kubectl != "" {
		f = append(f, "--kubectl-path="+inv.Kubectl)
	}
	if inv.OutputDir != "" {
		f = append(f, "--e2e-output-dir="+inv.OutputDir)
	}
	return f
}

// PoolName names the IPAddressPool and L2Advertisement that Run applies before the suite (and removes
// after): the LoadBalancers tests wait for their Services to get an address, which in the lab ironlb's
// controller gives from a pool and its speaker announces on the nodes' network, as cloud-provider-kind
// does on kind.
const PoolName = "conformance"

// LoadBalancerPool is that pool and advertisement for a lab whose nodes are on nodeCIDR (IPv4): the
// addresses .200-.250 of the /24 below the subnet's top one (172.18.254.200-250 in kind's
// 172.18.0.0/16), away from the nodes and the client at the bottom, the lab's router and registry at
// .255.253/.254 and the seeds' pool at .255.200-250.
func LoadBalancerPool(nodeCIDR netip.Prefix) (string, error) {
	if !nodeCIDR.Addr().Is4() || nodeCIDR.Bits() > 22 {
		return "", fmt.Errorf("node subnet %s: want an IPv4 subnet of /22 or more for the LoadBalancers tests' pool", nodeCIDR)
	}
	a := nodeCIDR.Masked().Addr().As4()
	host := uint32(1)<<(32-nodeCIDR.Bits()) - 1
	top := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	base := top&^0xff - 0x100 // the .0 of the /24 below the top one
	addr := func(off uint32) netip.Addr {
		v := base + off
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return fmt.Sprintf(`apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: %[1]s
  namespace: metallb-system
spec:
  addresses:
  - %[2]s-%[3]s
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: %[1]s
  namespace: metallb-system
spec:
  ipAddressPools:
  - %[1]s
`, PoolName, addr(200), addr(250)), nil
}
