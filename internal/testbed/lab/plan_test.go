package lab

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const zoneLabel = "topology.kubernetes.io/zone"

// seed000Plan is seed 000's kind cluster: `kind create cluster --name myk8s` with three workers on docker's
// 172.18.0.0/16 network, the outside client mypc at 172.18.0.100, and the lab's registry (kind's
// local registry, which the seed does not have) at 172.18.255.253.
func seed000Plan() Plan {
	a := netip.MustParseAddr
	return Plan{
		Config:   DefaultConfig(),
		BridgeNS: "myk8s-net",
		Bridge:   "br0",
		Gateway:  a("172.18.0.1"),
		Nodes: []Host{
			{
				Name: "myk8s-control-plane", Role: RoleControlPlane, Index: 0, Addr: a("172.18.0.2"), MAC: "02:42:ac:12:00:02",
				Labels: map[string]string{
					"mynode":                                "control-plane",
					zoneLabel:                               "ap-northeast-2a",
					"node-role.kubernetes.io/control-plane": "",
				},
				Taints: []Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}},
			},
			{
				Name: "myk8s-worker", Role: RoleWorker, Index: 1, Addr: a("172.18.0.3"), MAC: "02:42:ac:12:00:03",
				Labels: map[string]string{"mynode": "worker1", zoneLabel: "ap-northeast-2a"},
			},
			{
				Name: "myk8s-worker2", Role: RoleWorker, Index: 2, Addr: a("172.18.0.4"), MAC: "02:42:ac:12:00:04",
				Labels: map[string]string{"mynode": "worker2", zoneLabel: "ap-northeast-2b"},
			},
			{
				Name: "myk8s-worker3", Role: RoleWorker, Index: 3, Addr: a("172.18.0.5"), MAC: "02:42:ac:12:00:05",
				Labels: map[string]string{"mynode": "worker3", zoneLabel: "ap-northeast-2c"},
			},
		},
		Client:   Host{Name: "mypc", Role: RoleClient, Index: 4, Addr: a("172.18.0.100"), MAC: "02:42:ac:12:00:64"},
		Registry: Host{Name: "myk8s-registry", Role: RoleRegistry, Index: 6, Addr: a("172.18.255.253"), MAC: "02:42:ac:12:ff:fd"},
	}
}

func TestNewPlanSeed000(t *testing.T) {
	got, err := NewPlan(DefaultConfig())
	if err != nil {
		t.Fatalf("NewPlan(DefaultConfig()) error: %v", err)
	}
	if d := cmp.Diff(seed000Plan(), got, cmpOpts); d != "" {
		t.Errorf("NewPlan(DefaultConfig()) mismatch (-want +got):\n%s", d)
	}
}

// TestNewPlanIPv6: the IPv6-only lab lays the hosts out as the IPv4 one, each at its IPv4 address's
// host part in NodeCIDR6, with the same MACs; the family's CIDRs are the IPv6 ones.
func TestNewPlanIPv6(t *testing.T) {
	c := DefaultConfig()
	c.IPFamily = IPFamilyIPv6
	c.Registry = false
	got, err := NewPlan(c)
	if err != nil {
		t.Fatalf("NewPlan(ipv6) error: %v", err)
	}
	want := seed000Plan()
	want.Config = c
	want.Registry = Host{}
	want.Gateway = netip.MustParseAddr("fc00:f853:ccd:e793::1")
	for i, a6 := range []string{"fc00:f853:ccd:e793::2", "fc00:f853:ccd:e793::3", "fc00:f853:ccd:e793::4", "fc00:f853:ccd:e793::5"} {
		want.Nodes[i].Addr = netip.MustParseAddr(a6)
	}
	want.Client.Addr = netip.MustParseAddr("fc00:f853:ccd:e793::64")
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Errorf("NewPlan(ipv6) mismatch (-want +got):\n%s", d)
	}
	if got.Client.MAC != "02:42:ac:12:00:64" {
		t.Errorf("client MAC %s, want the IPv4 layout's 02:42:ac:12:00:64", got.Client.MAC)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"NodeNet", c.NodeNet(), c.NodeCIDR6},
		{"PodCIDRs", c.PodCIDRs(), []netip.Prefix{c.PodCIDR6}},
		{"ServiceCIDRs", c.ServiceCIDRs(), []netip.Prefix{c.ServiceCIDR6}},
		{"KubernetesServiceIP", got.KubernetesServiceIP(), netip.MustParseAddr("fd00:10:200:1::1")},
		{"APIServerURL", got.APIServerURL(), "https://[fc00:f853:ccd:e793::2]:6443"},
	} {
		if d := cmp.Diff(tc.want, tc.got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}

func TestNewPlanDual(t *testing.T) {
	c := DefaultConfig()
	c.IPFamily = IPFamilyDual
	got, err := NewPlan(c)
	if err != nil {
		t.Fatalf("NewPlan(dual) error: %v", err)
	}
	want := seed000Plan()
	want.Config = c
	// kind's dual-stack network: fc00:f853:ccd:e793::/64, the same host part as the IPv4 address.
	want.Gateway6 = netip.MustParseAddr("fc00:f853:ccd:e793::1")
	for i, a6 := range []string{"fc00:f853:ccd:e793::2", "fc00:f853:ccd:e793::3", "fc00:f853:ccd:e793::4", "fc00:f853:ccd:e793::5"} {
		want.Nodes[i].Addr6 = netip.MustParseAddr(a6)
	}
	want.Client.Addr6 = netip.MustParseAddr("fc00:f853:ccd:e793::64")
	want.Registry.Addr6 = netip.MustParseAddr("fc00:f853:ccd:e793::fffd")
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Errorf("NewPlan(dual) mismatch (-want +got):\n%s", d)
	}
	for _, h := range got.Hosts() {
		if !c.NodeCIDR6.Contains(h.Addr6) {
			t.Errorf("%s: Addr6 %s not in %s", h.Name, h.Addr6, c.NodeCIDR6)
		}
	}
}

func TestNewPlanWorkers(t *testing.T) {
	type node struct {
		Name, Addr, MAC, MyNode, Zone string
		Role                          Role
		Index                         int
	}
	tests := []struct {
		workers    int
		want       []node
		wantClient int // client's Index
	}{
		{
			workers:    0,
			want:       []node{{"myk8s-control-plane", "172.18.0.2", "02:42:ac:12:00:02", "control-plane", "ap-northeast-2a", RoleControlPlane, 0}},
			wantClient: 1,
		},
		{
			workers: 1,
			want: []node{
				{"myk8s-control-plane", "172.18.0.2", "02:42:ac:12:00:02", "control-plane", "ap-northeast-2a", RoleControlPlane, 0},
				{"myk8s-worker", "172.18.0.3", "02:42:ac:12:00:03", "worker1", "ap-northeast-2a", RoleWorker, 1},
			},
			wantClient: 2,
		},
		{
			workers: 5,
			want: []node{
				{"myk8s-control-plane", "172.18.0.2", "02:42:ac:12:00:02", "control-plane", "ap-northeast-2a", RoleControlPlane, 0},
				{"myk8s-worker", "172.18.0.3", "02:42:ac:12:00:03", "worker1", "ap-northeast-2a", RoleWorker, 1},
				{"myk8s-worker2", "172.18.0.4", "02:42:ac:12:00:04", "worker2", "ap-northeast-2b", RoleWorker, 2},
				{"myk8s-worker3", "172.18.0.5", "02:42:ac:12:00:05", "worker3", "ap-northeast-2c", RoleWorker, 3},
				{"myk8s-worker4", "172.18.0.6", "02:42:ac:12:00:06", "worker4", "ap-northeast-2a", RoleWorker, 4},
				{"myk8s-worker5", "172.18.0.7", "02:42:ac:12:00:07", "worker5", "ap-northeast-2b", RoleWorker, 5},
			},
			wantClient: 6,
		},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("workers=%d", tt.workers), func(t *testing.T) {
			c := DefaultConfig()
			c.Workers = tt.workers
			p, err := NewPlan(c)
			if err != nil {
				t.Fatalf("NewPlan error: %v", err)
			}
			var got []node
			for _, h := range p.Nodes {
				got = append(got, node{h.Name, h.Addr.String(), h.MAC, h.Labels["mynode"], h.Labels[zoneLabel], h.Role, h.Index})
				if h.Role == RoleWorker && len(h.Taints) != 0 {
					t.Errorf("worker %s has taints %v", h.Name, h.Taints)
				}
			}
			if d := cmp.Diff(tt.want, got, cmpOpts); d != "" {
				t.Errorf("nodes mismatch (-want +got):\n%s", d)
			}
			if p.Client.Index != tt.wantClient || p.Client.Name != "mypc" || p.Client.Labels != nil || p.Client.Taints != nil {
				t.Errorf("client = %+v, want mypc at index %d without labels or taints", p.Client, tt.wantClient)
			}
		})
	}
}

func TestNewPlanWorkers50(t *testing.T) {
	c := DefaultConfig()
	c.Workers = 50
	p, err := NewPlan(c)
	if err != nil {
		t.Fatalf("NewPlan error: %v", err)
	}
	if len(p.Nodes) != 51 {
		t.Fatalf("len(Nodes) = %d, want 51", len(p.Nodes))
	}
	seen := map[netip.Addr]string{p.Gateway: "gateway"}
	for _, h := range p.Hosts() {
		if other, dup := seen[h.Addr]; dup {
			t.Errorf("%s and %s share %s", h.Name, other, h.Addr)
		}
		seen[h.Addr] = h.Name
	}
	last := p.Nodes[50]
	if last.Name != "myk8s-worker50" || last.Addr != netip.MustParseAddr("172.18.0.52") || last.MAC != "02:42:ac:12:00:34" {
		t.Errorf("last node = %s %s %s, want myk8s-worker50 172.18.0.52 02:42:ac:12:00:34", last.Name, last.Addr, last.MAC)
	}
}

func TestNewPlanCustom(t *testing.T) {
	c := DefaultConfig()
	c.Name, c.Workers, c.ClientName = "lab", 1, "outside"
	c.NodeCIDR, c.ClientAddr = netip.MustParsePrefix("10.99.0.0/24"), netip.MustParseAddr("10.99.0.200")
	c.ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")
	p, err := NewPlan(c)
	if err != nil {
		t.Fatalf("NewPlan error: %v", err)
	}
	type summary struct{ BridgeNS, Gateway, CP, CPAddr, CPMAC, W, WAddr, Client, ClientMAC, API, KSvc string }
	got := summary{p.BridgeNS, p.Gateway.String(), p.Nodes[0].Name, p.Nodes[0].Addr.String(), p.Nodes[0].MAC,
		p.Nodes[1].Name, p.Nodes[1].Addr.String(), p.Client.Name, p.Client.MAC, p.APIServerURL(), p.KubernetesServiceIP().String()}
	want := summary{"lab-net", "10.99.0.1", "lab-control-plane", "10.99.0.2", "02:42:0a:63:00:02",
		"lab-worker", "10.99.0.3", "outside", "02:42:0a:63:00:c8", "https://10.99.0.2:6443", "10.96.0.1"}
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Errorf("plan mismatch (-want +got):\n%s", d)
	}
}

func TestNewPlanInvalid(t *testing.T) {
	c := DefaultConfig()
	c.Workers = -1
	p, err := NewPlan(c)
	if err == nil || !strings.Contains(err.Error(), "--workers") {
		t.Errorf("NewPlan(workers=-1) error = %v, want one naming --workers", err)
	}
	if d := cmp.Diff(Plan{}, p, cmpOpts); d != "" {
		t.Errorf("NewPlan(invalid) returned a non-zero plan:\n%s", d)
	}
}

func TestPlanAccessors(t *testing.T) {
	p, err := NewPlan(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.APIServerURL(), "https://172.18.0.2:6443"; got != want {
		t.Errorf("APIServerURL() = %q, want %q", got, want)
	}
	if got, want := p.KubernetesServiceIP(), netip.MustParseAddr("10.200.1.1"); got != want {
		t.Errorf("KubernetesServiceIP() = %s, want %s", got, want)
	}
	if got := p.ControlPlane().Name; got != "myk8s-control-plane" {
		t.Errorf("ControlPlane().Name = %q", got)
	}
	if got := PodNetNSPrefix("myk8s-worker"); got != "myk8s-worker-p-" {
		t.Errorf(`PodNetNSPrefix("myk8s-worker") = %q, want "myk8s-worker-p-"`, got)
	}
	if got := PodNetNSPrefix("myk8s-worker2"); strings.HasPrefix(got, PodNetNSPrefix("myk8s-worker")) {
		t.Errorf("PodNetNSPrefix(myk8s-worker2) = %q starts with myk8s-worker's prefix: pods of the two nodes would mix", got)
	}

	var names []string
	for _, h := range p.Hosts() {
		names = append(names, h.Name)
	}
	if d := cmp.Diff([]string{"myk8s-control-plane", "myk8s-worker", "myk8s-worker2", "myk8s-worker3", "mypc", "myk8s-registry"}, names, cmpOpts); d != "" {
		t.Errorf("Hosts() names mismatch (-want +got):\n%s", d)
	}
	hs := p.Hosts()
	hs[0].Name = "changed"
	if p.Nodes[0].Name != "myk8s-control-plane" {
		t.Errorf("Hosts() aliases Plan.Nodes: changing it renamed the control plane")
	}

	for _, tt := range []struct {
		name     string
		wantOK   bool
		wantAddr string
		wantRole Role
	}{
		{"myk8s-control-plane", true, "172.18.0.2", RoleControlPlane},
		{"myk8s-worker", true, "172.18.0.3", RoleWorker},
		{"myk8s-worker3", true, "172.18.0.5", RoleWorker},
		{"mypc", true, "172.18.0.100", RoleClient},
		{"myk8s-registry", true, "172.18.255.253", RoleRegistry},
		{"myk8s-worker4", false, "", ""},
		{"", false, "", ""},
	} {
		t.Run("Host("+tt.name+")", func(t *testing.T) {
			h, ok := p.Host(tt.name)
			if ok != tt.wantOK {
				t.Fatalf("Host(%q) ok = %v, want %v", tt.name, ok, tt.wantOK)
			}
			if !ok {
				if d := cmp.Diff(Host{}, h, cmpOpts); d != "" {
					t.Errorf("Host(%q) returned a non-zero host:\n%s", tt.name, d)
				}
				return
			}
			if h.Name != tt.name || h.Addr.String() != tt.wantAddr || h.Role != tt.wantRole {
				t.Errorf("Host(%q) = %s %s %s, want %s %s", tt.name, h.Name, h.Addr, h.Role, tt.wantAddr, tt.wantRole)
			}
		})
	}
}

func TestMACFor(t *testing.T) {
	for _, tt := range []struct{ addr, want string }{
		{"172.18.0.2", "02:42:ac:12:00:02"},
		{"172.18.0.100", "02:42:ac:12:00:64"},
		{"172.18.1.255", "02:42:ac:12:01:ff"},
		{"10.0.0.1", "02:42:0a:00:00:01"},
	} {
		if got := macFor(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("macFor(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

// The BGP lab adds seed 003's router on the bridge, at the top of the nodes' subnet, and mypc2 behind
// it on its own subnet; the default lab has neither.
func TestPlanBGP(t *testing.T) {
	c := DefaultConfig()
	c.BGP = true
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Router.Name != "router" || p.Router.Addr.String() != "172.18.255.254" || p.Router.Role != RoleRouter {
		t.Errorf("router = %+v", p.Router)
	}
	if p.Client2.Name != "mypc2" || p.Client2.Addr.String() != "192.168.10.100" || p.RouterLANAddr.String() != "192.168.10.1" {
		t.Errorf("mypc2 = %+v behind %s", p.Client2, p.RouterLANAddr)
	}
	if got := len(p.Hosts()); got != 7 { // 4 nodes, mypc, router, registry
		t.Errorf("%d hosts on the bridge, want 7", got)
	}
	if h, ok := p.Host("mypc2"); !ok || h.Index >= 0 {
		t.Errorf("mypc2 should be found and not be on the bridge: %+v %v", h, ok)
	}
	if got := strings.Join(p.NodeNames(), ","); got != "myk8s-control-plane,myk8s-worker,myk8s-worker2,myk8s-worker3" {
		t.Errorf("NodeNames = %s", got)
	}
	conf := RouterConfig(p, "/x")["bgpd.conf"]
	for _, want := range []string{"router bgp 64512", "bgp router-id 172.18.255.254", "bgp listen range 172.18.0.2/32 peer-group nodes\n bgp listen range 172.18.0.3/32 peer-group nodes", "maximum-paths 16", "neighbor nodes bfd profile nodes"} {
		if !strings.Contains(conf, want) {
			t.Errorf("bgpd.conf lacks %q:\n%s", want, conf)
		}
	}
	d, _ := NewPlan(DefaultConfig())
	if d.Router.Name != "" || d.Client2.Name != "" || len(d.AllHosts()) != 6 {
		t.Errorf("the default lab has a router or mypc2: %+v %+v", d.Router, d.Client2)
	}

	bad := c
	bad.RouterCIDR = netip.MustParsePrefix("10.10.0.0/24") // inside the pod CIDR
	if _, err := NewPlan(bad); err == nil || !strings.Contains(err.Error(), "--router-cidr") {
		t.Errorf("overlapping --router-cidr: %v", err)
	}
	bad = c
	bad.ClientName = "router"
	if _, err := NewPlan(bad); err == nil || !strings.Contains(err.Error(), "BGP lab uses that name") {
		t.Errorf("--client router: %v", err)
	}
}

// The registry is a host on the bridge below the router's address, an end host like the client: no
// node, no agent. Its bridge port comes after the router's whether or not there is a router, and
// without --registry there is none.
func TestPlanRegistry(t *testing.T) {
	for _, tt := range []struct {
		name      string
		mutate    func(*Config)
		want      Host // Name "" = no registry
		wantAddrP string
	}{
		{name: "default", mutate: func(*Config) {},
			want:      Host{Name: "myk8s-registry", Role: RoleRegistry, Index: 6, Addr: netip.MustParseAddr("172.18.255.253"), MAC: "02:42:ac:12:ff:fd"},
			wantAddrP: "172.18.255.253:5000"},
		{name: "bgp: the same port after the router", mutate: func(c *Config) { c.BGP = true },
			want:      Host{Name: "myk8s-registry", Role: RoleRegistry, Index: 6, Addr: netip.MustParseAddr("172.18.255.253"), MAC: "02:42:ac:12:ff:fd"},
			wantAddrP: "172.18.255.253:5000"},
		{name: "one worker, other subnet", mutate: func(c *Config) {
			c.Name, c.Workers, c.NodeCIDR, c.ClientAddr = "lab", 1, netip.MustParsePrefix("10.99.0.0/24"), netip.MustParseAddr("10.99.0.200")
		},
			want:      Host{Name: "lab-registry", Role: RoleRegistry, Index: 4, Addr: netip.MustParseAddr("10.99.0.253"), MAC: "02:42:0a:63:00:fd"},
			wantAddrP: "10.99.0.253:5000"},
		{name: "smallest subnet", mutate: func(c *Config) {
			c.NodeCIDR, c.ClientAddr = netip.MustParsePrefix("172.18.0.0/28"), netip.MustParseAddr("172.18.0.12")
		},
			want:      Host{Name: "myk8s-registry", Role: RoleRegistry, Index: 6, Addr: netip.MustParseAddr("172.18.0.13"), MAC: "02:42:ac:12:00:0d"},
			wantAddrP: "172.18.0.13:5000"},
		{name: "off", mutate: func(c *Config) { c.Registry = false }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			p, err := NewPlan(c)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, p.Registry, cmpOpts); d != "" {
				t.Errorf("Registry mismatch (-want +got):\n%s", d)
			}
			gotAddrP := ""
			if ap := p.RegistryAddr(); ap.IsValid() {
				gotAddrP = ap.String()
			}
			if gotAddrP != tt.wantAddrP {
				t.Errorf("RegistryAddr() = %q, want %q", gotAddrP, tt.wantAddrP)
			}
			h, ok := p.Host(tt.want.Name)
			if tt.want.Name != "" && (!ok || h.IsNode()) {
				t.Errorf("Host(%q) = %+v, %v: want found and not a node", tt.want.Name, h, ok)
			}
			seen := map[netip.Addr]string{p.Gateway: "gateway"}
			ports := map[int]string{}
			for _, h := range p.Hosts() {
				if other, dup := seen[h.Addr]; dup {
					t.Errorf("%s and %s share %s", h.Name, other, h.Addr)
				}
				if other, dup := ports[h.Index]; dup {
					t.Errorf("%s and %s share bridge port %d", h.Name, other, h.Index)
				}
				seen[h.Addr], ports[h.Index] = h.Name, h.Name
			}
		})
	}
}

// Only the control plane and the workers are nodes: the agent, stop-node and the benchmarks refuse
// the others.
func TestHostIsNode(t *testing.T) {
	c := DefaultConfig()
	c.BGP = true
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, h := range p.AllHosts() {
		if h.IsNode() {
			nodes = append(nodes, h.Name)
		}
	}
	if d := cmp.Diff(p.NodeNames(), nodes, cmpOpts); d != "" {
		t.Errorf("hosts that are nodes (-want +got):\n%s", d)
	}
}

// TestPlanSecondNetwork: the second network's client is a host of its own (torn down with the
// others), off the first bridge, and each node's eth1 address mirrors its eth0 address.
func TestPlanSecondNetwork(t *testing.T) {
	c := DefaultConfig()
	c.SecondNetwork = true
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Bridge2 != "br1" {
		t.Errorf("Bridge2 = %q, want br1", p.Bridge2)
	}
	want := Host{Name: "mypc3", Role: RoleClient, Index: -1, Addr: netip.MustParseAddr("172.19.0.100"), MAC: "02:42:ac:13:00:64"}
	if got := p.Client3; got.Name != want.Name || got.Role != want.Role || got.Index != want.Index || got.Addr != want.Addr || got.MAC != want.MAC {
		t.Errorf("Client3 = %+v, want %+v", got, want)
	}
	if h, ok := p.Host("mypc3"); !ok || h.Name != p.Client3.Name {
		t.Errorf("Host(mypc3) = %v, %v: not among AllHosts", h, ok)
	}
	if got := p.SecondAddr(p.Nodes[1]); got != netip.MustParseAddr("172.19.0.3") {
		t.Errorf("SecondAddr(%s) = %s, want 172.19.0.3", p.Nodes[1].Name, got)
	}
	for _, bad := range []string{"172.18.0.0/24", "10.10.0.0/16", "172.19.0.0/25", "172.19.0.1/16"} {
		c.SecondCIDR = netip.MustParsePrefix(bad)
		if err := c.Validate(); err == nil {
			t.Errorf("--second-cidr %s accepted", bad)
		}
	}
	c.SecondCIDR, c.ClientName = netip.MustParsePrefix("172.19.0.0/16"), "mypc3"
	if err := c.Validate(); err == nil {
		t.Error("--client mypc3 accepted with the second network")
	}
}
