package fileconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

const head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// kubeadmDump is the kube-proxy ConfigMap kubeadm writes (v1.3x), with mode nftables: every field,
// most at their zero values.
const kubeadmDump = head + `bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 1s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: nftables
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`

func TestParse(t *testing.T) {
	p := func(s string) *string { return &s }
	d := func(v time.Duration) *time.Duration { return &v }
	b := func(v bool) *bool { return &v }
	i := func(v int) *int { return &v }
	i32 := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		name string
		in   string
		want Settings
	}{{
		name: "kubeadm's dump: the zero values set nothing, iptables' minSyncPeriod is ignored",
		in:   kubeadmDump,
		want: Settings{Kubeconfig: p("/var/lib/kube-proxy/kubeconfig.conf"), BindAddress: p("0.0.0.0"),
			ClusterCIDRs: []string{"10.244.0.0/16"}, Ignored: []string{"iptables.minSyncPeriod (iptables mode's settings)"}},
	}, {
		name: "the fields ironlb applies",
		in: head + `hostnameOverride: node-a
bindAddress: 192.168.0.10
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
detectLocalMode: ClusterCIDR
nodePortAddresses: [primary, 10.0.0.0/8]
nftables:
  masqueradeAll: true
  masqueradeBit: 15
  syncPeriod: 30m
  minSyncPeriod: 1s
conntrack:
  maxPerCore: 32768
  min: 131072
  tcpEstablishedTimeout: 24h
  udpTimeout: 30s
`,
		want: Settings{Node: p("node-a"), BindAddress: p("192.168.0.10"), HealthzAddr: p("0.0.0.0:10256"), MetricsAddr: p("127.0.0.1:10249"),
			ClusterCIDRs: []string{"10.244.0.0/16", "fd00:10:244::/56"}, NodePortAddresses: []string{"primary", "10.0.0.0/8"},
			MasqueradeAll: b(true), MasqueradeBit: i(15), SyncPeriod: d(30 * time.Minute), MinSyncPeriod: d(time.Second),
			Conntrack: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{MaxPerCore: i32(32768), Min: i32(131072),
				TCPEstablishedTimeout: &metav1.Duration{Duration: 24 * time.Hour}, UDPTimeout: metav1.Duration{Duration: 30 * time.Second}}},
	}, {
		name: "NodeCIDR: the node's pod CIDRs, clusterCIDR unused",
		in:   head + "detectLocalMode: NodeCIDR\nclusterCIDR: 10.244.0.0/16\n",
		want: Settings{NodeCIDR: true},
	}, {
		name: "JSON, as kube-proxy also reads",
		in:   `{"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration", "mode": "nftables", "metricsBindAddress": "0.0.0.0:10249"}`,
		want: Settings{MetricsAddr: p("0.0.0.0:10249")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseErrors: every refusal names the field.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // substrings of the error
	}{
		{"unknown field", head + "nftables:\n  syncPeriod: 1s\n  frobnicate: true\n", []string{`unknown field "nftables.frobnicate"`}},
		{"unknown top-level field", head + "clusterCidr: 10.0.0.0/8\n", []string{`unknown field "clusterCidr"`}},
		{"two unknown fields, both named", head + "bogus: 1\nconntrack:\n  maxPercore: 1\n", []string{`unknown field "bogus"`, `unknown field "conntrack.maxPercore"`}},
		{"wrong type", head + "nftables:\n  masqueradeBit: fourteen\n", []string{"masqueradeBit"}},
		{"other mode", head + "mode: ipvs\n", []string{`mode: not supported by ironlb proxy: "ipvs"`}},
		{"bridge detection", head + "detectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: cni0\n",
			[]string{`detectLocalMode: not supported`, `detectLocal.bridgeInterface: not supported`}},
		{"feature gates", head + "featureGates:\n  KubeProxyNFTablesLocalhostNodePorts: true\n", []string{"featureGates: not supported", "KubeProxyNFTablesLocalhostNodePorts"}},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", []string{"want kubeproxy.config.k8s.io/v1alpha1, KubeProxyConfiguration"}},
		{"not YAML", "mode: [nftables\n", []string{"not YAML"}},
		{"empty", "", []string{"empty configuration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
