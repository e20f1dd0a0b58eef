package lab

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	dual := func(c *Config) { c.IPFamily = IPFamilyDual }
	tests := []struct {
		name   string
		mutate func(*Config)
		// want lists substrings the error must contain (flag names first); nil means valid.
		want []string
	}{
		{name: "default", mutate: func(*Config) {}},
		{name: "default dual", mutate: dual},
		{name: "nftables", mutate: func(c *Config) { c.ProxyMode = ProxyNFTables }},
		{name: "no workers", mutate: func(c *Config) { c.Workers = 0 }},
		{name: "50 workers", mutate: func(c *Config) { c.Workers = 50 }},
		{name: "20 character name", mutate: func(c *Config) { c.Name = strings.Repeat("a", 20) }},
		{name: "name with hyphen and digits", mutate: func(c *Config) { c.Name = "lab-2" }},
		{name: "other node CIDR", mutate: func(c *Config) {
			c.NodeCIDR, c.ClientAddr = pfx("192.168.50.0/24"), addr("192.168.50.200")
		}},
		{name: "smallest node CIDR", mutate: func(c *Config) {
			c.NodeCIDR, c.ClientAddr = pfx("172.18.0.0/28"), addr("172.18.0.14")
		}},
		{name: "client right after the last node", mutate: func(c *Config) { c.ClientAddr = addr("172.18.0.6") }},
		{name: "client at .3 with no workers", mutate: func(c *Config) { c.Workers, c.ClientAddr = 0, addr("172.18.0.3") }},
		{name: "pod CIDR /22 fits 4 nodes", mutate: func(c *Config) { c.PodCIDR = pfx("10.10.0.0/22") }},
		{name: "pod CIDR /24 fits 1 node", mutate: func(c *Config) { c.Workers, c.PodCIDR = 0, pfx("10.10.0.0/24") }},
		{name: "ipv4 family ignores IPv6 CIDRs", mutate: func(c *Config) {
			c.NodeCIDR6, c.PodCIDR6, c.ServiceCIDR6 = netip.Prefix{}, pfx("10.0.0.0/8"), netip.Prefix{}
		}},

		{name: "empty name", mutate: func(c *Config) { c.Name = "" }, want: []string{"--name"}},
		{name: "21 character name", mutate: func(c *Config) { c.Name = strings.Repeat("a", 21) }, want: []string{"--name"}},
		{name: "name with space", mutate: func(c *Config) { c.Name = "my k8s" }, want: []string{"--name", `"my k8s"`}},
		{name: "name with slash", mutate: func(c *Config) { c.Name = "my/k8s" }, want: []string{"--name"}},
		{name: "name with underscore", mutate: func(c *Config) { c.Name = "my_k8s" }, want: []string{"--name"}},
		{name: "name with dot", mutate: func(c *Config) { c.Name = "my.k8s" }, want: []string{"--name"}},

		{name: "negative workers", mutate: func(c *Config) { c.Workers = -1 }, want: []string{"--workers -1"}},
		{name: "51 workers", mutate: func(c *Config) { c.Workers = 51 }, want: []string{"--workers 51"}},

		{name: "IPv6 node CIDR", mutate: func(c *Config) { c.NodeCIDR = pfx("fc00:f853:ccd:e793::/64") },
			want: []string{"--node-cidr fc00:f853:ccd:e793::/64: want an IPv4 CIDR"}},
		{name: "missing node CIDR", mutate: func(c *Config) { c.NodeCIDR = netip.Prefix{} },
			want: []string{"--node-cidr", "want an IPv4 CIDR"}},
		{name: "IPv6 pod CIDR", mutate: func(c *Config) { c.PodCIDR = pfx("fd00:10:10::/56") },
			want: []string{"--pod-cidr fd00:10:10::/56: want an IPv4 CIDR"}},
		{name: "IPv6 service CIDR", mutate: func(c *Config) { c.ServiceCIDR = pfx("fd00:10:200:1::/112") },
			want: []string{"--service-cidr fd00:10:200:1::/112: want an IPv4 CIDR"}},
		{name: "node CIDR host bits", mutate: func(c *Config) { c.NodeCIDR = pfx("172.18.0.1/16") },
			want: []string{"--node-cidr 172.18.0.1/16: host bits set", "172.18.0.0/16"}},
		{name: "pod CIDR host bits", mutate: func(c *Config) { c.PodCIDR = pfx("10.10.1.0/16") },
			want: []string{"--pod-cidr 10.10.1.0/16: host bits set"}},
		{name: "service CIDR host bits", mutate: func(c *Config) { c.ServiceCIDR = pfx("10.200.1.1/24") },
			want: []string{"--service-cidr 10.200.1.1/24: host bits set"}},
		{name: "node CIDR too small", mutate: func(c *Config) {
			c.NodeCIDR, c.ClientAddr = pfx("172.18.0.0/29"), addr("172.18.0.6")
		}, want: []string{"--node-cidr 172.18.0.0/29: too small"}},
		{name: "service CIDR too small", mutate: func(c *Config) { c.ServiceCIDR = pfx("10.200.1.0/29") },
			want: []string{"--service-cidr 10.200.1.0/29: too small"}},
		{name: "pod CIDR too small for 4 nodes", mutate: func(c *Config) { c.PodCIDR = pfx("10.10.0.0/23") },
			want: []string{"--pod-cidr 10.10.0.0/23: too small", "on 4 nodes"}},
		{name: "pod CIDR too small for 5 nodes", mutate: func(c *Config) { c.Workers, c.PodCIDR = 4, pfx("10.10.0.0/22") },
			want: []string{"--pod-cidr", "on 5 nodes"}},

		{name: "pod CIDR overlaps node CIDR", mutate: func(c *Config) { c.PodCIDR = pfx("172.16.0.0/12") },
			want: []string{"--node-cidr, --pod-cidr and --service-cidr must not overlap"}},
		{name: "service CIDR inside node CIDR", mutate: func(c *Config) { c.ServiceCIDR = pfx("172.18.200.0/24") },
			want: []string{"must not overlap"}},
		{name: "service CIDR inside pod CIDR", mutate: func(c *Config) { c.ServiceCIDR = pfx("10.10.200.0/24") },
			want: []string{"must not overlap"}},

		{name: "client outside node CIDR", mutate: func(c *Config) { c.ClientAddr = addr("192.168.1.100") },
			want: []string{"--client-addr 192.168.1.100 is not in --node-cidr 172.18.0.0/16"}},
		{name: "client IPv6", mutate: func(c *Config) { c.ClientAddr = addr("fc00:f853:ccd:e793::64") },
			want: []string{"--client-addr", "is not in --node-cidr"}},
		{name: "missing client", mutate: func(c *Config) { c.ClientAddr = netip.Addr{} },
			want: []string{"--client-addr"}},
		{name: "client on the control plane", mutate: func(c *Config) { c.ClientAddr = addr("172.18.0.2") },
			want: []string{"--client-addr 172.18.0.2 collides with a node address"}},
		{name: "client on the last worker", mutate: func(c *Config) { c.ClientAddr = addr("172.18.0.5") },
			want: []string{"--client-addr 172.18.0.5 collides"}},
		{name: "client on a fifth worker", mutate: func(c *Config) { c.Workers, c.ClientAddr = 4, addr("172.18.0.6") },
			want: []string{"--client-addr 172.18.0.6 collides"}},

		{name: "ip family ipv4-only spelled otherwise", mutate: func(c *Config) { c.IPFamily = "inet" }, want: []string{`--ip-family "inet"`}},
		{name: "ip family ipv6 with the IPv4 router", mutate: func(c *Config) { c.IPFamily = IPFamilyIPv6; c.BGP = true }, want: []string{"--bgp"}},
		{name: "ip family ipv6 with an IPv4 pod CIDR6", mutate: func(c *Config) { c.IPFamily = IPFamilyIPv6; c.PodCIDR6 = netip.MustParsePrefix("10.11.0.0/16") },
			want: []string{"--pod-cidr6"}},
		{name: "ip family empty", mutate: func(c *Config) { c.IPFamily = "" }, want: []string{`--ip-family ""`}},
		{name: "proxy ipvs", mutate: func(c *Config) { c.ProxyMode = "ipvs" }, want: []string{`--proxy "ipvs"`}},
		{name: "proxy empty", mutate: func(c *Config) { c.ProxyMode = "" }, want: []string{`--proxy ""`}},
		{name: "relative state dir", mutate: func(c *Config) { c.StateDir = "run/ironlb-lab" },
			want: []string{`--state-dir "run/ironlb-lab": want an absolute path`}},
		{name: "empty state dir", mutate: func(c *Config) { c.StateDir = "" }, want: []string{`--state-dir ""`}},

		{name: "dual: IPv4 node CIDR6", mutate: func(c *Config) { dual(c); c.NodeCIDR6 = pfx("172.19.0.0/16") },
			want: []string{"--node-cidr6 172.19.0.0/16: want an IPv6 CIDR"}},
		{name: "dual: missing pod CIDR6", mutate: func(c *Config) { dual(c); c.PodCIDR6 = netip.Prefix{} },
			want: []string{"--pod-cidr6", "want an IPv6 CIDR"}},
		{name: "dual: missing service CIDR6", mutate: func(c *Config) { dual(c); c.ServiceCIDR6 = netip.Prefix{} },
			want: []string{"--service-cidr6", "want an IPv6 CIDR"}},
		{name: "dual: pod CIDR6 /64 leaves no /64 per node", mutate: func(c *Config) { dual(c); c.PodCIDR6 = pfx("fd00:10:10::/64") },
			want: []string{"--pod-cidr6 fd00:10:10::/64: want /48../62"}},
		{name: "dual: pod CIDR6 /63 too small for 4 nodes", mutate: func(c *Config) { dual(c); c.PodCIDR6 = pfx("fd00:10:10::/63") },
			want: []string{"--pod-cidr6"}},
		{name: "dual: pod CIDR6 /62 fits 4 nodes", mutate: func(c *Config) { dual(c); c.PodCIDR6 = pfx("fd00:10:10::/62") }},
		{name: "dual: pod CIDR6 /48", mutate: func(c *Config) { dual(c); c.PodCIDR6 = pfx("fd00:10::/48") }},
		{name: "dual: pod CIDR6 /40 too large", mutate: func(c *Config) { dual(c); c.PodCIDR6 = pfx("fd00:10::/40") },
			want: []string{"--pod-cidr6 fd00:10::/40"}},
		{name: "dual: service CIDR6 /64", mutate: func(c *Config) { dual(c); c.ServiceCIDR6 = pfx("fd00:10:200:1::/64") },
			want: []string{"--service-cidr6 fd00:10:200:1::/64: kube-apiserver wants /108 or smaller"}},
		{name: "dual: service CIDR6 /108", mutate: func(c *Config) { dual(c); c.ServiceCIDR6 = pfx("fd00:10:200:1::/108") }},

		{name: "client on the registry's address", mutate: func(c *Config) { c.ClientAddr = addr("172.18.255.253") },
			want: []string{"--client-addr 172.18.255.253 is the registry's address"}},
		{name: "client on the registry's address without a registry", mutate: func(c *Config) { c.ClientAddr, c.Registry = addr("172.18.255.253"), false }},
		{name: "/28 fits 11 nodes and the registry", mutate: func(c *Config) {
			c.NodeCIDR, c.ClientAddr, c.Workers = pfx("172.18.0.0/28"), addr("172.18.0.14"), 10
		}},
		{name: "/28 is too small for 12 nodes and the registry", mutate: func(c *Config) {
			c.NodeCIDR, c.ClientAddr, c.Workers = pfx("172.18.0.0/28"), addr("172.18.0.14"), 11
		}, want: []string{"--node-cidr 172.18.0.0/28: too small for 12 nodes and the registry at 172.18.0.13"}},

		{name: "every problem is reported", mutate: func(c *Config) { c.Workers, c.ProxyMode, c.StateDir = -1, "ipvs", "x" },
			want: []string{"--workers", "--proxy", "--state-dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestValidateGaps lists configurations Validate should reject but, as written, accepts. Each case documents
// the expected behaviour and is skipped with "BUG:" while Validate accepts it.
func TestValidateGaps(t *testing.T) {
	addr := netip.MustParseAddr
	pfx := netip.MustParsePrefix
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // flag the error must name
		bug    string
	}{
		{name: "uppercase name", mutate: func(c *Config) { c.Name = "MyK8s" }, want: "--name",
			bug: "config.go:76 only rejects ' /_.' although the message promises [a-z0-9-]; Node names must be lowercase DNS names"},
		{name: "name with symbols", mutate: func(c *Config) { c.Name = "k8s!" }, want: "--name",
			bug: "config.go:76 accepts characters outside [a-z0-9-]"},
		{name: "client on the gateway", mutate: func(c *Config) { c.ClientAddr = addr("172.18.0.1") }, want: "--client-addr",
			bug: "config.go:109 only checks offsets 2..workers+2; the client may take the bridge's own address (Plan.Gateway)"},
		{name: "client on the network address", mutate: func(c *Config) { c.ClientAddr = addr("172.18.0.0") }, want: "--client-addr",
			bug: "config.go:109 accepts the node CIDR's network address for the client"},
		{name: "client on the broadcast address", mutate: func(c *Config) { c.ClientAddr = addr("172.18.255.255") }, want: "--client-addr",
			bug: "config.go:107 accepts the node CIDR's broadcast address for the client"},
		{name: "empty client name", mutate: func(c *Config) { c.ClientName = "" }, want: "--client",
			bug: "Validate never checks ClientName (--client): an empty namespace name is accepted"},
		{name: "client named like a node", mutate: func(c *Config) { c.ClientName = "myk8s-worker" }, want: "--client",
			bug: "Validate never checks ClientName (--client): it may collide with a node's namespace"},
		{name: "dual: node CIDR6 inside pod CIDR6", mutate: func(c *Config) {
			c.IPFamily, c.NodeCIDR6 = IPFamilyDual, pfx("fd00:10:10:ff::/64")
		}, want: "--node-cidr6",
			bug: "config.go:114-129 has no overlap check for the IPv6 CIDRs although the IPv4 ones are checked (config.go:102)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if err != nil && strings.Contains(err.Error(), tt.want) {
				return
			}
			if tt.bug != "" {
				t.Skipf("BUG: %s (Validate() = %v, want an error naming %s)", tt.bug, err, tt.want)
			}
			t.Errorf("Validate() = %v, want an error naming %s", err, tt.want)
		})
	}
}

func TestNthAddr(t *testing.T) {
	tests := []struct {
		prefix string
		n      uint64
		want   string
	}{
		{"172.18.0.0/16", 0, "172.18.0.0"},
		{"172.18.0.0/16", 1, "172.18.0.1"},
		{"172.18.0.0/16", 100, "172.18.0.100"},
		{"172.18.0.0/16", 255, "172.18.0.255"},
		{"172.18.0.0/16", 256, "172.18.1.0"},
		{"172.18.0.0/16", 257, "172.18.1.1"},
		{"172.18.0.0/16", 65535, "172.18.255.255"},
		{"10.0.0.0/8", 0x010203, "10.1.2.3"},
		{"10.200.1.0/24", 1, "10.200.1.1"},
		{"10.200.1.77/24", 1, "10.200.1.1"}, // host bits are masked off first
		{"192.168.0.128/25", 2, "192.168.0.130"},
		{"192.168.0.255/32", 1, "192.168.1.0"}, // carries past the prefix; callers keep n in range
		{"fc00:f853:ccd:e793::/64", 0, "fc00:f853:ccd:e793::"},
		{"fc00:f853:ccd:e793::/64", 1, "fc00:f853:ccd:e793::1"},
		{"fc00:f853:ccd:e793::/64", 100, "fc00:f853:ccd:e793::64"},
		{"fc00:f853:ccd:e793::/64", 0x1_0000, "fc00:f853:ccd:e793::1:0"},
		{"fd00::/8", 1 << 63, "fd00::8000:0:0:0"},
		{"fd00::ff:ffff/120", 1, "fd00::ff:ff01"}, // host bits are masked off first
		{"fd00::ff:ff00/120", 0x100, "fd00::100:0"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s+%d", tt.prefix, tt.n), func(t *testing.T) {
			got := nthAddr(netip.MustParsePrefix(tt.prefix), tt.n)
			if want := netip.MustParseAddr(tt.want); got != want {
				t.Errorf("nthAddr(%s, %d) = %s, want %s", tt.prefix, tt.n, got, want)
			}
			if p := netip.MustParsePrefix(tt.prefix); got.Is4() != p.Addr().Is4() {
				t.Errorf("nthAddr(%s, %d) = %s: family differs from the prefix", tt.prefix, tt.n, got)
			}
		})
	}
}

func TestAddrOffset(t *testing.T) {
	tests := []struct {
		base, addr string
		want       uint64
	}{
		{"172.18.0.0", "172.18.0.0", 0},
		{"172.18.0.0", "172.18.0.2", 2},
		{"172.18.0.0", "172.18.0.100", 100},
		{"172.18.0.0", "172.18.1.2", 258},
		{"172.18.0.0", "172.18.255.255", 65535},
		{"10.0.0.0", "10.1.2.3", 0x010203},
		{"192.168.0.128", "192.168.0.130", 2},
		{"fc00:f853:ccd:e793::", "fc00:f853:ccd:e793::64", 100},
		{"fc00:f853:ccd:e793::", "fc00:f853:ccd:e793::1:0", 0x1_0000},
	}
	for _, tt := range tests {
		t.Run(tt.base+"->"+tt.addr, func(t *testing.T) {
			if got := addrOffset(netip.MustParseAddr(tt.base), netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("addrOffset(%s, %s) = %d, want %d", tt.base, tt.addr, got, tt.want)
			}
		})
	}
	// nthAddr and addrOffset are inverses inside a prefix.
	p := netip.MustParsePrefix("172.18.0.0/16")
	for _, n := range []uint64{0, 1, 2, 99, 100, 255, 256, 4097, 65535} {
		if got := addrOffset(p.Addr(), nthAddr(p, n)); got != n {
			t.Errorf("addrOffset(base, nthAddr(%s, %d)) = %d", p, n, got)
		}
	}
}
