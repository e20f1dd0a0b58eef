package speaker

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/internal/allocator"
	"github.com/ironlb/ironlb/internal/config"
)

// TestForgedStatusNotAnnounced: the speaker serves only addresses that lie in a pool, whatever a
// Service's status says (anyone allowed to write status could put any address there).
func TestForgedStatusNotAnnounced(t *testing.T) {
	pool := func(name string, cidrs ...string) *poolInfo {
		p := &poolInfo{name: name}
		for _, c := range cidrs {
			rs, err := allocator.ParseRange(c)
			if err != nil {
				t.Fatal(err)
			}
			p.ranges = append(p.ranges, rs...)
		}
		return p
	}
	pools := map[string]*poolInfo{
		"a":  pool("a", "172.18.255.200-172.18.255.250", "fd00:ff::/120"),
		"b":  pool("b", "172.18.200.0/24"),
		"v6": pool("v6", "fd00:aa::/120"),
	}
	svc := func(name, fromPool string, ips ...string) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		}
		if fromPool != "" {
			s.Annotations = map[string]string{config.AnnotationAllocatedFromPool: fromPool}
		}
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		return s
	}
	for _, tc := range []struct {
		name      string
		svc       *corev1.Service
		wantPool  string // "" : not served
		wantAddrs []string
	}{
		{"in its pool", svc("s", "a", "172.18.255.201"), "a", []string{"172.18.255.201"}},
		{"in no pool (forged)", svc("s", "a", "8.8.8.8"), "", nil},
		{"forged, private range, no pool", svc("s", "", "10.0.0.1"), "", nil},
		{"annotation names a pool that does not hold it: the pool that does", svc("s", "a", "172.18.200.7"), "b", []string{"172.18.200.7"}},
		{"annotation names a missing pool", svc("s", "gone", "172.18.255.210"), "a", []string{"172.18.255.210"}},
		{"dual stack, both in the pool", svc("s", "a", "172.18.255.202", "fd00:ff::5"), "a", []string{"172.18.255.202", "fd00:ff::5"}},
		{"dual stack, second address forged", svc("s", "a", "172.18.255.202", "fd00:bad::5"), "a", []string{"172.18.255.202"}},
		{"dual stack, second address in another pool", svc("s", "a", "172.18.255.202", "fd00:aa::5"), "a", []string{"172.18.255.202"}},
		{"first address forged, second in a pool", svc("s", "", "1.2.3.4", "fd00:aa::5"), "", nil},
		{"not an address", svc("s", "a", "not-an-ip"), "", nil},
		{"IPv4-mapped IPv6 in the pool", svc("s", "a", "::ffff:172.18.255.203"), "a", []string{"172.18.255.203"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lbServices([]any{tc.svc}, "", pools)
			if tc.wantPool == "" {
				if len(got) != 0 {
					t.Fatalf("served %v from pool %s; want not served", got[0].addrs, got[0].pool.name)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("not served; want pool %s", tc.wantPool)
			}
			var addrs []string
			for _, a := range got[0].addrs {
				addrs = append(addrs, a.String())
			}
			if got[0].pool.name != tc.wantPool || !slices.Equal(addrs, tc.wantAddrs) {
				t.Fatalf("pool %s addrs %v; want pool %s addrs %v", got[0].pool.name, addrs, tc.wantPool, tc.wantAddrs)
			}
		})
	}
}
