package proxybench

import (
	"strings"
	"testing"
)

func TestStatusField(t *testing.T) {
	status := "Name:\tkube-proxy\nVmPeak:\t  900000 kB\nVmRSS:\t   123456 kB\nThreads:\t9\n"
	if v, ok := statusField(status, "VmRSS:"); !ok || v != 123456 {
		t.Errorf("VmRSS = %d, %v", v, ok)
	}
	if _, ok := statusField(status, "VmSwap:"); ok {
		t.Error("VmSwap found")
	}
}

func TestPortOf(t *testing.T) {
	if p, err := portOf("https://127.0.0.1:39709"); err != nil || p != 39709 {
		t.Errorf("portOf = %d, %v", p, err)
	}
	if _, err := portOf("https://localhost"); err == nil {
		t.Error("no port: no error")
	}
}

func TestKubeProxyConfig(t *testing.T) {
	c := kubeProxyConfig("/tmp/kc", "pb-kube-proxy")
	for _, want := range []string{"mode: nftables", "hostnameOverride: pb-kube-proxy", "kubeconfig: /tmp/kc", "maxPerCore: 0", "metricsBindAddress: 127.0.0.1:10249"} {
		if !strings.Contains(c, want) {
			t.Errorf("config lacks %q:\n%s", want, c)
		}
	}
}
