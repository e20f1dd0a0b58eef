package bgpfail

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ironlb/ironlb/internal/testbed/bench/benchcfg"
	"github.com/ironlb/ironlb/internal/testbed/bench/failover"
)

// run applies objs to the fake cluster c as benchcfg.Apply does.
func run(c map[benchcfg.Ref]string, objs []benchcfg.Object) {
	var have []benchcfg.Ref
	for r := range c {
		have = append(have, r)
	}
	for _, st := range benchcfg.Plan(objs, have) {
		if st.Op == benchcfg.Delete {
			delete(c, st.Object.Ref)
		} else {
			c[st.Object.Ref] = st.Object.Manifest
		}
	}
}

func asMap(objs []benchcfg.Object) map[benchcfg.Ref]string {
	m := map[benchcfg.Ref]string{}
	for _, o := range objs {
		m[o.Ref] = o.Manifest
	}
	return m
}

// TestRunsApplyExactlyTheirObjects: a run after another, in the same lab, leaves exactly its own
// objects (issue 20: `bench-bgp --bfd 0 --speaker metallb` after `--bfd 50ms` kept the peer's
// bfdProfile, and MetalLB refused everything).
func TestRunsApplyExactlyTheirObjects(t *testing.T) {
	ironBFD := Options{Speaker: "ironlb", BFD: 50 * time.Millisecond, HoldTime: 9 * time.Second}
	ironNoBFD := Options{Speaker: "ironlb", HoldTime: 9 * time.Second}
	metallb := Options{Speaker: "metallb", HoldTime: 3 * time.Second}
	l2 := failover.Objects(VIP)
	for _, tt := range []struct {
		name       string
		run1, run2 []benchcfg.Object
	}{
		{"bfd 50ms, then bfd 0 with MetalLB", ironBFD.Objects(), metallb.Objects()},
		{"bfd 0, then bfd 50ms", ironNoBFD.Objects(), ironBFD.Objects()},
		{"MetalLB, then ironlb without BFD", metallb.Objects(), ironNoBFD.Objects()},
		{"bench-bgp with BFD, then bench-failover", ironBFD.Objects(), l2},
		{"bench-failover, then bench-bgp with BFD", l2, ironBFD.Objects()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := map[benchcfg.Ref]string{}
			run(c, tt.run1)
			run(c, tt.run2)
			want := asMap(tt.run2)
			// What run 1 wanted of kinds run 2 does not own stays (the lab's pool, workloads).
			for r, m := range asMap(tt.run1) {
				if _, ok := want[r]; !ok && !ownedKind(r) {
					want[r] = m
				}
			}
			if diff := cmp.Diff(want, c); diff != "" {
				t.Errorf("cluster after run 2 (-want +got):\n%s", diff)
			}
		})
	}
}

func ownedKind(r benchcfg.Ref) bool {
	for _, k := range benchcfg.Owned {
		if r.Resource == k {
			return true
		}
	}
	return false
}

func TestObjects(t *testing.T) {
	peer := func(o Options) string {
		for _, ob := range o.Objects() {
			if ob.Resource == "bgppeer.metallb.io" {
				return ob.Manifest
			}
		}
		t.Fatal("no BGPPeer")
		return ""
	}
	if p := peer(Options{BFD: 50 * time.Millisecond, HoldTime: 9 * time.Second}); !strings.Contains(p, "bfdProfile: bench\n") || !strings.Contains(p, "holdTime: 9s\n") {
		t.Errorf("peer with BFD:\n%s", p)
	}
	if p := peer(Options{Speaker: "metallb", HoldTime: 3 * time.Second}); strings.Contains(p, "bfd") || !strings.Contains(p, "holdTime: 3s\n") {
		t.Errorf("peer without BFD:\n%s", p)
	}
	// The profile is put before the peer that names it.
	objs := Options{BFD: 50 * time.Millisecond, HoldTime: 9 * time.Second}.Objects()
	var order []string
	for _, o := range objs {
		order = append(order, o.Resource)
	}
	if want := []string{"ipaddresspool.metallb.io", "bgpadvertisement.metallb.io", "bfdprofile.metallb.io", "bgppeer.metallb.io", "deployment.apps", "service"}; !cmp.Equal(want, order) {
		t.Errorf("order %v, want %v", order, want)
	}
}
