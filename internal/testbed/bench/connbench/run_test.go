package connbench

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseRouteGet(t *testing.T) {
	out := "172.30.0.11 from 172.31.0.2 via 172.18.0.4 dev eth0 iif eth1 \\    cache \n" +
		"172.30.0.11 from 172.31.0.2 via 172.18.0.5 dev eth0 iif eth1 \\    cache \n" +
		"unreachable 172.30.0.11 from 172.31.0.2 dev lo iif eth1 \n"
	got, err := ParseRouteGet(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("172.18.0.4"), netip.MustParseAddr("172.18.0.5"), {}}
	if !cmp.Equal(got, want, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
		t.Errorf("ParseRouteGet = %v, want %v", got, want)
	}
	if _, err := ParseRouteGet("x via nonsense dev eth0\n"); err == nil {
		t.Error("ParseRouteGet accepted a next hop that is no address")
	}
}

func validOptions() Options {
	return Options{Trials: 1, Modes: []string{"l2", "bgp"}, Speakers: []string{"ironlb", "metallb"}, ExternalModes: []string{"snat", "dsr"},
		Events: []string{EventPowerCut}, TCP: 1, Every: time.Millisecond, Settle: time.Second,
		Window: 7 * time.Second, ReturnWindow: 15 * time.Second, Timeout: 5 * time.Second}
}

func TestCheck(t *testing.T) {
	if err := validOptions().Check(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	o := validOptions() // a return window no longer than the timeout matters only to the return
	o.ReturnWindow = o.Timeout
	if err := o.Check(); err != nil {
		t.Errorf("power cuts only, return window = timeout: %v", err)
	}
	for _, tc := range []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.Modes = []string{"l3"} }, `--mode "l3"`},
		{func(o *Options) { o.Speakers = []string{"kube-vip"} }, `--speaker "kube-vip"`},
		{func(o *Options) { o.ExternalModes = []string{"local"} }, `--external-mode "local"`},
		{func(o *Options) { o.Events = []string{"reboot"} }, `--event "reboot"`},
		{func(o *Options) { o.Events = nil }, "each need a value"},
		{func(o *Options) { o.Window = o.Timeout }, "--window (5s) must be longer than --timeout"},
		{func(o *Options) { o.Events, o.ReturnWindow = []string{EventReturn}, o.Timeout }, "--return-window (5s) must be longer"},
		{func(o *Options) { o.TCP, o.UDP = 0, 0 }, "--tcp plus --udp"},
	} {
		o := validOptions()
		tc.mutate(&o)
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check() = %v, want an error containing %q", err, tc.want)
		}
	}
}

func TestConfigs(t *testing.T) {
	o := validOptions()
	got := o.Configs()
	if len(got) != 8 || got[0] != (Config{"l2", "ironlb", "snat"}) || got[1] != (Config{"l2", "ironlb", "dsr"}) || got[7] != (Config{"bgp", "metallb", "dsr"}) {
		t.Errorf("Configs = %v", got)
	}
	if l := got[1].Label("ironlb proxy"); l != "l2, ironlb speaker, ironlb proxy, dsr" {
		t.Errorf("Label = %q", l)
	}
}

func TestObjects(t *testing.T) {
	vip := netip.MustParseAddr("172.18.255.231")
	for _, c := range []Config{{"l2", "ironlb", "dsr"}, {"bgp", "metallb", "snat"}, {"bgp", "ironlb", "snat"}} {
		objs := Objects(c, vip)
		var services []string
		var refs []string
		for _, o := range objs {
			refs = append(refs, o.String())
			if o.Resource == "service" {
				services = append(services, o.Name)
			}
		}
		last := objs[len(objs)-1].Manifest
		if !cmp.Equal(services, []string{serviceName}) || !strings.Contains(last, `ironlb.io/external-mode: "`+c.ExternalMode+`"`) ||
			!strings.Contains(last, "protocol: UDP") || !strings.Contains(last, vip.String()) {
			t.Errorf("%v: objects %v, Service:\n%s", c, refs, last)
		}
		hasBFD := strings.Contains(strings.Join(refs, " "), "bfdprofile")
		if hasBFD != (c.Mode == "bgp" && c.Speaker == "ironlb") {
			t.Errorf("%v: BFD profile %v in %v (MetalLB's native BGP refuses one)", c, hasBFD, refs)
		}
	}
}
