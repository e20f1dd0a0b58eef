package layer2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/ndp"
)

type conflict struct {
	IP  netip.Addr
	MAC net.HardwareAddr
}

// harness is a responder over a FakeConn, running inside a synctest bubble.
type harness struct {
	r         *Responder
	conn      *FakeConn
	groups    *FakeGroups
	mu        sync.Mutex
	conflicts []conflict
	counted   map[counted]uint64 // OnCount's calls
	stop      func() error
}

// counted is one OnCount key.
type counted struct {
	c  Count
	ip netip.Addr
}

func newHarness(t *testing.T, fam family, cfg Config, announce ...netip.Addr) *harness {
	t.Helper()
	h := &harness{conn: NewFakeConn(), groups: &FakeGroups{}}
	cfg.OnConflict = func(ip netip.Addr, mac net.HardwareAddr) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.conflicts = append(h.conflicts, conflict{ip, mac})
	}
	h.counted = map[counted]uint64{}
	cfg.OnCount = func(c Count, ip netip.Addr) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.counted[counted{c, ip}]++
	}
	var err error
	if fam == familyARP {
		h.r, err = NewARP(testIfi, h.conn, cfg)
	} else {
		h.r, err = NewNDP(testIfi, h.conn, h.groups, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range announce {
		if err := h.r.Announce(ip); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- h.r.Run(ctx) }()
	synctest.Wait() // Run is reading
	h.stop = func() error { cancel(); return <-errc }
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	})
	return h
}

// exchange injects frame and returns the frames sent in response, once the
// responder is idle again.
func (h *harness) exchange(frame []byte) [][]byte {
	h.conn.Reset()
	h.conn.Inject(frame)
	synctest.Wait()
	return h.conn.Sent()
}

// checkCounted checks that OnCount saw exactly the requests, answers and gratuitous frames st
// counts, each for ip: the per-address counters the speaker exports (metallb_layer2_*) agree with
// the responder's own.
func (h *harness) checkCounted(t *testing.T, ip netip.Addr, st Stats) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	want := map[counted]uint64{}
	for c, n := range map[Count]uint64{CountRequest: st.Requests, CountAnswer: st.Answers, CountGratuitous: st.Gratuitous} {
		if n > 0 {
			want[counted{c, ip}] = n
		}
	}
	if diff := cmp.Diff(want, h.counted, cmp.AllowUnexported(counted{}), cmpOpts); diff != "" {
		t.Errorf("OnCount (-want +got):\n%s", diff)
	}
}

func (h *harness) takeConflicts() []conflict {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.conflicts
	h.conflicts = nil
	return c
}

func parseARPs(t *testing.T, frames [][]byte) []ARP {
	t.Helper()
	var out []ARP
	for _, f := range frames {
		p, err := ParseARP(f)
		if err != nil {
			t.Fatalf("sent frame %x: %v", f, err)
		}
		out = append(out, p)
	}
	return out
}

func parseNDPs(t *testing.T, frames [][]byte) []NDP {
	t.Helper()
	var out []NDP
	for _, f := range frames {
		p, err := ParseNDP(f)
		if err != nil {
			t.Fatalf("sent frame %x: %v", f, err)
		}
		out = append(out, p)
	}
	return out
}

func TestARPResponder(t *testing.T) {
	spread := func(ip, clientIP netip.Addr, mac net.HardwareAddr) (net.HardwareAddr, bool) {
		return otherMAC, clientIP == client4
	}
	reply := func(q ARP, mac net.HardwareAddr) []ARP { return []ARP{arpReply(q, ownMAC, mac)} }
	probe := arpRequest(broadcastMAC, vip4)
	probe.SenderIP = netip.IPv4Unspecified()
	fromOther := func(p ARP) ARP { p.EthSrc, p.SenderMAC = otherMAC, otherMAC; return p }
	garpReq, garpRep := gratuitousARP(vip4, broadcastMAC, otherMAC, otherMAC)
	ownGarp, _ := gratuitousARP(vip4, broadcastMAC, ownMAC, ownMAC)
	unicastToOther := arpRequest(otherMAC, vip4)
	multicastSender := arpRequest(broadcastMAC, vip4)
	multicastSender.SenderMAC = mustMAC("01:00:5e:00:00:01")

	tests := []struct {
		name          string
		in            ARP
		answer        AnswerFunc
		want          []ARP
		wantConflicts []conflict
		wantStats     Stats
	}{
		{name: "broadcast request", in: arpRequest(broadcastMAC, vip4),
			want: reply(arpRequest(broadcastMAC, vip4), ownMAC), wantStats: Stats{Requests: 1, Answers: 1}},
		{name: "unicast request to our MAC", in: arpRequest(ownMAC, vip4),
			want: reply(arpRequest(ownMAC, vip4), ownMAC), wantStats: Stats{Requests: 1, Answers: 1}},
		{name: "unicast request to another MAC", in: unicastToOther, wantStats: Stats{Requests: 1}},
		{name: "not announced", in: arpRequest(broadcastMAC, netip.MustParseAddr("192.0.2.11"))},
		{name: "probe", in: probe, want: reply(probe, ownMAC), wantStats: Stats{Requests: 1, Answers: 1}},
		{name: "reply from elsewhere", in: arpReply(arpRequest(broadcastMAC, client4), clientMAC, clientMAC)},
		{name: "multicast sender MAC", in: multicastSender, wantStats: Stats{Requests: 1}},
		{name: "own frame", in: ownGarp},
		{name: "gratuitous request from another MAC", in: garpReq,
			wantConflicts: []conflict{{vip4, otherMAC}}, wantStats: Stats{Conflicts: 1}},
		{name: "gratuitous reply from another MAC", in: garpRep,
			wantConflicts: []conflict{{vip4, otherMAC}}, wantStats: Stats{Conflicts: 1}},
		{name: "answer to a request from another MAC", in: fromOther(arpReply(arpRequest(broadcastMAC, vip4), otherMAC, otherMAC)),
			wantConflicts: []conflict{{vip4, otherMAC}}, wantStats: Stats{Conflicts: 1}},
		{name: "spread: another node's MAC", in: arpRequest(broadcastMAC, vip4), answer: spread,
			want: reply(arpRequest(broadcastMAC, vip4), otherMAC), wantStats: Stats{Requests: 1, Answers: 1}},
		{name: "spread: not this client", in: probe, answer: spread, wantStats: Stats{Requests: 1}},
		{name: "answer func gives a bad MAC", in: arpRequest(broadcastMAC, vip4),
			answer:    func(netip.Addr, netip.Addr, net.HardwareAddr) (net.HardwareAddr, bool) { return broadcastMAC, true },
			wantStats: Stats{Requests: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, familyARP, Config{}, vip4)
				h.r.SetAnswerFunc(tt.answer)
				got := parseARPs(t, h.exchange(mustMarshal(t, tt.in)))
				if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
					t.Errorf("sent (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.wantConflicts, h.takeConflicts(), cmpOpts); diff != "" {
					t.Errorf("conflicts (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.wantStats, h.r.Stats()); diff != "" {
					t.Errorf("stats (-want +got):\n%s", diff)
				}
				h.checkCounted(t, vip4, tt.wantStats)
			})
		})
	}
}

func TestNDPResponder(t *testing.T) {
	ns := solicitation(vip6)
	naTo := func(ethDst net.HardwareAddr, dst netip.Addr, mac net.HardwareAddr, solicited bool) []NDP {
		return []NDP{neighborAdvertisement(vip6, ethDst, ownMAC, dst, mac, solicited)}
	}
	unicast := ns
	unicast.EthDst, unicast.Dst = ownMAC, vip6
	unicast.Message = &ndp.NeighborSolicitation{TargetAddress: vip6} // no source option
	unicastOther := unicast
	unicastOther.EthDst = otherMAC
	dad := ns
	dad.Src = netip.IPv6Unspecified()
	dad.Message = &ndp.NeighborSolicitation{TargetAddress: vip6}
	wrongGroup := solicitation(vip6)
	wrongGroup.Dst = solicitedNode(netip.MustParseAddr("2001:db8::11"))
	wrongGroup.EthDst = ipv6MulticastMAC(wrongGroup.Dst)
	proxied := advertisement(vip6, otherMAC, false, true)
	proxied.Message.(*ndp.NeighborAdvertisement).Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ownMAC}}
	noTLLA := advertisement(vip6, otherMAC, false, true)
	noTLLA.Message.(*ndp.NeighborAdvertisement).Options = nil

	tests := []struct {
		name          string
		in            NDP
		answer        AnswerFunc
		want          []NDP
		wantConflicts []conflict
		wantStats     Stats
	}{
		{name: "multicast solicitation", in: ns, want: naTo(clientMAC, client6, ownMAC, true), wantStats: Stats{Requests: 1, Answers: 1}},
		{name: "unicast solicitation without source option", in: unicast,
			want: naTo(clientMAC, client6, ownMAC, true), wantStats: Stats{Requests: 1, Answers: 1}},
		{name: "unicast solicitation to another MAC", in: unicastOther, wantStats: Stats{Requests: 1}},
		{name: "duplicate address detection", in: dad,
			want: naTo(ipv6MulticastMAC(allNodes), allNodes, ownMAC, false), wantStats: Stats{Requests: 1, Answers: 1}},
		{name: "wrong solicited-node group", in: wrongGroup, wantStats: Stats{Requests: 1}},
		{name: "not announced", in: solicitation(netip.MustParseAddr("2001:db8::11"))},
		{name: "own frame", in: advertisement(vip6, ownMAC, false, true)},
		{name: "advertisement from another MAC", in: advertisement(vip6, otherMAC, false, true),
			wantConflicts: []conflict{{vip6, otherMAC}}, wantStats: Stats{Conflicts: 1}},
		{name: "advertisement without target option", in: noTLLA,
			wantConflicts: []conflict{{vip6, otherMAC}}, wantStats: Stats{Conflicts: 1}},
		{name: "advertisement sent for us", in: proxied},
		{name: "advertisement for another address", in: advertisement(client6, otherMAC, false, true)},
		{name: "spread: another node's MAC", in: ns,
			answer: func(ip, c netip.Addr, m net.HardwareAddr) (net.HardwareAddr, bool) {
				return otherMAC, c == client6 && macEqual(m, clientMAC)
			},
			want: naTo(clientMAC, client6, otherMAC, true), wantStats: Stats{Requests: 1, Answers: 1}},
		{name: "spread: not this client", in: ns,
			answer:    func(netip.Addr, netip.Addr, net.HardwareAddr) (net.HardwareAddr, bool) { return nil, false },
			wantStats: Stats{Requests: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, familyNDP, Config{}, vip6)
				h.r.SetAnswerFunc(tt.answer)
				got := parseNDPs(t, h.exchange(mustMarshal(t, tt.in)))
				if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
					t.Errorf("sent (-want +got):\n%s", diff)
				}
				for _, p := range got {
					if na := p.Message.(*ndp.NeighborAdvertisement); !na.Override {
						t.Errorf("advertisement without Override: %+v", na)
					}
				}
				if diff := cmp.Diff(tt.wantConflicts, h.takeConflicts(), cmpOpts); diff != "" {
					t.Errorf("conflicts (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.wantStats, h.r.Stats()); diff != "" {
					t.Errorf("stats (-want +got):\n%s", diff)
				}
				h.checkCounted(t, vip6, tt.wantStats)
			})
		})
	}
}

func TestMalformedCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, familyARP, Config{}, vip4)
		good := mustMarshal(t, arpRequest(broadcastMAC, vip4))
		tagged := append([]byte(nil), good...)
		tagged[12], tagged[13] = 0x81, 0x00
		for _, f := range [][]byte{nil, good[:20], tagged} {
			if sent := h.exchange(f); len(sent) != 0 {
				t.Errorf("answered %x", f)
			}
		}
		// Truncated frames are malformed; a VLAN-tagged one is merely not ours.
		if got := h.r.Stats(); got != (Stats{Malformed: 2}) {
			t.Errorf("stats = %+v, want 2 malformed", got)
		}
		if len(h.exchange(good)) != 1 {
			t.Error("no answer after malformed frames")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, familyNDP, Config{}, vip6)
		bad := mustMarshal(t, solicitation(vip6))
		bad[60] ^= 1 // checksum no longer matches
		h.exchange(bad)
		if got := h.r.Stats(); got != (Stats{Malformed: 1}) {
			t.Errorf("stats = %+v, want 1 malformed", got)
		}
	})
}

func TestWithdraw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, familyARP, Config{}, vip4)
		req := mustMarshal(t, arpRequest(broadcastMAC, vip4))
		if len(h.exchange(req)) != 1 {
			t.Fatal("no answer while announced")
		}
		if err := h.r.Withdraw(vip4); err != nil {
			t.Fatal(err)
		}
		if sent := h.exchange(req); len(sent) != 0 {
			t.Errorf("answered after Withdraw: %x", sent)
		}
		if err := h.r.Withdraw(vip4); err != nil {
			t.Errorf("second Withdraw = %v, want nil", err)
		}
		if err := h.r.Gratuitous(vip4); !errors.Is(err, ErrNotAnnounced) {
			t.Errorf("Gratuitous after Withdraw = %v, want ErrNotAnnounced", err)
		}
	})
}

// TestGroups checks that solicited-node groups are joined once per group,
// even for addresses that share one, and left with the last of them.
func TestGroups(t *testing.T) {
	a := netip.MustParseAddr("2001:db8::1:10")
	b := netip.MustParseAddr("2001:db8:ffff::1:10") // same low 24 bits as a
	c := netip.MustParseAddr("2001:db8::20")
	g := &FakeGroups{}
	r, err := NewNDP(testIfi, NewFakeConn(), g, Config{})
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string, f func(netip.Addr) error, ip netip.Addr, want ...string) {
		t.Helper()
		if err := f(ip); err != nil {
			t.Fatalf("%s %v: %v", what, ip, err)
		}
		var got []string
		for _, j := range g.Joined() {
			got = append(got, j.String())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after %s %v, joined (-want +got):\n%s", what, ip, diff)
		}
	}
	step("announce", r.Announce, a, "ff02::1:ff01:10")
	step("announce", r.Announce, b, "ff02::1:ff01:10")
	step("announce", r.Announce, c, "ff02::1:ff00:20", "ff02::1:ff01:10")
	step("announce again", r.Announce, c, "ff02::1:ff00:20", "ff02::1:ff01:10")
	step("withdraw", r.Withdraw, a, "ff02::1:ff00:20", "ff02::1:ff01:10")
	step("withdraw", r.Withdraw, b, "ff02::1:ff00:20")
	step("withdraw", r.Withdraw, c)

	g.JoinErr = errors.New("no such device")
	if err := r.Announce(a); !errors.Is(err, g.JoinErr) {
		t.Errorf("Announce with failing join = %v, want %v", err, g.JoinErr)
	}
	if got := r.Announced(); len(got) != 0 {
		t.Errorf("Announced() = %v after failed join, want none", got)
	}
}

func TestAnnounceFamily(t *testing.T) {
	r4, err := NewARP(testIfi, NewFakeConn(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	r6, err := NewNDP(testIfi, NewFakeConn(), &FakeGroups{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		r  *Responder
		ip string
		ok bool
	}{
		{r4, "192.0.2.10", true},
		{r4, "::ffff:192.0.2.11", true}, // unmapped
		{r4, "2001:db8::1", false},
		{r4, "0.0.0.0", false},
		{r4, "224.0.0.1", false},
		{r4, "127.0.0.1", false},
		{r4, "255.255.255.255", false},
		{r6, "2001:db8::1", true},
		{r6, "fe80::1%eth0", true}, // zone dropped
		{r6, "192.0.2.10", false},
		{r6, "::ffff:192.0.2.10", false},
		{r6, "::", false},
		{r6, "ff02::1", false},
	} {
		err := tt.r.Announce(netip.MustParseAddr(tt.ip))
		if (err == nil) != tt.ok {
			t.Errorf("%s Announce(%s) = %v, want ok=%v", tt.r.fam, tt.ip, err, tt.ok)
		}
		if !tt.ok && !errors.Is(err, ErrFamily) {
			t.Errorf("%s Announce(%s) = %v, want ErrFamily", tt.r.fam, tt.ip, err)
		}
	}
	want := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")}
	if diff := cmp.Diff(want, r4.Announced(), cmpOpts); diff != "" {
		t.Errorf("Announced (-want +got):\n%s", diff)
	}
	if got := r6.Announced(); len(got) != 2 || got[1] != netip.MustParseAddr("fe80::1") {
		t.Errorf("Announced = %v, want 2001:db8::1 and fe80::1 without zone", got)
	}
}

func TestNewErrors(t *testing.T) {
	noMAC := &net.Interface{Name: "tun0"}
	multicast := &net.Interface{Name: "x", HardwareAddr: mustMAC("01:00:5e:00:00:01")}
	for name, f := range map[string]func() (*Responder, error){
		"nil interface": func() (*Responder, error) { return NewARP(nil, NewFakeConn(), Config{}) },
		"no MAC":        func() (*Responder, error) { return NewARP(noMAC, NewFakeConn(), Config{}) },
		"multicast MAC": func() (*Responder, error) { return NewARP(multicast, NewFakeConn(), Config{}) },
		"nil conn":      func() (*Responder, error) { return NewARP(testIfi, nil, Config{}) },
		"nil groups":    func() (*Responder, error) { return NewNDP(testIfi, NewFakeConn(), nil, Config{}) },
		"negative refresh": func() (*Responder, error) {
			return NewARP(testIfi, NewFakeConn(), Config{Refresh: -time.Second})
		},
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestGratuitous(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, familyARP, Config{}, vip4)
		if err := h.r.Gratuitous(vip4); err != nil {
			t.Fatal(err)
		}
		req, rep := gratuitousARP(vip4, broadcastMAC, ownMAC, ownMAC)
		if diff := cmp.Diff([]ARP{req, rep}, parseARPs(t, h.conn.Sent()), cmpOpts); diff != "" {
			t.Errorf("Gratuitous sent (-want +got):\n%s", diff)
		}
		h.conn.Reset()
		if err := h.r.GratuitousTo(vip4, client4, clientMAC, otherMAC); err != nil {
			t.Fatal(err)
		}
		_, want := gratuitousARP(vip4, clientMAC, ownMAC, otherMAC)
		if diff := cmp.Diff([]ARP{want}, parseARPs(t, h.conn.Sent()), cmpOpts); diff != "" {
			t.Errorf("GratuitousTo sent (-want +got):\n%s", diff)
		}
		if got := h.r.Stats(); got != (Stats{Gratuitous: 3}) {
			t.Errorf("stats = %+v, want 3 gratuitous", got)
		}
		h.checkCounted(t, vip4, Stats{Gratuitous: 3})
		for name, err := range map[string]error{
			"not announced":    h.r.Gratuitous(netip.MustParseAddr("192.0.2.11")),
			"wrong family":     h.r.Gratuitous(vip6),
			"to not announced": h.r.GratuitousTo(netip.MustParseAddr("192.0.2.11"), client4, clientMAC, ownMAC),
			"to broadcast":     h.r.GratuitousTo(vip4, client4, broadcastMAC, ownMAC),
			"short MAC":        h.r.GratuitousTo(vip4, client4, clientMAC, ownMAC[:4]),
		} {
			if err == nil {
				t.Errorf("%s: no error", name)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, familyNDP, Config{}, vip6)
		if err := h.r.Gratuitous(vip6); err != nil {
			t.Fatal(err)
		}
		if err := h.r.GratuitousTo(vip6, client6, clientMAC, otherMAC); err != nil {
			t.Fatal(err)
		}
		want := []NDP{
			neighborAdvertisement(vip6, mustMAC("33:33:00:00:00:01"), ownMAC, allNodes, ownMAC, false),
			neighborAdvertisement(vip6, clientMAC, ownMAC, client6, otherMAC, false),
		}
		if diff := cmp.Diff(want, parseNDPs(t, h.conn.Sent()), cmpOpts); diff != "" {
			t.Errorf("sent (-want +got):\n%s", diff)
		}
		if err := h.r.GratuitousTo(vip6, client4, clientMAC, otherMAC); err == nil {
			t.Error("GratuitousTo an IPv4 client on NDP: no error")
		}
	})
}

func TestRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, familyARP, Config{Refresh: 10 * time.Second}, vip4)
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if got := len(h.conn.Sent()); got != 4 {
			t.Errorf("after 25s with a 10s refresh: %d frames, want 4 (2 rounds of request+reply)", got)
		}

		// Spread mode: no broadcast for an address the answer func refuses for
		// the zero client; another node's MAC for one it gives.
		vip2 := netip.MustParseAddr("192.0.2.20")
		if err := h.r.Announce(vip2); err != nil {
			t.Fatal(err)
		}
		h.r.SetAnswerFunc(func(ip, c netip.Addr, m net.HardwareAddr) (net.HardwareAddr, bool) {
			if c.IsValid() || m != nil {
				t.Errorf("refresh asked for client %v %v, want the zero client", c, m)
			}
			return otherMAC, ip == vip2
		})
		h.conn.Reset()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		req, rep := gratuitousARP(vip2, broadcastMAC, ownMAC, otherMAC)
		if diff := cmp.Diff([]ARP{req, rep}, parseARPs(t, h.conn.Sent()), cmpOpts); diff != "" {
			t.Errorf("refresh sent (-want +got):\n%s", diff)
		}
	})
}

func TestRunLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, familyARP, Config{}, vip4)
		if err := h.r.Run(t.Context()); !errors.Is(err, ErrRunning) {
			t.Errorf("second Run = %v, want ErrRunning", err)
		}
		// The interface going down is reported once; Run keeps reading.
		h.conn.InjectError(&net.OpError{Op: "read", Net: "packet", Err: syscall.ENETDOWN})
		time.Sleep(time.Second)
		if len(h.exchange(mustMarshal(t, arpRequest(broadcastMAC, vip4)))) != 1 {
			t.Error("no answer after ENETDOWN")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		conn := NewFakeConn()
		r, err := NewARP(testIfi, conn, Config{})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- r.Run(t.Context()) }()
		conn.InjectError(syscall.ENODEV)
		if err := <-errc; !errors.Is(err, syscall.ENODEV) {
			t.Errorf("Run = %v, want ENODEV", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		r, err := NewARP(testIfi, NewFakeConn(), Config{})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- r.Run(context.Background()) }()
		synctest.Wait()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Run after Close = %v, want net.ErrClosed", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// A context that has already ended: Run returns at once.
		r, err := NewARP(testIfi, NewFakeConn(), Config{Refresh: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := r.Run(ctx); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

// TestConcurrentUse exercises every method from several goroutines while
// Run answers; run it with -race.
func TestConcurrentUse(t *testing.T) {
	conn := NewFakeConn()
	r, err := NewARP(testIfi, conn, Config{Refresh: time.Millisecond, OnConflict: func(netip.Addr, net.HardwareAddr) {}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	var wg sync.WaitGroup
	for i := range 4 {
		ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})
		wg.Go(func() {
			for j := range 200 {
				_ = r.Announce(ip)
				conn.Inject(mustMarshal(t, arpRequest(broadcastMAC, ip)))
				_ = r.Gratuitous(ip)
				if j%2 == 0 {
					r.SetAnswerFunc(func(netip.Addr, netip.Addr, net.HardwareAddr) (net.HardwareAddr, bool) { return otherMAC, true })
				} else {
					r.SetAnswerFunc(nil)
				}
				_ = r.Announced()
				_ = r.Stats()
				_ = r.Withdraw(ip)
			}
		})
	}
	wg.Wait()
	// Run reads the injected requests on its own schedule: on a busy machine it reads them all after
	// the loops withdrew every address, and requests for addresses not announced are not counted
	// (failed in a CI pre-check: 0 requests after 5 s). One more, for an address announced from here
	// on, is counted whenever it is read.
	last := netip.AddrFrom4([4]byte{192, 0, 2, 10})
	if err := r.Announce(last); err != nil {
		t.Fatal(err)
	}
	conn.Inject(mustMarshal(t, arpRequest(broadcastMAC, last)))
	for deadline := time.Now().Add(5 * time.Second); r.Stats().Requests == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Requests == 0 || s.Gratuitous == 0 {
		t.Errorf("stats = %+v, want some requests and gratuitous frames", s)
	}
}

func ExampleResponder() {
	// In production: r, err := DialARP(ifi, Config{...}) opens the socket.
	r, err := NewARP(testIfi, NewFakeConn(), Config{
		OnConflict: func(ip netip.Addr, mac net.HardwareAddr) {
			fmt.Printf("%v is also claimed by %v\n", ip, mac)
		},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()

	_ = r.Announce(vip4)   // answer requests for it
	_ = r.Gratuitous(vip4) // and tell everyone at once, on takeover
	fmt.Println(r.Announced(), r.Stats().Gratuitous)

	cancel()
	fmt.Println(<-done)
	// Output:
	// [192.0.2.10] 2
	// <nil>
}
