package conntrack

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

func TestSysctls(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	for _, tc := range []struct {
		name     string
		c        kubeproxyv1alpha1.KubeProxyConntrackConfiguration
		cpus     int
		want     []Sysctl
		wantHash int
	}{
		{name: "unset: nothing", cpus: 4},
		{name: "maxPerCore × CPUs", c: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{MaxPerCore: i32(32768), Min: i32(131072)}, cpus: 8,
			want: []Sysctl{{Name: "nf_conntrack_max", Value: 262144, Raise: true}}, wantHash: 65536},
		{name: "min wins on few CPUs", c: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{MaxPerCore: i32(32768), Min: i32(131072)}, cpus: 2,
			want: []Sysctl{{Name: "nf_conntrack_max", Value: 131072, Raise: true}}, wantHash: 32768},
		{name: "maxPerCore 0 leaves the limit and ignores min", c: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{MaxPerCore: i32(0), Min: i32(131072)}, cpus: 2},
		{name: "timeouts and liberal", cpus: 2, c: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{
			TCPEstablishedTimeout: dur(24 * time.Hour), TCPCloseWaitTimeout: dur(time.Hour), TCPBeLiberal: true,
			UDPTimeout: metav1.Duration{Duration: 30 * time.Second}, UDPStreamTimeout: metav1.Duration{Duration: 2 * time.Minute}},
			want: []Sysctl{{Name: "nf_conntrack_tcp_timeout_established", Value: 86400}, {Name: "nf_conntrack_tcp_timeout_close_wait", Value: 3600},
				{Name: "nf_conntrack_tcp_be_liberal", Value: 1}, {Name: "nf_conntrack_udp_timeout", Value: 30}, {Name: "nf_conntrack_udp_timeout_stream", Value: 120}}},
		{name: "zero timeouts are not set", cpus: 2, c: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{TCPEstablishedTimeout: dur(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, hash := Sysctls(tc.c, tc.cpus)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if hash != tc.wantHash {
				t.Errorf("hashsize %d, want %d", hash, tc.wantHash)
			}
		})
	}
}

// TestWriteSysctls writes into a directory standing for /proc/sys/net/netfilter: nf_conntrack_max
// and the hash size are only raised, the others set.
func TestWriteSysctls(t *testing.T) {
	dir := t.TempDir()
	hashFile := filepath.Join(dir, "hashsize")
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write("nf_conntrack_max", "500000")
	write("nf_conntrack_udp_timeout", "30")
	write("hashsize", "1000")
	err := WriteSysctls(dir, hashFile, []Sysctl{{Name: "nf_conntrack_max", Value: 262144, Raise: true}, {Name: "nf_conntrack_udp_timeout", Value: 60}}, 65536)
	if err != nil {
		t.Fatal(err)
	}
	if got := read("nf_conntrack_max"); got != "500000\n" {
		t.Errorf("nf_conntrack_max %q: lowered", got)
	}
	if got := read("nf_conntrack_udp_timeout"); got != "60" {
		t.Errorf("nf_conntrack_udp_timeout %q, want 60", got)
	}
	if got := read("hashsize"); got != "65536" {
		t.Errorf("hashsize %q, want 65536", got)
	}
	if err := WriteSysctls(filepath.Join(dir, "missing"), hashFile, []Sysctl{{Name: "nf_conntrack_udp_timeout", Value: 60}}, 0); err == nil {
		t.Error("no error writing into a missing directory")
	}
}
