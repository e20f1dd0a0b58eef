// Package lab rebuilds seed 000's kind cluster on one machine: network namespaces for a bridge, the nodes and
// an outside client; a real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
// inside the control-plane node; and a node agent doing the kubelet's job on every node.
//
// The topology is computed from Config by a pure function (Plan) so it can be tested without root. The
// adapters that make it real (namespaces, cgroups, processes) live beside it and are driven by Up and Down.
package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// Defaults are seed 000's values.
const (
	DefaultName     = "myk8s"
	DefaultWorkers  = 3
	DefaultStateDir = "/run/ironlb-lab"
	DefaultClient   = "mypc"
	IPFamilyIPv4    = "ipv4"
	IPFamilyDual    = "dual"
	// IPFamilyIPv6 is an IPv6-only lab: the bridge, the nodes' InternalIPs, pods, Services and the
	// client are IPv6 only (NodeCIDR6, PodCIDR6, ServiceCIDR6). The IPv4 CIDRs still lay the hosts
	// out: a host's IPv6 address is at its IPv4 address's offset in NodeCIDR6, its MAC from the IPv4
	// address, as in the other families.
	IPFamilyIPv6  = "ipv6"
	ProxyIPTables = "iptables"
	ProxyNFTables = "nftables"
	// ProxyIronLB runs `ironlb proxy` (config/proxy) instead of kube-proxy.
	ProxyIronLB = "ironlb"
	// The BGP lab's router and the client behind it (seed 003), and their AS numbers: every node
	// peers from NodeASN with the router in RouterASN.
	RouterName  = "router"
	Client2Name = "mypc2"
	RouterASN   = 64512
	// Client3Name is the client on the second network (Config.SecondNetwork).
	Client3Name = "mypc3"
	// SecondIface is the nodes' interface on the second network.
	SecondIface        = "eth1"
	NodeASN            = 64513
	apiserverPort      = 6443
	controlPlaneSuffix = "-control-plane"
	registrySuffix     = "-registry"
)

// Config is what a user chooses with `ironlb lab up` flags. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	Name        string       `json:"name"`        // cluster name; nodes are <name>-control-plane, <name>-worker, <name>-worker2...
	Workers     int          `json:"workers"`     // number of worker nodes
	NodeCIDR    netip.Prefix `json:"nodeCIDR"`    // the bridge's IPv4 subnet (kind's 172.18.0.0/16)
	NodeCIDR6   netip.Prefix `json:"nodeCIDR6"`   // the bridge's IPv6 subnet in the dual-stack lab
	PodCIDR     netip.Prefix `json:"podCIDR"`     // cluster pod CIDR; each node gets a /24 from kube-controller-manager
	PodCIDR6    netip.Prefix `json:"podCIDR6"`    // IPv6 pod CIDR (dual); each node gets a /64
	ServiceCIDR netip.Prefix `json:"serviceCIDR"` // ClusterIP range
	// ServiceCIDR6 is the IPv6 ClusterIP range (dual).
	ServiceCIDR6 netip.Prefix `json:"serviceCIDR6"`
	ClientName   string       `json:"clientName"` // the outside client's namespace (seed: mypc)
	ClientAddr   netip.Addr   `json:"clientAddr"` // its address on the bridge (seed: 172.18.0.100)
	IPFamily     string       `json:"ipFamily"`   // ipv4, dual or ipv6
	ProxyMode    string       `json:"proxyMode"`  // kube-proxy mode: iptables (seed) or nftables
	StateDir     string       `json:"stateDir"`   // where the lab keeps certificates, logs and its record
	K8sBin       string       `json:"k8sBin"`     // directory with etcd, kube-apiserver, ... (see hack/k8s-binaries.sh)
	Self         string       `json:"self"`       // path of the ironlb binary run inside the lab
	// BGP adds seed 003's router (FRR on the bridge, peered with every node) and Client2 behind it on
	// RouterCIDR.
	BGP        bool         `json:"bgp,omitempty"`
	RouterCIDR netip.Prefix `json:"routerCIDR,omitzero"` // the subnet between the router and mypc2
	// Prometheus runs Debian's prometheus in the control-plane node, scraping ironlb's pods as
	// config/prometheus's PodMonitors say.
	Prometheus bool `json:"prometheus,omitempty"`
	// Registry runs the OCI distribution registry on the bridge (host <name>-registry), where
	// `ironlb lab push` puts ironlb's image and upstream images are mirrored (registry.go).
	Registry bool `json:"registry,omitempty"`
	// RegistryBin is the directory with the registry binary (hack/registry-binary.sh builds it).
	RegistryBin string `json:"registryBin,omitempty"`
	// CoreDNSBin is the directory with the coredns binary the kube-dns Deployment's image maps to
	// (hack/coredns-binary.sh builds it).
	CoreDNSBin string `json:"coreDNSBin,omitempty"`
	// SecondNetwork adds a second layer-2 network: a second bridge in the bridge namespace, SecondIface
	// on every node with an address of SecondCIDR, and the client Client3Name on it (network.go).
	SecondNetwork bool         `json:"secondNetwork,omitempty"`
	SecondCIDR    netip.Prefix `json:"secondCIDR,omitzero"` // its IPv4 subnet (172.19.0.0/16, Docker's next network)
	// Runtime is how node agents run containers: RuntimeHost (the default, "" too) runs each image as
	// the host program that stands in for it; RuntimeRunc pulls the image from the lab's registry and
	// runs it with runc (agent/runc.go), after lab up built and pushed the images it has
	// (runtimeimages.go).
	Runtime string `json:"runtime,omitempty"`
	// Chart is the packaged chart lab up installs ironlb from (make chart's output: a .tgz, or the
	// directory holding one; chart.go), Helm the helm binary, ChartSet extra values in helm's --set
	// syntax ("a=1,b=2").
	Chart    string `json:"chart,omitempty"`
	Helm     string `json:"helm,omitempty"`
	ChartSet string `json:"chartSet,omitempty"`
}

// Container runtimes of the node agents (Config.Runtime).
const (
	RuntimeHost = "host"
	RuntimeRunc = "runc"
)

// DefaultConfig returns seed 000's cluster.
func DefaultConfig() Config {
	return Config{
		Name:         DefaultName,
		Workers:      DefaultWorkers,
		NodeCIDR:     netip.MustParsePrefix("172.18.0.0/16"),
		NodeCIDR6:    netip.MustParsePrefix("fc00:f853:ccd:e793::/64"),
		PodCIDR:      netip.MustParsePrefix("10.10.0.0/16"),
		PodCIDR6:     netip.MustParsePrefix("fd00:10:10::/56"),
		ServiceCIDR:  netip.MustParsePrefix("10.200.1.0/24"),
		ServiceCIDR6: netip.MustParsePrefix("fd00:10:200:1::/112"),
		ClientName:   DefaultClient,
		ClientAddr:   netip.MustParseAddr("172.18.0.100"),
		IPFamily:     IPFamilyIPv4,
		ProxyMode:    ProxyIPTables,
		RouterCIDR:   netip.MustParsePrefix("192.168.10.0/24"),
		SecondCIDR:   netip.MustParsePrefix("172.19.0.0/16"),
		StateDir:     DefaultStateDir,
		Registry:     true,
	}
}

// Dual reports whether the lab is dual-stack.
func (c Config) Dual() bool { return c.IPFamily == IPFamilyDual }

// IPv6Only reports whether the lab is IPv6-only.
func (c Config) IPv6Only() bool { return c.IPFamily == IPFamilyIPv6 }

// HasIPv6 reports whether the lab's hosts have IPv6 addresses (dual or ipv6).
func (c Config) HasIPv6() bool { return c.Dual() || c.IPv6Only() }

// NodeNet is the bridge's subnet of the hosts' primary addresses (Host.Addr): NodeCIDR, or
// NodeCIDR6 in the IPv6-only lab.
func (c Config) NodeNet() netip.Prefix {
	if c.IPv6Only() {
		return c.NodeCIDR6
	}
	return c.NodeCIDR
}

// PodCIDRs are the cluster's pod CIDRs, primary family first.
func (c Config) PodCIDRs() []netip.Prefix {
	switch {
	case c.IPv6Only():
		return []netip.Prefix{c.PodCIDR6}
	case c.Dual():
		return []netip.Prefix{c.PodCIDR, c.PodCIDR6}
	}
	return []netip.Prefix{c.PodCIDR}
}

// ServiceCIDRs are the cluster's ClusterIP ranges, primary family first.
func (c Config) ServiceCIDRs() []netip.Prefix {
	switch {
	case c.IPv6Only():
		return []netip.Prefix{c.ServiceCIDR6}
	case c.Dual():
		return []netip.Prefix{c.ServiceCIDR, c.ServiceCIDR6}
	}
	return []netip.Prefix{c.ServiceCIDR}
}

// joinPrefixes renders ps comma-separated, as Kubernetes flags take them.
func joinPrefixes(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}

// Validate reports the first problem with c, naming the flag.
func (c Config) Validate() error {
	var errs []error
	if !dnsLabel.MatchString(c.Name) || len(c.Name) > 20 {
		errs = append(errs, fmt.Errorf("--name %q: want 1-20 characters of [a-z0-9-]", c.Name))
	}
	if c.Workers < 0 || c.Workers > 50 {
		errs = append(errs, fmt.Errorf("--workers %d: want 0..50", c.Workers))
	}
	for _, p := range []struct {
		flag string
		p    netip.Prefix
		v6   bool
	}{{"--node-cidr", c.NodeCIDR, false}, {"--pod-cidr", c.PodCIDR, false}, {"--service-cidr", c.ServiceCIDR, false}} {
		if !p.p.IsValid() || !p.p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("%s %s: want an IPv4 CIDR", p.flag, p.p))
		} else if p.p != p.p.Masked() {
			errs = append(errs, fmt.Errorf("%s %s: host bits set (did you mean %s?)", p.flag, p.p, p.p.Masked()))
		}
	}
	if c.NodeCIDR.IsValid() && c.NodeCIDR.Bits() > 28 {
		errs = append(errs, fmt.Errorf("--node-cidr %s: too small for the nodes and the client", c.NodeCIDR))
	}
	if c.PodCIDR.IsValid() && c.PodCIDR.Bits() > 24-bitsFor(c.Workers+1) {
		errs = append(errs, fmt.Errorf("--pod-cidr %s: too small for a /24 per node on %d nodes", c.PodCIDR, c.Workers+1))
	}
	if c.ServiceCIDR.IsValid() && c.ServiceCIDR.Bits() > 28 {
		errs = append(errs, fmt.Errorf("--service-cidr %s: too small", c.ServiceCIDR))
	}
	if c.NodeCIDR.IsValid() && c.PodCIDR.IsValid() && c.NodeCIDR.Overlaps(c.PodCIDR) ||
		c.NodeCIDR.IsValid() && c.ServiceCIDR.IsValid() && c.NodeCIDR.Overlaps(c.ServiceCIDR) ||
		c.PodCIDR.IsValid() && c.ServiceCIDR.IsValid() && c.PodCIDR.Overlaps(c.ServiceCIDR) {
		errs = append(errs, errors.New("--node-cidr, --pod-cidr and --service-cidr must not overlap"))
	}
	if !dnsLabel.MatchString(c.ClientName) || len(c.ClientName) > 30 {
		errs = append(errs, fmt.Errorf("--client %q: want 1-30 characters of [a-z0-9-]", c.ClientName))
	} else if strings.HasPrefix(c.ClientName, c.Name+"-") {
		errs = append(errs, fmt.Errorf("--client %q: must not start with the cluster name (node and namespace names do)", c.ClientName))
	}
	if c.NodeCIDR.IsValid() && c.ClientAddr.IsValid() && c.NodeCIDR.Contains(c.ClientAddr) &&
		(c.ClientAddr == c.NodeCIDR.Masked().Addr() || c.ClientAddr == nthAddr(c.NodeCIDR, 1) ||
			!c.NodeCIDR.Contains(c.ClientAddr.Next())) {
		errs = append(errs, fmt.Errorf("--client-addr %s is the network, gateway or broadcast address of %s", c.ClientAddr, c.NodeCIDR))
	}
	if !c.NodeCIDR.Contains(c.ClientAddr) {
		errs = append(errs, fmt.Errorf("--client-addr %s is not in --node-cidr %s", c.ClientAddr, c.NodeCIDR))
	} else if off := addrOffset(c.NodeCIDR.Addr(), c.ClientAddr); off >= 2 && off < uint64(2+c.Workers+1) {
		errs = append(errs, fmt.Errorf("--client-addr %s collides with a node address", c.ClientAddr))
	}
	switch c.IPFamily {
	case IPFamilyIPv4:
	case IPFamilyDual, IPFamilyIPv6:
		if c.IPv6Only() && c.BGP {
			errs = append(errs, errors.New("--bgp: the router is IPv4 only; not with --ip-family=ipv6"))
		}
		for _, p := range []struct {
			flag string
			p    netip.Prefix
		}{{"--node-cidr6", c.NodeCIDR6}, {"--pod-cidr6", c.PodCIDR6}, {"--service-cidr6", c.ServiceCIDR6}} {
			if !p.p.IsValid() || p.p.Addr().Is4() {
				errs = append(errs, fmt.Errorf("%s %s: want an IPv6 CIDR", p.flag, p.p))
			}
		}
		if c.PodCIDR6.IsValid() && (c.PodCIDR6.Bits() > 64-bitsFor(c.Workers+1) || 64-c.PodCIDR6.Bits() > 16) {
			errs = append(errs, fmt.Errorf("--pod-cidr6 %s: want /48../%d so each node gets a /64", c.PodCIDR6, 64-bitsFor(c.Workers+1)))
		}
		if c.NodeCIDR6.IsValid() && c.PodCIDR6.IsValid() && c.NodeCIDR6.Overlaps(c.PodCIDR6) ||
			c.NodeCIDR6.IsValid() && c.ServiceCIDR6.IsValid() && c.NodeCIDR6.Overlaps(c.ServiceCIDR6) ||
			c.PodCIDR6.IsValid() && c.ServiceCIDR6.IsValid() && c.PodCIDR6.Overlaps(c.ServiceCIDR6) {
			errs = append(errs, errors.New("--node-cidr6, --pod-cidr6 and --service-cidr6 must not overlap"))
		}
		if c.ServiceCIDR6.IsValid() && c.ServiceCIDR6.Bits() < 108 {
			errs = append(errs, fmt.Errorf("--service-cidr6 %s: kube-apiserver wants /108 or smaller", c.ServiceCIDR6))
		}
	default:
		errs = append(errs, fmt.Errorf("--ip-family %q: want ipv4, dual or ipv6", c.IPFamily))
	}
	switch c.ProxyMode {
	case ProxyIPTables, ProxyNFTables, ProxyIronLB:
	default:
		errs = append(errs, fmt.Errorf("--proxy %q: want iptables, nftables (kube-proxy's modes) or ironlb", c.ProxyMode))
	}
	if c.BGP {
		switch {
		case !c.RouterCIDR.IsValid() || !c.RouterCIDR.Addr().Is4() || c.RouterCIDR.Bits() > 24:
			errs = append(errs, fmt.Errorf("--router-cidr %s: want an IPv4 CIDR of /24 or more", c.RouterCIDR))
		case c.RouterCIDR.Overlaps(c.NodeCIDR) || c.RouterCIDR.Overlaps(c.PodCIDR) || c.RouterCIDR.Overlaps(c.ServiceCIDR):
			errs = append(errs, fmt.Errorf("--router-cidr %s must not overlap the node, pod or service CIDR", c.RouterCIDR))
		}
		if c.NodeCIDR.IsValid() && c.ClientAddr == routerAddr(c.NodeCIDR) {
			errs = append(errs, fmt.Errorf("--client-addr %s is the router's address", c.ClientAddr))
		}
		if c.ClientName == RouterName || c.ClientName == Client2Name {
			errs = append(errs, fmt.Errorf("--client %q: the BGP lab uses that name", c.ClientName))
		}
	}
	if c.SecondNetwork {
		if c.IPv6Only() {
			errs = append(errs, errors.New("--second-network: the second network is IPv4 only; not with --ip-family=ipv6"))
		}
		switch {
		case !c.SecondCIDR.IsValid() || !c.SecondCIDR.Addr().Is4() || c.SecondCIDR.Bits() > 24 || c.SecondCIDR != c.SecondCIDR.Masked():
			errs = append(errs, fmt.Errorf("--second-cidr %s: want an IPv4 CIDR of /24 or more without host bits", c.SecondCIDR))
		case c.SecondCIDR.Overlaps(c.NodeCIDR) || c.SecondCIDR.Overlaps(c.PodCIDR) || c.SecondCIDR.Overlaps(c.ServiceCIDR) ||
			c.BGP && c.SecondCIDR.Overlaps(c.RouterCIDR):
			errs = append(errs, fmt.Errorf("--second-cidr %s must not overlap the node, pod, service or router CIDR", c.SecondCIDR))
		}
		if c.ClientName == Client3Name {
			errs = append(errs, fmt.Errorf("--client %q: the second network's client uses that name", c.ClientName))
		}
	}
	if c.Registry && c.NodeCIDR.IsValid() && c.NodeCIDR.Addr().Is4() && c.NodeCIDR.Bits() <= 28 {
		switch ra := registryAddr(c.NodeCIDR); {
		case addrOffset(c.NodeCIDR.Addr(), ra) < uint64(2+c.Workers+1):
			errs = append(errs, fmt.Errorf("--node-cidr %s: too small for %d nodes and the registry at %s (or --registry=false)", c.NodeCIDR, c.Workers+1, ra))
		case c.ClientAddr == ra:
			errs = append(errs, fmt.Errorf("--client-addr %s is the registry's address (or --registry=false)", c.ClientAddr))
		}
	}
	switch c.Runtime {
	case "", RuntimeHost:
	case RuntimeRunc:
		if !c.Registry {
			errs = append(errs, errors.New("--runtime=runc pulls from the lab's registry: not with --registry=false"))
		}
	default:
		errs = append(errs, fmt.Errorf("--runtime %q: want host or runc", c.Runtime))
	}
	if c.StateDir == "" || !strings.HasPrefix(c.StateDir, "/") {
		errs = append(errs, fmt.Errorf("--state-dir %q: want an absolute path", c.StateDir))
	}
	return errors.Join(errs...)
}

// dnsLabel is what a node or namespace name may be.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

func bitsFor(n int) int {
	b := 0
	for (1 << b) < n {
		b++
	}
	return b
}

func addrOffset(base, a netip.Addr) uint64 {
	b4, a4 := base.As16(), a.As16()
	var off uint64
	for i := 8; i < 16; i++ {
		off = off<<8 | uint64(a4[i]-b4[i])
	}
	return off
}

// nthAddr returns the address n after p's base address.
func nthAddr(p netip.Prefix, n uint64) netip.Addr {
	b := p.Masked().Addr().As16()
	carry := n
	for i := 15; i >= 0 && carry > 0; i-- {
		s := uint64(b[i]) + carry&0xff
		b[i] = byte(s)
		carry = carry>>8 + s>>8
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		return a.Unmap()
	}
	return a
}
