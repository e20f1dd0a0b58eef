package connbench

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

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

// frame builds an Ethernet frame to dstMAC carrying an IPv4 packet of proto from sport to dst.
func frame(dstMAC string, dst netip.Addr, proto byte, sport uint16, fragOff uint16) []byte {
	mac, _ := net.ParseMAC(dstMAC)
	b := make([]byte, 14+20+8)
	copy(b, mac)
	b[12], b[13] = 0x08, 0x00
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[6:], fragOff)
	ip[9] = proto
	copy(ip[12:16], []byte{192, 168, 10, 100})
	a := dst.As4()
	copy(ip[16:20], a[:])
	binary.BigEndian.PutUint16(ip[20:], sport)
	return b
}

func TestFrameFlow(t *testing.T) {
	vip := netip.MustParseAddr("172.30.0.11")
	f, mac, ok := FrameFlow(frame("02:42:ac:12:00:05", vip, 6, 51234, 0), vip)
	if !ok || f != (Flow{"tcp", 51234}) || mac != "02:42:ac:12:00:05" {
		t.Errorf("TCP frame: %v %q %v", f, mac, ok)
	}
	if f, _, ok := FrameFlow(frame("02:42:ac:12:00:05", vip, 17, 42001, 0), vip); !ok || f != (Flow{"udp", 42001}) {
		t.Errorf("UDP frame: %v %v", f, ok)
	}
	for name, b := range map[string][]byte{
		"other address":  frame("02:42:ac:12:00:05", netip.MustParseAddr("172.30.0.10"), 6, 1, 0),
		"ICMP":           frame("02:42:ac:12:00:05", vip, 1, 1, 0),
		"later fragment": frame("02:42:ac:12:00:05", vip, 6, 1, 100),
		"short":          frame("02:42:ac:12:00:05", vip, 6, 1, 0)[:30],
	} {
		if _, _, ok := FrameFlow(b, vip); ok {
			t.Errorf("%s: read as a flow", name)
		}
	}
}

func TestHopsMoved(t *testing.T) {
	var h Hops
	a, b := "aa", "bb"
	h.Add(at(0), Flow{"tcp", 1}, a) // stays on a
	h.Add(at(500), Flow{"tcp", 1}, a)
	h.Add(at(1500), Flow{"tcp", 1}, a)
	h.Add(at(0), Flow{"tcp", 2}, a) // a, then b after the event
	h.Add(at(1200), Flow{"tcp", 2}, b)
	h.Add(at(0), Flow{"udp", 3}, a) // b before the event, back to a after
	h.Add(at(800), Flow{"udp", 3}, b)
	h.Add(at(1100), Flow{"udp", 3}, a)
	h.Add(at(1100), Flow{"tcp", 4}, b) // only after: not compared
	h.Add(at(0), Flow{"tcp", 5}, a)    // moves only after the end
	h.Add(at(3000), Flow{"tcp", 5}, b)
	moved, compared := h.Moved(at(1000), at(2000))
	if moved != 2 || compared != 4 {
		t.Errorf("Moved = %d of %d, want 2 of 4", moved, compared)
	}
}
