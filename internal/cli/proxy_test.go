package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironlb/ironlb/internal/proxy"
)

// TestProxyConfigFile: --config sets the proxy's settings from a KubeProxyConfiguration, flags given
// on the command line win, and a field ironlb cannot honour stops the command with its name.
func TestProxyConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) (proxy.Config, error) {
		var got proxy.Config
		cmd := newProxyCmd(func(_ context.Context, c proxy.Config) error { got = c; return nil })
		cmd.SetArgs(args)
		cmd.SetOut(&strings.Builder{})
		cmd.SetErr(&strings.Builder{})
		err := cmd.Execute()
		return got, err
	}
	good := file("good.yaml", `hostnameOverride: node-a
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
bindAddress: 192.168.0.10
metricsBindAddress: 0.0.0.0:10249
healthzBindAddress: 0.0.0.0:10256
clusterCIDR: 10.244.0.0/16
nodePortAddresses: [all]
mode: nftables
nftables:
  masqueradeAll: true
  syncPeriod: 30m
  minSyncPeriod: 2s
conntrack:
  udpTimeout: 1m
`)
	c, err := run("--config", good, "--min-sync-period=500ms", "--metrics-bind-address=127.0.0.1:9999")
	if err != nil {
		t.Fatal(err)
	}
	for _, chk := range []struct {
		name      string
		got, want any
	}{
		{"node", c.Node, "node-a"},
		{"kubeconfig", c.Kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf"},
		{"bind address", c.BindAddress, "192.168.0.10"},
		{"metrics (flag wins)", c.MetricsAddr, "127.0.0.1:9999"},
		{"healthz", c.HealthzAddr, "0.0.0.0:10256"},
		{"cluster CIDRs", strings.Join(c.ClusterCIDRs, ","), "10.244.0.0/16"},
		{"node-port addresses", strings.Join(c.NodePortAddresses, ","), "all"},
		{"masquerade all", c.MasqueradeAll, true},
		{"masquerade bit (flag default kept)", c.MasqueradeBit, 14},
		{"sync period", c.SyncPeriod, 30 * time.Minute},
		{"min sync period (flag wins)", c.MinSyncPeriod, 500 * time.Millisecond},
		{"conntrack udp timeout", c.Conntrack.UDPTimeout.Duration, time.Minute},
	} {
		if chk.got != chk.want {
			t.Errorf("%s: %v, want %v", chk.name, chk.got, chk.want)
		}
	}
	// Without --config, the flags' defaults: primary node ports, kube-proxy's addresses.
	c, err = run()
	if err != nil {
		t.Fatal(err)
	}
	if c.NodePortAddresses != nil || c.MetricsAddr != "127.0.0.1:10249" || c.HealthzAddr != "0.0.0.0:10256" || c.SyncPeriod != time.Hour {
		t.Errorf("defaults changed: %+v", c)
	}

	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"ipvs", "mode: ipvs\n", []string{"mode: not supported"}},
		{"misspelt field", "nftables:\n  minSyncperiod: 1s\n", []string{`unknown field "nftables.minSyncperiod"`}},
	} {
		_, err := run("--config", file(tc.name+".yaml", tc.body))
		for _, w := range append(tc.want, "--config "+filepath.Join(dir, tc.name+".yaml")) {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want it to contain %q", tc.name, err, w)
			}
		}
	}
	if _, err := run("--config", filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("missing file: %v", err)
	}
}
