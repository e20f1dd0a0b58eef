package agent

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// The cases follow the kubelet's own tests of GetPodDNS (pkg/kubelet/network/dns/dns_test.go:
// TestGetPodDNSType, TestGetPodDNS, TestGetPodDNSCustom, TestFormDNSSearchFitsLimits).
func TestPodDNS(t *testing.T) {
	nodeResolv := []byte("# the node's\nnameserver 10.0.0.53\nsearch example.com corp.example.com.\noptions rotate timeout:2\n")
	settings := DNSSettings{ClusterDNS: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, ClusterDomain: "cluster.local", NodeResolv: nodeResolv}
	clusterSearch := []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.com", "corp.example.com"}
	pod := func(policy corev1.DNSPolicy, hostNet bool, cfg *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns1"},
			Spec: corev1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: cfg}}
	}
	long := func(n int, c string) string { return strings.Repeat(c, n) }
	var many []string
	for i := range 40 {
		many = append(many, "d"+string(rune('a'+i%26))+strings.Repeat("x", i))
	}
	cases := []struct {
		name     string
		s        DNSSettings
		pod      *corev1.Pod
		want     ResolvConf
		warnings int
	}{
		{name: "ClusterFirst", s: settings, pod: pod(corev1.DNSClusterFirst, false, nil),
			want: ResolvConf{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}}},
		{name: "empty policy is ClusterFirst (defaulted by the apiserver; the kubelet treats it so)", s: settings, pod: pod("", false, nil),
			want: ResolvConf{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}}},
		{name: "ClusterFirst on hostNetwork falls back to Default", s: settings, pod: pod(corev1.DNSClusterFirst, true, nil),
			want: ResolvConf{Servers: []string{"10.0.0.53"}, Searches: []string{"example.com", "corp.example.com"}, Options: []string{"rotate", "timeout:2"}}},
		{name: "ClusterFirstWithHostNet on hostNetwork", s: settings, pod: pod(corev1.DNSClusterFirstWithHostNet, true, nil),
			want: ResolvConf{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}}},
		{name: "ClusterFirstWithHostNet without hostNetwork", s: settings, pod: pod(corev1.DNSClusterFirstWithHostNet, false, nil),
			want: ResolvConf{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}}},
		{name: "Default", s: settings, pod: pod(corev1.DNSDefault, false, nil),
			want: ResolvConf{Servers: []string{"10.0.0.53"}, Searches: []string{"example.com", "corp.example.com"}, Options: []string{"rotate", "timeout:2"}}},
		{name: "None without dnsConfig is empty", s: settings, pod: pod(corev1.DNSNone, false, &corev1.PodDNSConfig{}),
			want: ResolvConf{}},
		{name: "None with dnsConfig is exactly it", s: settings, pod: pod(corev1.DNSNone, false, &corev1.PodDNSConfig{
			Nameservers: []string{"203.0.113.1", "2001:db8::1"}, Searches: []string{"my.dns.search.suffix"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}}}),
			want: ResolvConf{Servers: []string{"203.0.113.1", "2001:db8::1"}, Searches: []string{"my.dns.search.suffix"}, Options: []string{"edns0", "ndots:2"}}},
		{name: "ClusterFirst with dnsConfig merges: servers and searches appended without duplicates, options by name",
			s: settings, pod: pod(corev1.DNSClusterFirst, false, &corev1.PodDNSConfig{
				Nameservers: []string{"10.96.0.10", "203.0.113.2"}, Searches: []string{"cluster.local", "extra.local"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}, {Name: "single-request"}, {Name: "attempts", Value: ptr.To("")}}}),
			want: ResolvConf{Servers: []string{"10.96.0.10", "203.0.113.2"}, Searches: append(append([]string(nil), clusterSearch...), "extra.local"),
				Options: []string{"attempts", "ndots:1", "single-request"}}},
		{name: "Default with dnsConfig", s: settings, pod: pod(corev1.DNSDefault, false, &corev1.PodDNSConfig{
			Options: []corev1.PodDNSConfigOption{{Name: "timeout", Value: ptr.To("5")}}}),
			want: ResolvConf{Servers: []string{"10.0.0.53"}, Searches: []string{"example.com", "corp.example.com"}, Options: []string{"rotate", "timeout:5"}}},
		{name: "more than 3 nameservers are cut", s: settings, pod: pod(corev1.DNSClusterFirst, false, &corev1.PodDNSConfig{
			Nameservers: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}}),
			want:     ResolvConf{Servers: []string{"10.96.0.10", "192.0.2.1", "192.0.2.2"}, Searches: clusterSearch, Options: []string{"ndots:5"}},
			warnings: 1},
		{name: "more than 32 search domains are cut", s: settings, pod: pod(corev1.DNSNone, false, &corev1.PodDNSConfig{Searches: many}),
			want: ResolvConf{Searches: many[:32]}, warnings: 1},
		{name: "a search domain over 253 characters is dropped", s: settings, pod: pod(corev1.DNSNone, false, &corev1.PodDNSConfig{
			Searches: []string{"a.local", long(254, "b"), "c.local"}}),
			want: ResolvConf{Searches: []string{"a.local", "c.local"}}, warnings: 1},
		{name: "a search line over 2048 characters is cut from the end", s: settings, pod: pod(corev1.DNSNone, false, &corev1.PodDNSConfig{
			Searches: []string{long(250, "a"), long(250, "b"), long(250, "c"), long(250, "d"), long(250, "e"), long(250, "f"), long(250, "g"), long(250, "h"), long(250, "i")}}),
			// 9*250 + 8 = 2258; cutting "i" (251) leaves 2007.
			want: ResolvConf{Searches: []string{long(250, "a"), long(250, "b"), long(250, "c"), long(250, "d"), long(250, "e"), long(250, "f"), long(250, "g"), long(250, "h")}}, warnings: 1},
		{name: "no cluster DNS: ClusterFirst falls back to Default with a warning", s: DNSSettings{ClusterDomain: "cluster.local", NodeResolv: nodeResolv},
			pod:  pod(corev1.DNSClusterFirst, false, nil),
			want: ResolvConf{Servers: []string{"10.0.0.53"}, Searches: []string{"example.com", "corp.example.com"}, Options: []string{"rotate", "timeout:2"}}, warnings: 1},
		{name: "unknown policy is ClusterFirst with a warning", s: settings, pod: pod("Bogus", false, nil),
			want: ResolvConf{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}}, warnings: 1},
		{name: "empty cluster domain: node searches only", s: DNSSettings{ClusterDNS: settings.ClusterDNS, NodeResolv: nodeResolv}, pod: pod(corev1.DNSClusterFirst, false, nil),
			want: ResolvConf{Servers: []string{"10.96.0.10"}, Searches: []string{"example.com", "corp.example.com"}, Options: []string{"ndots:5"}}},
		{name: "dual-stack cluster DNS", s: DNSSettings{ClusterDNS: []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::a")}, ClusterDomain: "cluster.local"},
			pod:  pod(corev1.DNSClusterFirst, false, nil),
			want: ResolvConf{Servers: []string{"10.96.0.10", "fd00::a"}, Searches: clusterSearch[:3], Options: []string{"ndots:5"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings, err := PodDNS(tc.s, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Transformer("nilIsEmpty", func(s []string) []string {
				if s == nil {
					return []string{}
				}
				return s
			})); diff != "" {
				t.Errorf("PodDNS (-want +got):\n%s", diff)
			}
			if len(warnings) != tc.warnings {
				t.Errorf("warnings = %q, want %d", warnings, tc.warnings)
			}
		})
	}
}

func TestParseResolvConf(t *testing.T) {
	cases := []struct {
		in      string
		want    ResolvConf
		wantErr bool
	}{
		{in: "", want: ResolvConf{Servers: []string{}, Searches: []string{}, Options: []string{}}},
		{in: "nameserver 1.2.3.4\nnameserver 2001:db8::1\n", want: ResolvConf{Servers: []string{"1.2.3.4", "2001:db8::1"}, Searches: []string{}, Options: []string{}}},
		{in: "  nameserver 1.2.3.4  \n#nameserver 9.9.9.9\n; comment\n", want: ResolvConf{Servers: []string{"1.2.3.4"}, Searches: []string{}, Options: []string{}}},
		{in: "search foo bar\nsearch baz.\n", want: ResolvConf{Servers: []string{}, Searches: []string{"baz"}, Options: []string{}}},
		{in: "search .\n", want: ResolvConf{Servers: []string{}, Searches: []string{}, Options: []string{}}},
		{in: "options ndots:1 debug\noptions ndots:3\n", want: ResolvConf{Servers: []string{}, Searches: []string{}, Options: []string{"debug", "ndots:3"}}},
		{in: "nameserver\n", want: ResolvConf{Servers: []string{}, Searches: []string{}, Options: []string{}}, wantErr: true},
	}
	for _, tc := range cases {
		got, err := ParseResolvConf([]byte(tc.in))
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseResolvConf(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseResolvConf(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestResolvConfBytes(t *testing.T) {
	r := ResolvConf{Servers: []string{"10.96.0.10", "fd00::a"}, Searches: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5"}}
	want := "search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\nnameserver fd00::a\noptions ndots:5\n"
	if got := string(r.Bytes()); got != want {
		t.Errorf("Bytes() = %q, want %q", got, want)
	}
	if got := string(ResolvConf{}.Bytes()); got != "" {
		t.Errorf("empty Bytes() = %q", got)
	}
	// What the agent writes parses back to itself.
	back, err := ParseResolvConf(r.Bytes())
	if err != nil || !cmp.Equal(back, r) {
		t.Errorf("round trip: %v %v", back, err)
	}
}

func TestPodHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b"
	cases := []struct {
		name         string
		spec         corev1.PodSpec
		podName      string
		host, domain string
	}{
		{name: "pod name", podName: "web-0", host: "web-0"},
		{name: "spec.hostname", podName: "web-0", spec: corev1.PodSpec{Hostname: "h"}, host: "h"},
		{name: "subdomain", podName: "web-0", spec: corev1.PodSpec{Hostname: "h", Subdomain: "sub"}, host: "h", domain: "sub.ns1.svc.cluster.local"},
		{name: "override wins and has no domain", podName: "web-0", spec: corev1.PodSpec{Hostname: "h", Subdomain: "sub", HostnameOverride: ptr.To("o.example")}, host: "o.example"},
		{name: "long name cut to 63 without a trailing dash", podName: long, host: strings.Repeat("a", 62)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.podName, Namespace: "ns1"}, Spec: tc.spec}
			h, d := PodHostname(p, "cluster.local")
			if h != tc.host || d != tc.domain {
				t.Errorf("PodHostname = %q, %q; want %q, %q", h, d, tc.host, tc.domain)
			}
		})
	}
}

// The expected files are the kubelet's (TestManagedHostsFileContent and TestNodeHostsFileContent in
// pkg/kubelet/kubelet_pods_test.go).
func TestPodHosts(t *testing.T) {
	aliases := []corev1.HostAlias{{IP: "123.45.67.89", Hostnames: []string{"foo", "bar", "baz"}}, {IP: "456.78.90.123", Hostnames: []string{"park", "doo", "boo"}}}
	cases := []struct {
		name         string
		pod          *corev1.Pod
		ips          []string
		host, domain string
		want         string
	}{
		{name: "pod IP and hostname", pod: &corev1.Pod{}, ips: []string{"123.45.67.89"}, host: "podFoo",
			want: "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n123.45.67.89\tpodFoo\n"},
		{name: "dual-stack with domain", pod: &corev1.Pod{}, ips: []string{"203.0.113.1", "fd00::1"}, host: "podFoo", domain: "domainFoo",
			want: "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n203.0.113.1\tpodFoo.domainFoo\tpodFoo\nfd00::1\tpodFoo.domainFoo\tpodFoo\n"},
		{name: "hostAliases", pod: &corev1.Pod{Spec: corev1.PodSpec{HostAliases: aliases}}, ips: []string{"203.0.113.1"}, host: "podFoo", domain: "domainFoo",
			want: "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n203.0.113.1\tpodFoo.domainFoo\tpodFoo\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n456.78.90.123\tpark\tdoo\tboo\n"},
		{name: "host network: the node's file", pod: &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true, HostAliases: aliases[:1]}}, ips: []string{"172.18.0.2"}, host: "node1",
			want: "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n172.18.0.2\tnode1\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n"},
	}
	node := []byte("127.0.0.1\tlocalhost\n172.18.0.2\tnode1\n")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(PodHosts(tc.pod, node, tc.ips, tc.host, tc.domain)); got != tc.want {
				t.Errorf("PodHosts:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestMountsEtcHosts(t *testing.T) {
	c := corev1.Container{Name: "c"}
	own := corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc/hosts"}}}
	pod, hostNet := &corev1.Pod{}, &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}
	for _, tc := range []struct {
		pod  *corev1.Pod
		ips  []string
		c    corev1.Container
		want bool
	}{
		{pod, []string{"10.0.0.1"}, c, true},
		{pod, nil, c, false},
		{hostNet, nil, c, true},
		{pod, []string{"10.0.0.1"}, own, false},
	} {
		if got := MountsEtcHosts(tc.pod, tc.ips, tc.c); got != tc.want {
			t.Errorf("MountsEtcHosts(hostNetwork=%v, %v, %v) = %v", tc.pod.Spec.HostNetwork, tc.ips, tc.c.VolumeMounts, got)
		}
	}
}

// Whatever the pod and the node's resolv.conf say, the result keeps the kubelet's limits, and what the
// agent writes reads back as the same configuration.
func FuzzPodDNS(f *testing.F) {
	f.Add("nameserver 10.0.0.53\nsearch a b\noptions ndots:1\n", "ClusterFirst", false, "ns1", "1.2.3.4 5.6.7.8", "x.local y.local", "ndots:2 edns0")
	f.Add("", "None", false, "default", "1.1.1.1 2.2.2.2 3.3.3.3 4.4.4.4", strings.Repeat("d ", 40), "")
	f.Add("search "+strings.Repeat("z", 300)+"\n", "Default", true, "kube-system", "", "", "timeout:")
	f.Fuzz(func(t *testing.T, nodeResolv, policy string, hostNet bool, ns, servers, searches, options string) {
		if len(validation.IsDNS1123Label(ns)) > 0 {
			return // the apiserver admits only DNS labels as namespaces
		}
		cfg := &corev1.PodDNSConfig{Nameservers: strings.Fields(servers), Searches: strings.Fields(searches)}
		for _, o := range strings.Fields(options) {
			name, value, ok := strings.Cut(o, ":")
			if name == "" {
				return // the apiserver requires an option's name
			}
			opt := corev1.PodDNSConfigOption{Name: name}
			if ok {
				opt.Value = ptr.To(value)
			}
			cfg.Options = append(cfg.Options, opt)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
			Spec: corev1.PodSpec{DNSPolicy: corev1.DNSPolicy(policy), HostNetwork: hostNet, DNSConfig: cfg}}
		s := DNSSettings{ClusterDNS: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, ClusterDomain: "cluster.local", NodeResolv: []byte(nodeResolv)}
		r, _, err := PodDNS(s, pod)
		if err != nil {
			return // a node resolv.conf with an empty nameserver line: the kubelet refuses it too
		}
		if len(r.Servers) > maxDNSNameservers {
			t.Errorf("%d nameservers", len(r.Servers))
		}
		if len(r.Searches) > maxDNSSearchPaths || len(strings.Join(r.Searches, " ")) > maxDNSSearchListChars {
			t.Errorf("search line of %d domains, %d characters", len(r.Searches), len(strings.Join(r.Searches, " ")))
		}
		for _, d := range r.Searches {
			if len(d) > maxSearchDomainLength {
				t.Errorf("search domain of %d characters", len(d))
			}
		}
		if corev1.DNSPolicy(policy) == corev1.DNSNone && len(r.Servers) > 0 && r.Servers[0] != cfg.Nameservers[0] {
			t.Errorf("None: first nameserver %q, want dnsConfig's %q", r.Servers[0], cfg.Nameservers[0])
		}
		// Single-token entries read back unchanged (a search domain "." or ending in "." is normalised
		// by the parser, as the kubelet's is; a "#..." entry would read as a comment).
		clean := true
		for _, x := range append(append(append([]string(nil), r.Servers...), r.Searches...), r.Options...) {
			if strings.HasSuffix(x, ".") || strings.HasPrefix(x, "#") {
				clean = false
			}
		}
		if !clean {
			return
		}
		back, err := ParseResolvConf(r.Bytes())
		if err != nil {
			t.Fatalf("ParseResolvConf(Bytes()): %v\n%s", err, r.Bytes())
		}
		want := r
		want.Options = mergeOptions(nil, r.Options)
		if !cmp.Equal(back, want, cmp.Transformer("nilIsEmpty", func(s []string) []string {
			if s == nil {
				return []string{}
			}
			return s
		})) {
			t.Errorf("read back %+v, wrote %+v:\n%s", back, r, r.Bytes())
		}
	})
}
