package speaker

import "testing"

func TestStrictARPProblem(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		bad, err   bool
	}{
		{"iptables (the seeds' lab)", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n", false, false},
		{"default mode", "kind: KubeProxyConfiguration\nmode: \"\"\n", false, false},
		{"nftables", "mode: nftables\n", false, false},
		{"ipvs without strictARP", "mode: ipvs\nipvs:\n  scheduler: rr\n", true, false},
		{"ipvs strictARP false", "mode: ipvs\nipvs:\n  strictARP: false\n", true, false},
		{"IPVS strictARP true", "mode: IPVS\nipvs:\n  strictARP: true\n", false, false},
		{"garbage", "mode: [ipvs\n", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad, why, err := strictARPProblem(tc.conf)
			if bad != tc.bad || (err != nil) != tc.err {
				t.Fatalf("bad=%v err=%v (%s), want bad=%v err=%v", bad, err, why, tc.bad, tc.err)
			}
			if bad && why == "" {
				t.Fatal("a problem needs a reason")
			}
		})
	}
}
