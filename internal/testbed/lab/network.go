package lab

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
		fmt.Sprintf("addr add %s/%d dev %s%s", p.Gateway, c.NodeNet().Bits(), p.Bridge, nodad(p.Gateway)),
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
			fmt.Sprintf("addr add %s/%d dev eth0%s", h.Addr, c.NodeNet().Bits(), nodad(h.Addr)),
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
		if h.IsNode() || h.Role == RoleRouter { // they forward; the client and the registry are end hosts
			kv["net.ipv4.ip_forward"] = "1"
			kv["net.ipv4.conf.all.rp_filter"] = "0"
			kv["net.ipv4.conf.default.rp_filter"] = "0"
			if c.HasIPv6() {
				kv["net.ipv6.conf.all.forwarding"] = "1"
			}
		}
		if h.Role == RoleRouter {
			// ECMP by 5-tuple, as routers do: one client's connections spread over the nodes.
			kv["net.ipv4.fib_multipath_hash_policy"] = "1"
		}
		if c.HasIPv6() {
			kv["net.ipv6.conf.all.accept_dad"] = "0"
			kv["net.ipv6.conf.default.accept_dad"] = "0"
		}
		if len(kv) > 0 {
			if err := sysctls(h.Name, kv); err != nil {
				return err
			}
		}
	}
	if p.Router.Name != "" {
		if err := l.createRouterNetwork(ctx); err != nil {
			return err
		}
	}
	if p.Bridge2 != "" {
		return l.createSecondNetwork(ctx)
	}
	return nil
}

// createSecondNetwork builds the second layer-2 network (issue 20: announcing on secondary NICs): a
// bridge in the bridge namespace, SecondIface on every node (a veth to it) with an address of
// SecondCIDR, and Client3 on it. It has no gateway and no route beyond its subnet: nodes and Client3
// reach each other on-link. Everything lives in lab namespaces and goes with them.
func (l *Lab) createSecondNetwork(ctx context.Context) error {
	p := l.Plan
	bits := p.Config.SecondCIDR.Bits()
	if err := ipBatch(ctx, p.BridgeNS, []string{"link add " + p.Bridge2 + " type bridge", "link set " + p.Bridge2 + " up"}); err != nil {
		return err
	}
	attach := func(ns, ifname, port string, addr netip.Addr, mac string) error {
		if err := ip(ctx, "-n", ns, "link", "add", ifname, "type", "veth", "peer", "name", port, "netns", p.BridgeNS); err != nil {
			return err
		}
		if err := ipBatch(ctx, ns, []string{
			"link set " + ifname + " address " + mac,
			fmt.Sprintf("addr add %s/%d dev %s", addr, bits, ifname),
			"link set " + ifname + " up",
		}); err != nil {
			return err
		}
		return ipBatch(ctx, p.BridgeNS, []string{"link set " + port + " master " + p.Bridge2, "link set " + port + " up"})
	}
	for _, n := range p.Nodes {
		if err := attach(n.Name, SecondIface, secondPort(n), p.SecondAddr(n), p.SecondMAC(n)); err != nil {
			return err
		}
	}
	c3 := p.Client3
	if err := ip(ctx, "netns", "add", c3.Name); err != nil {
		return err
	}
	if err := ipBatch(ctx, c3.Name, []string{"link set lo up"}); err != nil {
		return err
	}
	return attach(c3.Name, "eth0", "veth2-c", c3.Addr, c3.MAC)
}

// secondPort is the bridge-side name of a node's link to the second network.
func secondPort(h Host) string { return fmt.Sprintf("veth2-%d", h.Index) }

// nodad is the option that skips duplicate address detection on an IPv6 address (the lab's
// addresses are unique by construction; DAD would delay them by a second).
func nodad(a netip.Addr) string {
	if a.Is6() {
		return " nodad"
	}
	return ""
}

// createRouterNetwork links Client2 to the router (seed 003: a client on another subnet that reaches
// the service addresses only through the router) and routes that subnet from every node via the
// router, so replies that keep the client's address (externalTrafficPolicy: Local) find their way.
func (l *Lab) createRouterNetwork(ctx context.Context) error {
	p := l.Plan
	c2, r := p.Client2, p.Router
	bits := p.Config.RouterCIDR.Bits()
	if err := ip(ctx, "netns", "add", c2.Name); err != nil {
		return err
	}
	if err := ip(ctx, "-n", c2.Name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1", "netns", r.Name); err != nil {
		return err
	}
	if err := ipBatch(ctx, c2.Name, []string{
		"link set lo up",
		"link set eth0 address " + c2.MAC,
		fmt.Sprintf("addr add %s/%d dev eth0", c2.Addr, bits),
		"link set eth0 up",
		"route add default via " + p.RouterLANAddr.String(),
	}); err != nil {
		return err
	}
	if err := ipBatch(ctx, r.Name, []string{fmt.Sprintf("addr add %s/%d dev eth1", p.RouterLANAddr, bits), "link set eth1 up"}); err != nil {
		return err
	}
	for _, n := range p.Nodes {
		if err := ipBatch(ctx, n.Name, []string{fmt.Sprintf("route add %s via %s", p.Config.RouterCIDR, r.Addr)}); err != nil {
			return err
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
	// In-process netlink rather than a forked `ip`: a power cut must land within microseconds of the
	// instant the failover benchmark records, not after a fork and exec.
	if err := InNetNS(l.Plan.BridgeNS, func() error { _, err := linkSetUp(bridgePort(h), up); return err }); err != nil {
		return fmt.Errorf("link set %s %s in %s: %w", bridgePort(h), state, l.Plan.BridgeNS, err)
	}
	// A power cut or a partition pulls the node's cable to the second network too.
	if l.Plan.Bridge2 != "" && h.IsNode() {
		if err := InNetNS(l.Plan.BridgeNS, func() error { _, err := linkSetUp(secondPort(h), up); return err }); err != nil {
			return fmt.Errorf("link set %s %s in %s: %w", secondPort(h), state, l.Plan.BridgeNS, err)
		}
	}
	return nil
}

// CutLink takes a host's link down and returns the instant just before the kernel was asked to (the
// request is applied synchronously), for benchmarks that time from a power cut.
func (l *Lab) CutLink(name string) (time.Time, error) {
	h, ok := l.Plan.Host(name)
	if !ok {
		return time.Time{}, fmt.Errorf("no host %q in lab %s", name, l.Plan.Config.Name)
	}
	var at time.Time
	err := InNetNS(l.Plan.BridgeNS, func() error {
		var err error
		at, err = linkSetUp(bridgePort(h), false)
		return err
	})
	return at, err
}

// PowerCut cuts a node's power as the benchmarks time it: its link goes down first (the returned instant
// is just before the kernel was asked to), then its processes are killed (StopNode).
func (l *Lab) PowerCut(ctx context.Context, name string) (time.Time, error) {
	at, err := l.CutLink(name)
	if err != nil {
		return at, err
	}
	return at, l.StopNode(ctx, name)
}

// linkSetUp sets or clears IFF_UP on an interface of the calling thread's network namespace
// (RTM_NEWLINK with an acknowledgement) and returns the instant the request was sent.
func linkSetUp(name string, up bool) (time.Time, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return time.Time{}, err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return time.Time{}, err
	}
	defer unix.Close(fd)
	b := make([]byte, unix.NLMSG_HDRLEN+unix.SizeofIfInfomsg)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.RTM_NEWLINK)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(b[8:], 1)
	m := b[unix.NLMSG_HDRLEN:]
	m[0] = unix.AF_UNSPEC
	ne.PutUint32(m[4:], uint32(ifi.Index))
	var flags uint32
	if up {
		flags = unix.IFF_UP
	}
	ne.PutUint32(m[8:], flags)
	ne.PutUint32(m[12:], unix.IFF_UP)
	at := time.Now()
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return at, err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return at, err
	}
	if n < unix.NLMSG_HDRLEN+4 || ne.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return at, fmt.Errorf("unexpected netlink answer (%d bytes)", n)
	}
	if code := int32(ne.Uint32(buf[unix.NLMSG_HDRLEN:])); code != 0 {
		return at, unix.Errno(-code)
	}
	return at, nil
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
	for _, h := range l.Plan.AllHosts() {
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
	for _, h := range l.Plan.AllHosts() {
		fmt.Fprintf(&b, "%s\t%s\n", h.Addr, h.Name)
		if h.Addr6.IsValid() {
			fmt.Fprintf(&b, "%s\t%s\n", h.Addr6, h.Name)
		}
	}
	return os.WriteFile(l.State.HostsFile(), []byte(b.String()), 0o644)
}

// FlapIface takes a node's own eth0 down inside its namespace for d (or until ctx ends), then up
// again with the addresses and routes it had: a NIC flap that the node's network configuration
// repairs (where SetLink pulls the cable at the bridge, the node sees its interface go). Down drops
// the interface's routes (the default, the other nodes' pod subnets, the router's) and its IPv6
// addresses; they are put back on every path, from a context that is not canceled.
func (l *Lab) FlapIface(ctx context.Context, name string, d time.Duration) error {
	h, ok := l.Plan.Host(name)
	if !ok || !h.IsNode() {
		return fmt.Errorf("no node %q in lab %s", name, l.Plan.Config.Name)
	}
	var routes []string
	for _, fam := range []string{"-4", "-6"} {
		out, err := exec.CommandContext(ctx, "ip", "-n", h.Name, fam, "-o", "route", "show", "dev", "eth0").Output()
		if err != nil {
			return fmt.Errorf("ip -n %s %s route show dev eth0: %w", h.Name, fam, err)
		}
		for _, r := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if r = strings.TrimSpace(r); r != "" && !strings.Contains(r, "proto kernel") && !strings.HasPrefix(r, "fe80:") {
				routes = append(routes, r)
			}
		}
	}
	if err := ipBatch(ctx, h.Name, []string{"link set eth0 down"}); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	c := l.Plan.Config
	cmds := []string{"link set eth0 up", fmt.Sprintf("addr replace %s/%d dev eth0%s", h.Addr, c.NodeNet().Bits(), nodad(h.Addr))}
	if c.Dual() {
		cmds = append(cmds, fmt.Sprintf("addr replace %s/%d dev eth0 nodad", h.Addr6, c.NodeCIDR6.Bits()))
	}
	for _, r := range routes {
		cmds = append(cmds, "route replace "+r+" dev eth0")
	}
	return ipBatch(context.WithoutCancel(ctx), h.Name, cmds)
}

// ExtraAddr adds (add) or removes an address of the nodes' subnet (Config.NodeNet) on a lab host's eth0: the
// attacker in the client's namespace taking over a cut node's address. Only lab namespaces are
// touched. Removing an address that is not there is not an error.
func (l *Lab) ExtraAddr(ctx context.Context, host string, a netip.Addr, add bool) error {
	h, ok := l.Plan.Host(host)
	if !ok || h.Index < 0 {
		return fmt.Errorf("no host %q on the bridge of lab %s", host, l.Plan.Config.Name)
	}
	if !l.Plan.Config.NodeNet().Contains(a) {
		return fmt.Errorf("%s is outside the lab's node subnet %s", a, l.Plan.Config.NodeNet())
	}
	pfx := fmt.Sprintf("%s/%d", a, l.Plan.Config.NodeNet().Bits())
	if add {
		if a.Is6() {
			return ip(ctx, "-n", h.Name, "addr", "add", pfx, "dev", "eth0", "nodad")
		}
		return ip(ctx, "-n", h.Name, "addr", "add", pfx, "dev", "eth0")
	}
	out, err := exec.CommandContext(ctx, "ip", "-n", h.Name, "addr", "del", pfx, "dev", "eth0").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Cannot assign requested address") {
		return fmt.Errorf("ip -n %s addr del %s: %w: %s", h.Name, pfx, err, strings.TrimSpace(string(out)))
	}
	return nil
}
