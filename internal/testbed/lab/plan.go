package lab

import (
	"fmt"
	"net/netip"
	"strconv"
)

// Role of a lab host.
type Role string

const (
	RoleControlPlane Role = "control-plane"
	RoleWorker       Role = "worker"
	RoleClient       Role = "client"
	RoleRouter       Role = "router"
	RoleRegistry     Role = "registry"
)

// Host is one network namespace on the lab bridge: a node, the outside client, the router or the
// registry.
type Host struct {
	Name   string            `json:"name"`             // namespace name, also the Node name and hostname
	Role   Role              `json:"role"`             //
	Index  int               `json:"index"`            // position on the bridge; the bridge-side veth is "veth<index>"
	Addr   netip.Addr        `json:"addr"`             // eth0's IPv4 address; its IPv6 address in the IPv6-only lab
	Addr6  netip.Addr        `json:"addr6,omitzero"`   // eth0's IPv6 address (dual)
	MAC    string            `json:"mac"`              // eth0's MAC, derived from its IPv4 layout address as Docker does (02:42:ac:12:00:02)
	Labels map[string]string `json:"labels,omitempty"` // Node labels (nodes only)
	Taints []Taint           `json:"taints,omitempty"` // Node taints (nodes only)
}

// IsNode reports whether h is a Kubernetes node (the control plane or a worker), as opposed to the
// client, the router or the registry, which run no agent and no Pods.
func (h Host) IsNode() bool { return h.Role == RoleControlPlane || h.Role == RoleWorker }

// Taint mirrors a Node taint without importing the Kubernetes API here.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Plan is the lab's topology, derived from a Config by NewPlan.
type Plan struct {
	Config   Config     `json:"config"`
	BridgeNS string     `json:"bridgeNS"` // the namespace holding the bridge (kind's docker network)
	Bridge   string     `json:"bridge"`   // the bridge device inside BridgeNS
	Gateway  netip.Addr `json:"gateway"`  // the bridge's own address (docker's 172.18.0.1; IPv6 in the IPv6-only lab), the nodes' default route
	Gateway6 netip.Addr `json:"gateway6,omitzero"`
	Nodes    []Host     `json:"nodes"` // control plane first, then workers
	Client   Host       `json:"client"`
	// Router and Client2 exist in the BGP lab (Config.BGP), seed 003's topology: Router is on the
	// bridge and runs FRR peered with every node; Client2 sits behind it on RouterCIDR and reaches
	// service addresses only through it.
	Router  Host `json:"router,omitzero"`
	Client2 Host `json:"client2,omitzero"`
	// RouterLANAddr is the router's address on Client2's subnet, Client2's default gateway.
	RouterLANAddr netip.Addr `json:"routerLANAddr,omitzero"`
	// Client3 exists with Config.SecondNetwork: the client on the second network (Bridge2), not on
	// the first bridge (Index -1).
	Client3 Host `json:"client3,omitzero"`
	// Bridge2 is the second network's bridge inside BridgeNS (Config.SecondNetwork), without an
	// address: a layer-2 segment between the nodes' SecondIface and Client3.
	Bridge2 string `json:"bridge2,omitempty"`
	// Registry exists when Config.Registry is set: the OCI distribution registry's host on the
	// bridge, serving plain HTTP on RegistryPort (registry.go).
	Registry Host `json:"registry,omitzero"`
}

// zones are the seed's topology.kubernetes.io/zone labels: worker1 and the control plane in 2a, worker2 in 2b,
// worker3 in 2c; more workers continue the cycle.
var zones = []string{"ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"}

// NewPlan computes the topology. It does no I/O.
func NewPlan(c Config) (Plan, error) {
	if err := c.Validate(); err != nil {
		return Plan{}, err
	}
	p := Plan{
		Config:   c,
		BridgeNS: c.Name + "-net",
		Bridge:   "br0",
		Gateway:  nthAddr(c.NodeCIDR, 1),
	}
	if c.Dual() {
		p.Gateway6 = nthAddr(c.NodeCIDR6, 1)
	}
	if c.IPv6Only() {
		p.Gateway = nthAddr(c.NodeCIDR6, 1)
	}
	host := func(name string, role Role, index int, addr netip.Addr) Host {
		h := Host{Name: name, Role: role, Index: index, Addr: addr, MAC: macFor(addr)}
		switch {
		case c.Dual():
			h.Addr6 = nthAddr(c.NodeCIDR6, addrOffset(c.NodeCIDR.Addr(), addr))
		case c.IPv6Only():
			h.Addr = nthAddr(c.NodeCIDR6, addrOffset(c.NodeCIDR.Addr(), addr))
		}
		return h
	}
	cp := host(c.Name+controlPlaneSuffix, RoleControlPlane, 0, nthAddr(c.NodeCIDR, 2))
	cp.Labels = map[string]string{"mynode": "control-plane", "topology.kubernetes.io/zone": zones[0],
		"node-role.kubernetes.io/control-plane": ""}
	cp.Taints = []Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}}
	p.Nodes = append(p.Nodes, cp)
	for i := 1; i <= c.Workers; i++ {
		name := c.Name + "-worker"
		if i > 1 {
			name += strconv.Itoa(i)
		}
		w := host(name, RoleWorker, i, nthAddr(c.NodeCIDR, uint64(2+i)))
		w.Labels = map[string]string{"mynode": "worker" + strconv.Itoa(i), "topology.kubernetes.io/zone": zones[(i-1)%len(zones)]}
		p.Nodes = append(p.Nodes, w)
	}
	p.Client = host(c.ClientName, RoleClient, len(p.Nodes), c.ClientAddr)
	if c.BGP {
		p.Router = Host{Name: RouterName, Role: RoleRouter, Index: len(p.Nodes) + 1, Addr: routerAddr(c.NodeCIDR)}
		p.Router.MAC = macFor(p.Router.Addr)
		p.RouterLANAddr = nthAddr(c.RouterCIDR, 1)
		a2 := nthAddr(c.RouterCIDR, 100)
		p.Client2 = Host{Name: Client2Name, Role: RoleClient, Index: -1, Addr: a2, MAC: macFor(a2)}
	}
	if c.SecondNetwork {
		p.Bridge2 = "br1"
		a3 := nthAddr(c.SecondCIDR, addrOffset(c.NodeCIDR.Addr(), c.ClientAddr))
		p.Client3 = Host{Name: Client3Name, Role: RoleClient, Index: -1, Addr: a3, MAC: macFor(a3)}
	}
	if c.Registry {
		// Index after the router's whether or not there is one: a bridge port's name does not
		// depend on --bgp.
		p.Registry = host(c.Name+registrySuffix, RoleRegistry, len(p.Nodes)+2, registryAddr(c.NodeCIDR))
	}
	return p, nil
}

// macFor derives a locally administered MAC from an IPv4 address as Docker does: 02:42 + the four bytes.
func macFor(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("02:42:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

// SecondMAC is a node's MAC on the second network, derived from its SecondAddr as eth0's is.
func (p Plan) SecondMAC(h Host) string { return macFor(p.SecondAddr(h)) }

// ControlPlane returns the control-plane node.
func (p Plan) ControlPlane() Host { return p.Nodes[0] }

// Hosts returns the hosts on the bridge: the nodes, the client, (BGP lab) the router and the
// registry.
func (p Plan) Hosts() []Host {
	hs := append(append([]Host(nil), p.Nodes...), p.Client)
	if p.Router.Name != "" {
		hs = append(hs, p.Router)
	}
	if p.Registry.Name != "" {
		hs = append(hs, p.Registry)
	}
	return hs
}

// AllHosts returns every host namespace: the bridge's hosts, (BGP lab) Client2 behind the router and
// (second network) Client3.
func (p Plan) AllHosts() []Host {
	hs := p.Hosts()
	if p.Client2.Name != "" {
		hs = append(hs, p.Client2)
	}
	if p.Client3.Name != "" {
		hs = append(hs, p.Client3)
	}
	return hs
}

// SecondAddr is a node's address on the second network (Config.SecondNetwork): the same offset in
// SecondCIDR as its eth0 address in NodeCIDR (172.18.0.3 -> 172.19.0.3).
func (p Plan) SecondAddr(h Host) netip.Addr {
	return nthAddr(p.Config.SecondCIDR, addrOffset(p.Config.NodeCIDR.Addr(), h.Addr))
}

// NodeNames returns the names of the nodes, control plane first.
func (p Plan) NodeNames() []string {
	var n []string
	for _, h := range p.Nodes {
		n = append(n, h.Name)
	}
	return n
}

// routerAddr is the router's address on the bridge: the last usable address of the nodes' subnet
// (172.18.255.254 in kind's 172.18.0.0/16), away from the nodes, the client and address pools, which
// users take from the top of the subnet but below .255.254 (seed: 172.18.255.200-250).
func routerAddr(nodeCIDR netip.Prefix) netip.Addr {
	size := uint64(1) << (32 - nodeCIDR.Bits())
	return nthAddr(nodeCIDR, size-2)
}

// registryAddr is the registry's address on the bridge: the one below the router's (172.18.255.253
// in kind's 172.18.0.0/16), with the other infrastructure at the top of the subnet, away from the
// nodes and the client at its bottom. Seed 000's pool (172.18.255.200-250) stays clear of it.
func registryAddr(nodeCIDR netip.Prefix) netip.Addr {
	size := uint64(1) << (32 - nodeCIDR.Bits())
	return nthAddr(nodeCIDR, size-3)
}

// Host finds a host (node, client, router, Client2 or registry) by name.
func (p Plan) Host(name string) (Host, bool) {
	for _, h := range p.AllHosts() {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// APIServerURL is the apiserver's address as seen from inside the lab.
func (p Plan) APIServerURL() string {
	return fmt.Sprintf("https://%s", netip.AddrPortFrom(p.ControlPlane().Addr, apiserverPort))
}

// KubernetesServiceIP is the first address of the service CIDR, the ClusterIP of the `kubernetes` Service.
func (p Plan) KubernetesServiceIP() netip.Addr { return nthAddr(p.Config.ServiceCIDRs()[0], 1) }

// ClusterDomain is the kubelets' clusterDomain, as kubeadm (and so kind) sets it.
const ClusterDomain = "cluster.local"

// ClusterDNSIP is the kube-dns Service's ClusterIP and the kubelets' clusterDNS: the tenth address of the
// primary service CIDR, as kubeadm picks it.
func (p Plan) ClusterDNSIP() netip.Addr { return nthAddr(p.Config.ServiceCIDRs()[0], 10) }

// PodNetNSPrefix is the prefix of the namespaces of the Pods of node: "<node>-p-".
func PodNetNSPrefix(node string) string { return node + "-p-" }
