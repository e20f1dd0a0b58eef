package agent

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

func TestHostPortMappings(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:10:244:1::5")
	node4 := netip.MustParseAddr("172.18.0.3")
	pod := func(hostNetwork bool, ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: hostNetwork,
			Containers: []corev1.Container{{Name: "c", Ports: ports}}}}
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		ips     []netip.Addr
		want    []hostPortMapping
		wantErr string
	}{
		{name: "no hostPort", pod: pod(false, corev1.ContainerPort{ContainerPort: 80}), ips: []netip.Addr{v4}},
		{name: "hostNetwork: the node's ports already", pod: pod(true, corev1.ContainerPort{ContainerPort: 80, HostPort: 80}), ips: []netip.Addr{node4}},
		{name: "TCP by default, every address",
			pod: pod(false, corev1.ContainerPort{ContainerPort: 8080, HostPort: 54323}), ips: []netip.Addr{v4},
			want: []hostPortMapping{{Proto: "tcp", HostPort: 54323, PodIP: v4, ContainerPort: 8080}}},
		{name: "dual-stack Pod: one per family",
			pod: pod(false, corev1.ContainerPort{ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP}), ips: []netip.Addr{v4, v6},
			want: []hostPortMapping{{Proto: "udp", HostPort: 5353, PodIP: v4, ContainerPort: 53}, {Proto: "udp", HostPort: 5353, PodIP: v6, ContainerPort: 53}}},
		{name: "hostIP: that address, its family only",
			pod: pod(false, corev1.ContainerPort{ContainerPort: 8080, HostPort: 54323, HostIP: "127.0.0.1"}), ips: []netip.Addr{v4, v6},
			want: []hostPortMapping{{Proto: "tcp", HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: 54323, PodIP: v4, ContainerPort: 8080}}},
		{name: "unspecified hostIP: every address of its family",
			pod: pod(false, corev1.ContainerPort{ContainerPort: 8080, HostPort: 8080, HostIP: "::"}), ips: []netip.Addr{v4, v6},
			want: []hostPortMapping{{Proto: "tcp", HostPort: 8080, PodIP: v6, ContainerPort: 8080}}},
		{name: "hostIP of the other family: nothing",
			pod: pod(false, corev1.ContainerPort{ContainerPort: 8080, HostPort: 8080, HostIP: "fd00::1"}), ips: []netip.Addr{v4}},
		{name: "SCTP", pod: pod(false, corev1.ContainerPort{ContainerPort: 9, HostPort: 9, Protocol: corev1.ProtocolSCTP}), ips: []netip.Addr{v4},
			want: []hostPortMapping{{Proto: "sctp", HostPort: 9, PodIP: v4, ContainerPort: 9}}},
		{name: "bad hostIP", pod: pod(false, corev1.ContainerPort{ContainerPort: 80, HostPort: 80, HostIP: "node1"}), ips: []netip.Addr{v4},
			wantErr: `container c: hostPort 80: hostIP "node1" is not an IP address`},
		{name: "bad protocol", pod: pod(false, corev1.ContainerPort{ContainerPort: 80, HostPort: 80, Protocol: "ICMP"}), ips: []netip.Addr{v4},
			wantErr: `protocol "ICMP" is not TCP, UDP or SCTP`},
		{name: "bad port", pod: pod(false, corev1.ContainerPort{ContainerPort: 0, HostPort: 80}), ips: []netip.Addr{v4},
			wantErr: "hostPort 80 to containerPort 0: not a port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hostPortMappings(tt.pod, tt.ips)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestHostPortRules(t *testing.T) {
	p1, p2 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.1.6")
	p6 := netip.MustParseAddr("fd00:10:244:1::6")
	lo, node := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("172.18.0.3")
	// The upstream HostPort test: one hostPort, three Pods told apart by hostIP and protocol.
	upstream := []hostPortMapping{
		{Proto: "udp", HostIP: node, HostPort: 54323, PodIP: p2, ContainerPort: 8080},
		{Proto: "tcp", HostIP: lo, HostPort: 54323, PodIP: p1, ContainerPort: 8080},
		{Proto: "tcp", HostPort: 8081, PodIP: p6, ContainerPort: 80},
		{Proto: "tcp", HostIP: node, HostPort: 54323, PodIP: p2, ContainerPort: 8080},
	}
	head := `add table inet ironlb-lab-hostports
add chain inet ironlb-lab-hostports hostports
add chain inet ironlb-lab-hostports masquerading { type nat hook postrouting priority 100 ; }
add chain inet ironlb-lab-hostports output { type nat hook output priority -100 ; }
add chain inet ironlb-lab-hostports prerouting { type nat hook prerouting priority -100 ; }
`
	tests := []struct {
		name     string
		before   []hostPortMapping // programmed first: a rebuild replaces them
		mappings []hostPortMapping
		want     string
	}{
		{name: "none: no table", mappings: nil, want: ""},
		{name: "the last Pod gone: the table goes", before: upstream, mappings: nil, want: ""},
		{name: "hostIP rules first, one masquerade pair per Pod address", mappings: upstream, want: head +
			`add rule inet ironlb-lab-hostports hostports ip daddr 127.0.0.1 tcp dport 54323 dnat ip to 10.244.1.5:8080
add rule inet ironlb-lab-hostports hostports ip daddr 172.18.0.3 tcp dport 54323 dnat ip to 10.244.1.6:8080
add rule inet ironlb-lab-hostports hostports ip daddr 172.18.0.3 udp dport 54323 dnat ip to 10.244.1.6:8080
add rule inet ironlb-lab-hostports hostports meta nfproto ipv6 tcp dport 8081 dnat ip6 to [fd00:10:244:1::6]:80
add rule inet ironlb-lab-hostports masquerading ip saddr 10.244.1.5 ip daddr 10.244.1.5 masquerade
add rule inet ironlb-lab-hostports masquerading ip saddr 127.0.0.1 ip daddr 10.244.1.5 masquerade
add rule inet ironlb-lab-hostports masquerading ip saddr 10.244.1.6 ip daddr 10.244.1.6 masquerade
add rule inet ironlb-lab-hostports masquerading ip saddr 127.0.0.1 ip daddr 10.244.1.6 masquerade
add rule inet ironlb-lab-hostports masquerading ip6 saddr fd00:10:244:1::6 ip6 daddr fd00:10:244:1::6 masquerade
add rule inet ironlb-lab-hostports output fib daddr type local jump hostports
add rule inet ironlb-lab-hostports prerouting fib daddr type local jump hostports
`},
		{name: "a rebuild keeps only the new mappings", before: upstream,
			mappings: []hostPortMapping{{Proto: "tcp", HostPort: 80, PodIP: p1, ContainerPort: 8080}}, want: head +
				`add rule inet ironlb-lab-hostports hostports meta nfproto ipv4 tcp dport 80 dnat ip to 10.244.1.5:8080
add rule inet ironlb-lab-hostports masquerading ip saddr 10.244.1.5 ip daddr 10.244.1.5 masquerade
add rule inet ironlb-lab-hostports masquerading ip saddr 127.0.0.1 ip daddr 10.244.1.5 masquerade
add rule inet ironlb-lab-hostports output fib daddr type local jump hostports
add rule inet ironlb-lab-hostports prerouting fib daddr type local jump hostports
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := knftables.NewFake(knftables.InetFamily, HostPortTable)
			for _, ms := range [][]hostPortMapping{tt.before, tt.mappings} {
				tx := fake.NewTransaction()
				hostPortRules(tx, ms)
				if err := fake.Run(context.Background(), tx); err != nil {
					t.Fatal(err)
				}
			}
			if got := fake.Dump(); got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
			// The order of the mappings does not change the rules.
			rev := slices.Clone(tt.mappings)
			slices.Reverse(rev)
			fake2 := knftables.NewFake(knftables.InetFamily, HostPortTable)
			tx := fake2.NewTransaction()
			hostPortRules(tx, rev)
			if err := fake2.Run(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
			if got := fake2.Dump(); got != tt.want {
				t.Fatalf("reversed mappings: got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
