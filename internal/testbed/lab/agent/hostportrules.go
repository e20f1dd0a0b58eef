package agent

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// HostPortTable is the nftables table (family inet) in which a node agent DNATs its Pods' hostPorts,
// as the CNI portmap plugin does in its own table (cni_hostport): the agent's alone, so that rebuilding
// it never touches the proxy's table.
const HostPortTable = "ironlb-lab-hostports"

// hostPortMapping is one hostPort of a Pod on one of its addresses: traffic to the node on HostIP (any
// local address when invalid) and HostPort/Proto goes to PodIP:ContainerPort.
type hostPortMapping struct {
	Proto         string // tcp, udp or sctp
	HostIP        netip.Addr
	HostPort      int32
	PodIP         netip.Addr
	ContainerPort int32
}

// hostPortMappings lists the hostPorts of pod, whose sandbox has addresses podIPs, as the kubelet hands
// them to the portmap plugin: each container port with a hostPort, on each Pod address of the family of
// its hostIP (on every family when hostIP is empty or unspecified). A hostNetwork Pod has none: its
// ports are the node's already. A hostIP that is not an address is an error naming the container.
func hostPortMappings(pod *corev1.Pod, podIPs []netip.Addr) ([]hostPortMapping, error) {
	if pod.Spec.HostNetwork {
		return nil, nil
	}
	var ms []hostPortMapping
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			if p.HostPort < 0 || p.HostPort > 65535 || p.ContainerPort <= 0 || p.ContainerPort > 65535 {
				return nil, fmt.Errorf("container %s: hostPort %d to containerPort %d: not a port", c.Name, p.HostPort, p.ContainerPort)
			}
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			if proto != "tcp" && proto != "udp" && proto != "sctp" {
				return nil, fmt.Errorf("container %s: hostPort %d: protocol %q is not TCP, UDP or SCTP", c.Name, p.HostPort, p.Protocol)
			}
			// hostIP: one local address; unspecified (0.0.0.0, ::): every local address of its family;
			// empty: every local address of every family.
			var hostIP, family netip.Addr
			if p.HostIP != "" {
				a, err := netip.ParseAddr(p.HostIP)
				if err != nil {
					return nil, fmt.Errorf("container %s: hostPort %d: hostIP %q is not an IP address", c.Name, p.HostPort, p.HostIP)
				}
				family = a.Unmap()
				if !a.IsUnspecified() {
					hostIP = family
				}
			}
			for _, ip := range podIPs {
				if family.IsValid() && family.Is4() != ip.Is4() {
					continue // a hostIP of the other family: the portmap plugin ignores it for this address
				}
				ms = append(ms, hostPortMapping{Proto: proto, HostIP: hostIP, HostPort: p.HostPort, PodIP: ip, ContainerPort: p.ContainerPort})
			}
		}
	}
	return ms, nil
}

// hostPortRules writes into tx the whole HostPortTable for mappings (every Pod's of the node): traffic
// to a local address of the node (prerouting, and output for the node's own processes) on a hostPort is
// DNATed to its Pod, the mappings with a hostIP first; a Pod reaching itself through its hostPort
// (hairpin) and the node reaching a Pod from 127.0.0.1 are masqueraded, as the portmap plugin does.
// With no mapping the table is deleted. tx must belong to an Interface for family inet and table
// HostPortTable. The rules come out in a fixed order whatever the order of mappings.
func hostPortRules(tx *knftables.Transaction, mappings []hostPortMapping) {
	tx.Add(&knftables.Table{})
	if len(mappings) == 0 {
		tx.Delete(&knftables.Table{})
		return
	}
	ms := slices.Clone(mappings)
	slices.SortFunc(ms, func(a, b hostPortMapping) int {
		// hostIP mappings before the any-address ones (the portmap plugin's hostip_hostports chain
		// comes first), then by family, port, protocol, host address, Pod address.
		if c := cmp.Compare(boolInt(!a.HostIP.IsValid()), boolInt(!b.HostIP.IsValid())); c != 0 {
			return c
		}
		if c := cmp.Compare(boolInt(a.PodIP.Is6()), boolInt(b.PodIP.Is6())); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.HostPort, b.HostPort), cmp.Compare(a.Proto, b.Proto),
			a.HostIP.Compare(b.HostIP), a.PodIP.Compare(b.PodIP), cmp.Compare(a.ContainerPort, b.ContainerPort))
	})
	tx.Flush(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "hostports"})
	tx.Add(&knftables.Chain{Name: "prerouting", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
	tx.Add(&knftables.Chain{Name: "output", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.OutputHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
	tx.Add(&knftables.Chain{Name: "masquerading", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.SNATPriority)})
	tx.Add(&knftables.Rule{Chain: "prerouting", Rule: "fib daddr type local jump hostports"})
	tx.Add(&knftables.Rule{Chain: "output", Rule: "fib daddr type local jump hostports"})
	seen := map[netip.Addr]bool{}
	for _, m := range ms {
		ipX, nfproto := "ip", "ipv4"
		if m.PodIP.Is6() {
			ipX, nfproto = "ip6", "ipv6"
		}
		match := knftables.Concat("meta nfproto", nfproto)
		if m.HostIP.IsValid() {
			match = knftables.Concat(ipX, "daddr", m.HostIP)
		}
		to := netip.AddrPortFrom(m.PodIP, uint16(m.ContainerPort)).String()
		tx.Add(&knftables.Rule{Chain: "hostports",
			Rule: knftables.Concat(match, m.Proto, "dport", strconv.Itoa(int(m.HostPort)), "dnat", ipX, "to", to)})
		if seen[m.PodIP] {
			continue
		}
		seen[m.PodIP] = true
		tx.Add(&knftables.Rule{Chain: "masquerading",
			Rule: knftables.Concat(ipX, "saddr", m.PodIP, ipX, "daddr", m.PodIP, "masquerade")})
		if m.PodIP.Is4() {
			tx.Add(&knftables.Rule{Chain: "masquerading",
				Rule: knftables.Concat("ip saddr 127.0.0.1 ip daddr", m.PodIP, "masquerade")})
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
