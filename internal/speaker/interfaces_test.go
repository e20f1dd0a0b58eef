package speaker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAnnounceable has one row per MetalLB rule (internal/layer2/announcer.go updateInterfaces and the
// default metallb-excludel2 exclusions).
func TestAnnounceable(t *testing.T) {
	ex, err := excludeRegexp(DefaultExcludeInterfaces)
	if err != nil {
		t.Fatal(err)
	}
	up := func(name string) linkInfo { return linkInfo{Name: name, Up: true, Broadcast: true} }
	for _, tc := range []struct {
		name string
		l    linkInfo
		want ifaceReason
	}{
		{"ethernet", up("eth0"), ""},
		{"second NIC", up("eth1"), ""},
		{"bond itself", up("bond0"), ""},
		{"vlan", up("eth0.100"), ""},
		{"loopback excluded by name", linkInfo{Name: "lo", Up: true}, IfaceExcluded},
		{"pod veth", up("veth1234"), IfaceExcluded},
		{"docker bridge", up("docker0"), IfaceExcluded},
		{"cni bridge", up("cni0"), IfaceExcluded},
		{"calico", up("cali12ab"), IfaceExcluded},
		{"ipvs dummy", up("kube-ipvs0"), IfaceExcluded},
		{"exclusion before down", linkInfo{Name: "docker0"}, IfaceExcluded},
		{"down", linkInfo{Name: "eth2", Broadcast: true}, IfaceDown},
		{"bond port", linkInfo{Name: "eth3", Up: true, Broadcast: true, HasMaster: true}, IfacePort},
		{"noarp", linkInfo{Name: "eth4", Up: true, Broadcast: true, NoARP: true}, IfaceNoARP},
		{"point-to-point", linkInfo{Name: "wg0", Up: true}, IfaceNoBroadcast},
		{"lo not excluded is no broadcast", linkInfo{Name: "lo", Up: true}, IfaceExcluded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := announceable(tc.l, ex); got != tc.want {
				t.Errorf("announceable(%+v) = %q, want %q", tc.l, got, tc.want)
			}
		})
	}
	if got := announceable(linkInfo{Name: "lo", Up: true}, nil); got != IfaceNoBroadcast {
		t.Errorf("without exclusions, lo: %q, want %q", got, IfaceNoBroadcast)
	}
	got := announceInterfaces([]linkInfo{up("eth1"), {Name: "lo", Up: true}, up("eth0"), up("veth9")}, ex)
	if diff := cmp.Diff([]string{"eth0", "eth1"}, got); diff != "" {
		t.Errorf("announceInterfaces (-want +got):\n%s", diff)
	}
}
