package conformance

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// The default selection against test names of the suite (v1.37.2's test/e2e/network and
// test/e2e/common/network), as ginkgo matches them: focus and not skip.
func TestDefaultSelection(t *testing.T) {
	focus, skip := regexp.MustCompile(DefaultFocus), regexp.MustCompile(DefaultSkip())
	tests := []struct {
		name string
		want bool
	}{
		{"[sig-network] Services should serve a basic endpoint from pods [Conformance]", true},
		{"[sig-network] Services should have session affinity timeout work for service with type clusterIP [LinuxOnly] [Slow]", true},
		{"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [NodeConformance] [Conformance]", true},
		{"[sig-network] Networking Granular Checks: Services should function for pod-Service: udp", true},
		{"[sig-network] DNS should provide DNS for services [Conformance]", true},
		{"[sig-network] Conntrack should be able to preserve UDP traffic when server pod cycles for a NodePort service", true},
		{"[sig-network] HostPort validates that there is no conflict between pods with same hostPort but different hostIP and protocol [LinuxOnly] [Conformance]", true},
		{"[sig-network] EndpointSlice should support creating EndpointSlice API operations [Conformance]", true},
		{"[sig-network] Topology Hints [Feature:Topology Hints] should distribute endpoints evenly", true},
		{"[sig-network] Traffic Distribution when Service has trafficDistribution=PreferClose should route traffic to an endpoint in the same zone when using ClusterIP", true},
		{"[sig-network] LoadBalancers [Feature:LoadBalancer] should be able to change the type and ports of a TCP service [Slow]", true},
		{"[sig-network] LoadBalancers ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow] should work for type=LoadBalancer", true},

		{"[sig-network] Networking Granular Checks: Services should function for pod-Service: sctp [Feature:SCTPConnectivity]", false},
		{"[sig-network] Services should be rejected for evicted pods (no endpoints exist)", false},
		{"[sig-network] LoadBalancers [Feature:LoadBalancer] should handle load balancer cleanup finalizer for service [Slow]", false},
		{"[sig-network] LoadBalancers [Feature:LoadBalancer] should be able to switch session affinity for LoadBalancer service with Local traffic policy [LinuxOnly] [Slow]", false},
		{"[sig-network] LoadBalancers [Feature:LoadBalancer] should be able to switch session affinity for LoadBalancer service with Cluster traffic policy [LinuxOnly] [Slow]", true},
		{"[sig-network] Networking should recreate its iptables rules if they are deleted [Disruptive]", false},
		{"[sig-network] Networking IPerf2 [Feature:NetworkingPerformance] should run iperf2", false},
		{"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv4]", false},
		{"[sig-network] DNS HostNetwork should resolve DNS of partial qualified names for services on hostNetwork pods with dnsPolicy: ClusterFirstWithHostNet [LinuxOnly]", false},
		{"[sig-network] Service CIDRs should create Services and serve on different Service CIDRs", false},
		{"[sig-network] EndpointSliceMirroring should mirror a custom Endpoints resource through create update and delete [Conformance]", false},
		{"[sig-network] [Feature:IPv6DualStack] should create service with ipv4,v6 cluster ip", false},
		{"[sig-apps] Deployment deployment should support rollover [Conformance]", false},
	}
	for _, tt := range tests {
		if got := focus.MatchString(tt.name) && !skip.MatchString(tt.name); got != tt.want {
			t.Errorf("selected(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
	if err := (Selection{Focus: DefaultFocus, Skip: DefaultSkip()}).Validate(); err != nil {
		t.Errorf("default selection: %v", err)
	}
	for _, r := range SkipReasons {
		if r.Reason == "" {
			t.Errorf("skip pattern %q has no reason", r.Pattern)
		}
	}
}

func TestSelectionValidate(t *testing.T) {
	for _, s := range []Selection{{Focus: ""}, {Focus: "  "}, {Focus: "("}, {Focus: "x", Skip: "[a"}} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if err := (Selection{Focus: `\[sig-network\] Services should serve a basic endpoint from pods`}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestArgv(t *testing.T) {
	inv := Invocation{Binary: "/e2e/e2e.test", Kubeconfig: "/lab/kubeconfig-internal", Kubectl: "/k8s/kubectl", JUnit: "/out/junit.xml",
		OutputDir: "/out", Timeout: 90 * time.Minute, Selection: Selection{Focus: "F", Skip: "S"}}
	want := []string{"/e2e/e2e.test", "--provider=local", "--ginkgo.focus=F", "--ginkgo.no-color", "--ginkgo.junit-report=/out/junit.xml",
		"--ginkgo.skip=S", "--kubeconfig=/lab/kubeconfig-internal", "--kubectl-path=/k8s/kubectl", "--e2e-output-dir=/out", "--ginkgo.timeout=1h30m0s"}
	if d := cmp.Diff(want, inv.Argv()); d != "" {
		t.Errorf("Argv mismatch (-want +got):\n%s", d)
	}
	inv.DryRun, inv.Skip = true, ""
	got := strings.Join(inv.Argv(), " ")
	if want := "/e2e/e2e.test --provider=local --ginkgo.focus=F --ginkgo.no-color --ginkgo.junit-report=/out/junit.xml --ginkgo.dry-run"; got != want {
		t.Errorf("dry-run Argv = %q, want %q", got, want)
	}
}

// Under the ginkgo CLI (Procs > 1): ginkgo's settings are the CLI's flags, the JUnit file is split into
// the CLI's output dir and report name (it merges the processes' reports there), and the suite's own
// flags follow "--". A dry run, or one process, stays e2e.test alone.
func TestArgvParallel(t *testing.T) {
	inv := Invocation{Binary: "/e2e/e2e.test", Ginkgo: "/e2e/ginkgo", Procs: 8, Kubeconfig: "/lab/kubeconfig-internal", Kubectl: "/k8s/kubectl",
		JUnit: "/out/junit-ironlb.xml", OutputDir: "/out", Timeout: 30 * time.Minute, Selection: Selection{Focus: "F", Skip: "S"}}
	want := []string{"/e2e/ginkgo", "--procs=8", "--focus=F", "--no-color", "--output-dir=/out", "--junit-report=junit-ironlb.xml",
		"--skip=S", "--timeout=30m0s", "/e2e/e2e.test", "--", "--provider=local",
		"--kubeconfig=/lab/kubeconfig-internal", "--kubectl-path=/k8s/kubectl", "--e2e-output-dir=/out"}
	if !inv.Parallel() {
		t.Error("Procs 8: not parallel")
	}
	if d := cmp.Diff(want, inv.Argv()); d != "" {
		t.Errorf("Argv mismatch (-want +got):\n%s", d)
	}
	inv.Skip, inv.Timeout = "", 0
	got := strings.Join(inv.Argv(), " ")
	if want := "/e2e/ginkgo --procs=8 --focus=F --no-color --output-dir=/out --junit-report=junit-ironlb.xml /e2e/e2e.test -- --provider=local --kubeconfig=/lab/kubeconfig-internal --kubectl-path=/k8s/kubectl --e2e-output-dir=/out"; got != want {
		t.Errorf("Argv without skip and timeout = %q, want %q", got, want)
	}
	for _, tt := range []struct {
		procs  int
		dryRun bool
	}{{0, false}, {1, false}, {8, true}} {
		inv.Procs, inv.DryRun = tt.procs, tt.dryRun
		if argv := inv.Argv(); inv.Parallel() || argv[0] != "/e2e/e2e.test" {
			t.Errorf("Procs %d, dry run %v: %v, want e2e.test alone", tt.procs, tt.dryRun, argv)
		}
	}
}

func TestLoadBalancerPool(t *testing.T) {
	for _, tt := range []struct {
		cidr, want, wantErr string
	}{
		{cidr: "172.18.0.0/16", want: "172.18.254.200-172.18.254.250"},
		{cidr: "10.0.0.0/8", want: "10.255.254.200-10.255.254.250"},
		{cidr: "192.168.4.0/22", want: "192.168.6.200-192.168.6.250"},
		{cidr: "192.168.4.0/24", wantErr: "want an IPv4 subnet of /22 or more"},
		{cidr: "fd00::/64", wantErr: "want an IPv4 subnet"},
	} {
		got, err := LoadBalancerPool(netip.MustParsePrefix(tt.cidr))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.cidr, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !strings.Contains(got, "  - "+tt.want+"\n") || !strings.Contains(got, "kind: L2Advertisement") {
			t.Errorf("%s: %v\n%s\nwant the range %s and an L2Advertisement", tt.cidr, err, got, tt.want)
		}
	}
}

// TestLanes: the selected long tests go to a lane of their own, focused by exact name (a test whose
// name ends another's is not taken with it), and the main lane skips them; no long test, or only long
// tests, is one lane.
func TestLanes(t *testing.T) {
	long := regexp.MustCompile(LongPattern)
	rolling := "[sig-network] LoadBalancers [Feature:LoadBalancer] should not have connectivity disruption during rolling update with externalTrafficPolicy=Cluster [Slow]"
	ranges := "[sig-network] LoadBalancers [Feature:LoadBalancer] should only allow access from service loadbalancer source ranges [Slow]"
	short := "[sig-network] Services should serve a basic endpoint from pods  [Conformance]"
	s := Selection{Focus: DefaultFocus, Skip: "SCTP"}
	sel := func(names ...string) []Result {
		var rs []Result
		for _, n := range names {
			rs = append(rs, Result{Name: n, Status: Passed})
		}
		return rs
	}
	main, lane, n := Lanes(s, sel(rolling, short, ranges), long)
	if lane == nil || n != 2 {
		t.Fatalf("long lane %v with %d tests, want 2", lane, n)
	}
	match := func(re, text string) bool { return regexp.MustCompile(re).MatchString("Kubernetes e2e suite " + text) }
	for _, c := range []struct {
		text             string
		inLong, skipMain bool
	}{
		{rolling, true, true},
		{ranges, true, true},
		{short, false, false},
		{"SCTP " + short, false, true},
		{rolling + " again", false, false}, // not the exact name
	} {
		if got := match(lane.Focus, c.text) && !match(lane.Skip, c.text); got != c.inLong {
			t.Errorf("%q in the long lane: %v, want %v", c.text, got, c.inLong)
		}
		if got := match(main.Skip, c.text); got != c.skipMain {
			t.Errorf("%q skipped by the main lane: %v, want %v", c.text, got, c.skipMain)
		}
	}
	if main.Focus != s.Focus || lane.Skip != s.Skip {
		t.Errorf("main focus %q, long skip %q: want the selection's focus and skip kept", main.Focus, lane.Skip)
	}
	for _, names := range [][]string{{short}, {rolling, ranges}} {
		if m, l, n := Lanes(s, sel(names...), long); l != nil || n != 0 || *m != s {
			t.Errorf("%d tests, %d long: got a long lane %v, want one lane, the selection as it is", len(names), n, l)
		}
	}
}

// TestDefaultClient: the suite runs from the client outside the nodes' subnet when the lab has one
// (upstream's ETP Local source-IP test takes any address in the first worker's /16 for a node's).
func TestDefaultClient(t *testing.T) {
	for _, tc := range []struct {
		bgp  bool
		want string
	}{{false, lab.DefaultClient}, {true, lab.Client2Name}} {
		c := lab.DefaultConfig()
		c.BGP = tc.bgp
		p, err := lab.NewPlan(c)
		if err != nil {
			t.Fatal(err)
		}
		got := DefaultClient(p)
		if got != tc.want {
			t.Errorf("bgp=%v: DefaultClient = %q, want %q", tc.bgp, got, tc.want)
		}
		h, _ := p.Host(got)
		if h.Addr.Is4() && p.Config.NodeCIDR.Contains(h.Addr) != !tc.bgp {
			t.Errorf("bgp=%v: %s at %s: inside the nodes' subnet %s = %v", tc.bgp, got, h.Addr, p.Config.NodeCIDR, p.Config.NodeCIDR.Contains(h.Addr))
		}
	}
}
