package status

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/config"
)

// TestModeAgreesWithSpeakers: for random pools, advertisements (pool names, pool selectors,
// serviceSelectors, some that do not parse) and Service labels, the MODE ironlb status reports is
// what the speakers decide: layer 2 when the speaker's model gives the Service an L2Advertisement
// (config.BuildModel), BGP when bgpconfig.Build finds a BGPAdvertisement for it.
func TestModeAgreesWithSpeakers(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 3))
	labelSets := []map[string]string{nil, {"app": "web"}, {"app": "db"}, {"app": "web", "canary": "1"}, {"tier": "gold"}}
	selectors := []metav1.LabelSelector{
		{MatchLabels: map[string]string{"app": "web"}},
		{MatchLabels: map[string]string{"app": "db"}},
		{MatchLabels: map[string]string{"tier": "gold"}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "canary", Operator: metav1.LabelSelectorOpDoesNotExist}}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "db"}}}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}, // does not parse
	}
	pick := func() []metav1.LabelSelector {
		var out []metav1.LabelSelector
		for range r.IntN(3) {
			out = append(out, selectors[r.IntN(len(selectors))])
		}
		return out
	}
	poolNames := []string{"p0", "p1", "p2"}
	names := func() []string {
		var out []string
		for _, n := range poolNames {
			if r.IntN(3) == 0 {
				out = append(out, n)
			}
		}
		return out
	}
	const cases = 300
	for c := range cases {
		var in Input
		in.Namespace = ns
		for i, n := range poolNames {
			p := pool(n, fmt.Sprintf("10.%d.0.0/24", i))
			p.Labels = labelSets[r.IntN(len(labelSets))]
			in.Pools = append(in.Pools, p)
		}
		for i := range r.IntN(4) {
			a := l2ad(fmt.Sprintf("l2-%d", i), names()...)
			a.Spec.IPAddressPoolSelectors, a.Spec.ServiceSelectors = pick(), pick()
			in.L2Advertisements = append(in.L2Advertisements, a)
		}
		for i := range r.IntN(4) {
			a := bgpad(fmt.Sprintf("bgp-%d", i), names()...)
			a.Spec.IPAddressPoolSelectors, a.Spec.ServiceSelectors = pick(), pick()
			in.BGPAdvertisements = append(in.BGPAdvertisements, a)
		}
		var svcs []*corev1.Service
		for i := range 4 {
			s := svc(fmt.Sprintf("s%d", i), i, fmt.Sprintf("10.%d.0.%d", r.IntN(len(poolNames)), 10+i))
			s.Labels = labelSets[r.IntN(len(labelSets))]
			in.Services = append(in.Services, s)
			svcs = append(svcs, &in.Services[i])
		}

		model := config.BuildModel(config.ModelInput{Pools: in.Pools, L2Advertisements: in.L2Advertisements, Services: svcs})
		l2 := map[string]bool{}
		bin := bgpconfig.Input{Advertisements: in.BGPAdvertisements}
		for _, p := range in.Pools {
			bin.Pools = append(bin.Pools, bgpconfig.Pool{Name: p.Name, Labels: p.Labels})
		}
		for _, s := range model.Services {
			l2[s.Key] = len(s.L2) > 0
			bin.Services = append(bin.Services, bgpconfig.Service{Key: s.Key, Labels: s.Labels, Pool: s.Pool, Addrs: s.Addrs})
		}
		state, _ := bgpconfig.Build(bin)
		bgp := map[string]bool{}
		for _, st := range state.Services {
			bgp[st.Key] = st.Reason != bgpconfig.NoAdvertisement
		}

		for _, a := range Build(in).Addresses {
			want := ModeNone
			switch {
			case l2[a.Service] && bgp[a.Service]:
				want = ModeBoth
			case l2[a.Service]:
				want = ModeLayer2
			case bgp[a.Service]:
				want = ModeBGP
			}
			if a.Mode != want {
				t.Fatalf("case %d: %s (%s): ironlb status says %s, the speakers %s\nL2Advertisements %+v\nBGPAdvertisements %+v\npools %+v\nservice labels %v",
					c, a.Service, a.IP, a.Mode, want, in.L2Advertisements, in.BGPAdvertisements, in.Pools, svcs)
			}
		}
	}
}
