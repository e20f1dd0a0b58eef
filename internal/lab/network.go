package lab

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// createNetwork builds the bridge namespace and one namespace per host with eth0 on the bridge, as
// Docker's "kind" network does. Nothing is added to the root namespace: every veth is created directly
// between two lab namespaces.
func (l *Lab) createNetwork(ctx context.Context) error {
	p := l.Plan
	c := p.Config
	if err := ip(ctx, "netns", "add", p.BridgeNS); err != nil {
		return err
	}
	br := []string{
		"link set lo up",
		"link add " + p.Bridge + " type bridge",
		fmt.Sprintf("addr add %s/%d dev %s", p.Gateway, c.NodeCIDR.Bits(), p.Bridge),
		"link set " + p.Bridge + " up",
	}
	if c.Dual() {
		br = append(br, fmt.Sprintf("addr add %s/%d dev %s nodad", p.Gateway6, c.NodeCIDR6.Bits(), p.Bridge))
	}
	if err := ipBatch(ctx, p.BridgeNS, br); err != nil {
		return err
	}
	for _, h := range p.Hosts() {
		if err := ip(ctx, "netns", "add", h.Name); err != nil {
			return err
		}
		port := bridgePort(h)
		if err := ip(ctx, "-n", h.Name, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", p.BridgeNS); err != nil {
			return err
		}
		cmds := []string{
			"link set lo up",
			"link set eth0 address " + h.MAC,
			fmt.Sprintf("addr add %s/%d dev eth0", h.Addr, c.NodeCIDR.Bits()),
		}
		if c.Dual() {
			cmds = append(cmds, fmt.Sprintf("addr add %s/%d dev eth0 nodad", h.Addr6, c.NodeCIDR6.Bits()))
		}
		cmds = append(cmds, "link set eth0 up", "route add default via "+p.Gateway.String())
		if c.Dual() {
			cmds = append(cmds, "route add default via "+p.Gateway6.String())
		}
		if err := ipBatch(ctx, h.Name, cmds); err != nil {
			return err
		}
		if err := ipBatch(ctx, p.BridgeNS, []string{"link set " + port + " master " + p.Bridge, "link set " + port + " up"}); err != nil {
			return err
		}
		kv := map[string]string{}
		if h.Role != RoleClient {
			kv["net.ipv4.ip_forward"] = "1"
			kv["net.ipv4.conf.all.rp_filter"] = "0"
			kv["net.ipv4.conf.default.rp_filter"] = "0"
			if c.Dual() {
				kv["net.ipv6.conf.all.forwarding"] = "1"
			}
		}
		if c.Dual() {
			kv["net.ipv6.conf.all.accept_dad"] = "0"
			kv["net.ipv6.conf.default.accept_dad"] = "0"
		}
		if len(kv) > 0 {
			if err := sysctls(h.Name, kv); err != nil {
				return err
			}
		}
	}
	return nil
}

// bridgePort is the bridge-side name of a host's link; `lab stop-node` sets it down (the cable is pulled).
func bridgePort(h Host) string { return fmt.Sprintf("veth%d", h.Index) }

// setLink sets a host's bridge port up or down.
func (l *Lab) setLink(ctx context.Context, h Host, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip(ctx, "-n", l.Plan.BridgeNS, "link", "set", bridgePort(h), state)
}

// labNetNS lists the lab's namespaces that exist now: the Pods' first, then hosts, then the bridge.
func (l *Lab) labNetNS() []string {
	var pods, hosts []string
	for _, name := range ListNetNS() {
		for _, n := range l.Plan.Nodes {
			if strings.HasPrefix(name, PodNetNSPrefix(n.Name)) {
				pods = append(pods, name)
			}
		}
	}
	for _, h := range l.Plan.Hosts() {
		if NetNSExists(h.Name) {
			hosts = append(hosts, h.Name)
		}
	}
	if NetNSExists(l.Plan.BridgeNS) {
		hosts = append(hosts, l.Plan.BridgeNS)
	}
	return append(pods, hosts...)
}

// writeHosts writes the /etc/hosts containers see, resolving node names as Docker's embedded DNS does in
// kind.
func (l *Lab) writeHosts() error {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, h := range l.Plan.Hosts() {
		fmt.Fprintf(&b, "%s\t%s\n", h.Addr, h.Name)
		if h.Addr6.IsValid() {
			fmt.Fprintf(&b, "%s\t%s\n", h.Addr6, h.Name)
		}
	}
	return os.WriteFile(l.State.HostsFile(), []byte(b.String()), 0o644)
}
