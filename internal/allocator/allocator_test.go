package allocator

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mkPool(t testing.TB, name string, auto, avoid bool, ranges ...string) Pool {
	t.Helper()
	p := Pool{Name: name, AutoAssign: auto, AvoidBuggyIPs: avoid}
	for _, s := range ranges {
		rs, err := ParseRange(s)
		if err != nil {
			t.Fatal(err)
		}
		p.Ranges = append(p.Ranges, rs...)
	}
	return p
}

func svcKey(name string) Key { return Key{Namespace: "default", Name: name} }

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func asg(pool string, ips ...string) Assignment { return Assignment{IPs: addrs(ips...), Pool: pool} }

func tcp(ports ...int32) []Port {
	var out []Port
	for _, p := range ports {
		out = append(out, Port{Protocol: "TCP", Port: p})
	}
	return out
}

// step is one call in a scenario.
type step struct {
	name    string
	release bool         // Release(req.Key)
	assign  []netip.Addr // Assign(req, assign) instead of Allocate(req)
	req     Request
	want    Assignment
	wantErr Reason
}

func runSteps(t *testing.T, a *Allocator, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.release {
			a.Release(s.req.Key)
			if _, ok := a.Get(s.req.Key); ok {
				t.Fatalf("step %d (%s): %v still holds an assignment after Release", i, s.name, s.req.Key)
			}
			continue
		}
		before := snapshot(a)
		var got Assignment
		var err error
		if s.assign != nil {
			got, err = a.Assign(s.req, s.assign)
		} else {
			got, err = a.Allocate(s.req)
		}
		if s.wantErr != "" {
			if !errors.Is(err, s.wantErr) {
				t.Fatalf("step %d (%s): got %v, %v; want error %s", i, s.name, got, err, s.wantErr)
			}
			if after := snapshot(a); !before.equal(after) {
				diff := cmp.Diff(before, after, addrCmp)
				t.Fatalf("step %d (%s): failed call changed state (-before +after):\n%s", i, s.name, diff)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, s.name, err)
		}
		if diff := cmp.Diff(s.want, got, addrCmp); diff != "" {
			t.Fatalf("step %d (%s): assignment (-want +got):\n%s", i, s.name, diff)
		}
		if held, _ := a.Get(s.req.Key); !cmp.Equal(held, got, addrCmp) {
			t.Fatalf("step %d (%s): Get = %v, returned %v", i, s.name, held, got)
		}
	}
}

// state is the observable state of an Allocator: every assignment and the stats of every pool.
type state struct {
	Assignments map[Key]Assignment
	Stats       map[string]PoolStats
}

func snapshot(a *Allocator) state {
	st := state{Assignments: map[Key]Assignment{}, Stats: map[string]PoolStats{}}
	for k, s := range a.svcs {
		st.Assignments[k] = s.assignment()
	}
	for n := range a.pools {
		st.Stats[n], _ = a.Stats(n)
	}
	return st
}

// equal is a fast equality check (go-cmp is used to explain a difference, not to find one).
func (s state) equal(o state) bool {
	if len(s.Assignments) != len(o.Assignments) || len(s.Stats) != len(o.Stats) {
		return false
	}
	for k, v := range s.Assignments {
		if w, ok := o.Assignments[k]; !ok || !asgEqual(v, w) {
			return false
		}
	}
	for k, v := range s.Stats {
		if w, ok := o.Stats[k]; !ok || v != w {
			return false
		}
	}
	return true
}

func asgEqual(a, b Assignment) bool { return a.Pool == b.Pool && slices.Equal(a.IPs, b.IPs) }

func TestSeed000(t *testing.T) {
	a := New()
	if ev := a.SetPools([]Pool{mkPool(t, "default", true, false, "172.18.255.200-172.18.255.250")}); len(ev) != 0 {
		t.Fatalf("evicted %v", ev)
	}
	runSteps(t, a, []step{
		{name: "first", req: Request{Key: svcKey("a"), Candidates: []string{"default"}}, want: asg("default", "172.18.255.200")},
		{name: "second", req: Request{Key: svcKey("b"), Candidates: []string{"default"}}, want: asg("default", "172.18.255.201")},
		{name: "third", req: Request{Key: svcKey("c"), Candidates: []string{"default"}}, want: asg("default", "172.18.255.202")},
		{name: "again", req: Request{Key: svcKey("b"), Candidates: []string{"default"}}, want: asg("default", "172.18.255.201")},
	})
	st, _ := a.Stats("default")
	if diff := cmp.Diff(PoolStats{AssignedV4: 3, AvailableV4: 48, Services: 3}, st); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestLowestFreeAfterRelease(t *testing.T) {
	a := New()
	a.SetPools([]Pool{mkPool(t, "p", true, false, "10.0.0.0/29")})
	req := func(n string) Request { return Request{Key: svcKey(n), Candidates: []string{"p"}} }
	runSteps(t, a, []step{
		{req: req("a"), want: asg("p", "10.0.0.0")},
		{req: req("b"), want: asg("p", "10.0.0.1")},
		{req: req("c"), want: asg("p", "10.0.0.2")},
		{req: req("d"), want: asg("p", "10.0.0.3")},
		{release: true, req: req("c")},
		{release: true, req: req("b")},
		{name: "lowest hole", req: req("e"), want: asg("p", "10.0.0.1")},
		{name: "next hole", req: req("f"), want: asg("p", "10.0.0.2")},
		{name: "past the end of used", req: req("g"), want: asg("p", "10.0.0.4")},
		{release: true, req: req("a")},
		{name: "first address again", req: req("h"), want: asg("p", "10.0.0.0")},
		{req: req("i"), want: asg("p", "10.0.0.5")},
		{req: req("j"), want: asg("p", "10.0.0.6")},
		{req: req("k"), want: asg("p", "10.0.0.7")},
		{name: "full", req: req("l"), wantErr: ErrPoolExhausted},
		{release: true, req: req("f")},
		{req: req("l"), want: asg("p", "10.0.0.2")},
	})
}

func TestAvoidBuggyIPs(t *testing.T) {
	a := New()
	a.SetPools([]Pool{mkPool(t, "p", true, true, "10.0.0.0/23")})
	seen := map[netip.Addr]bool{}
	for i := 0; ; i++ {
		got, err := a.Allocate(Request{Key: svcKey(fmt.Sprint(i)), Candidates: []string{"p"}})
		if errors.Is(err, ErrPoolExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ip := got.IPs[0]
		if b := ip.As4(); b[3] == 0 || b[3] == 255 {
			t.Fatalf("allocated buggy address %v", ip)
		}
		if seen[ip] {
			t.Fatalf("allocated %v twice", ip)
		}
		seen[ip] = true
		if i == 0 && ip != netip.MustParseAddr("10.0.0.1") {
			t.Errorf("first address %v, want 10.0.0.1", ip)
		}
		if i == 254 && ip != netip.MustParseAddr("10.0.1.1") {
			t.Errorf("255th address %v, want 10.0.1.1", ip)
		}
	}
	if len(seen) != 508 {
		t.Errorf("allocated %d addresses, want 508", len(seen))
	}
	if st, _ := a.Stats("p"); st != (PoolStats{AssignedV4: 508, Services: 508}) {
		t.Errorf("stats %+v", st)
	}
	// Freeing an address next to the .255/.0 pair joins the intervals around it.
	a.Release(svcKey("253")) // 10.0.0.254
	a.Release(svcKey("254")) // 10.0.1.1
	if n := a.pools["p"].free[0].n; n != 1 {
		t.Errorf("%d free intervals, want 1", n)
	}
	runSteps(t, a, []step{
		{name: "requested .255", req: Request{Key: svcKey("x"), Requested: addrs("10.0.0.255")}, wantErr: ErrNotInPool},
		{name: "requested .0", req: Request{Key: svcKey("x"), Requested: addrs("10.0.1.0")}, wantErr: ErrNotInPool},
		{name: "refill", req: Request{Key: svcKey("x"), Candidates: []string{"p"}}, want: asg("p", "10.0.0.254")},
		{name: "refill", req: Request{Key: svcKey("y"), Candidates: []string{"p"}}, want: asg("p", "10.0.1.1")},
	})

	// Without avoidBuggyIPs, .0 is the first address.
	b := New()
	b.SetPools([]Pool{mkPool(t, "p", true, false, "10.0.0.0/23")})
	runSteps(t, b, []step{{req: Request{Key: svcKey("a"), Candidates: []string{"p"}}, want: asg("p", "10.0.0.0")}})
}

func TestCandidatesAndPoolAnnotation(t *testing.T) {
	pools := func(t *testing.T) []Pool {
		return []Pool{
			mkPool(t, "a", true, false, "10.0.0.0/30"),
			mkPool(t, "b", true, false, "10.0.1.0/30"),
			mkPool(t, "manual", false, false, "10.0.2.0/30"),
			mkPool(t, "v6", true, false, "fc00::/126"),
		}
	}
	for _, tc := range []struct {
		name    string
		fill    map[string]int // pool -> addresses to use up first
		req     Request
		want    Assignment
		wantErr Reason
	}{
		{name: "first candidate", req: Request{Candidates: []string{"b", "a"}}, want: asg("b", "10.0.1.0")},
		{name: "order matters", req: Request{Candidates: []string{"a", "b"}}, want: asg("a", "10.0.0.0")},
		{name: "full candidate skipped", fill: map[string]int{"b": 4}, req: Request{Candidates: []string{"b", "a"}}, want: asg("a", "10.0.0.0")},
		{name: "all full", fill: map[string]int{"a": 4, "b": 4}, req: Request{Candidates: []string{"b", "a"}}, wantErr: ErrPoolExhausted},
		{name: "autoAssign false skipped", req: Request{Candidates: []string{"manual", "a"}}, want: asg("a", "10.0.0.0")},
		{name: "only autoAssign false", req: Request{Candidates: []string{"manual"}}, wantErr: ErrNoPool},
		{name: "unknown candidates", req: Request{Candidates: []string{"nope"}}, wantErr: ErrNoPool},
		{name: "no candidates", req: Request{}, wantErr: ErrNoPool},
		{name: "excluded candidate", req: Request{Candidates: []string{"b", "a"}, Excluded: []string{"b"}}, want: asg("a", "10.0.0.0")},
		{name: "wrong family", req: Request{Families: []Family{IPv6}, Candidates: []string{"a", "b"}}, wantErr: ErrNoFamily},
		{name: "v6 candidate", req: Request{Families: []Family{IPv6}, Candidates: []string{"a", "v6"}}, want: asg("v6", "fc00::")},
		{name: "pool annotation", req: Request{Pool: "b", Candidates: []string{"a"}}, want: asg("b", "10.0.1.0")},
		{name: "pool annotation autoAssign false", req: Request{Pool: "manual"}, want: asg("manual", "10.0.2.0")},
		{name: "pool annotation full", fill: map[string]int{"manual": 4}, req: Request{Pool: "manual"}, wantErr: ErrPoolExhausted},
		{name: "pool annotation unknown", req: Request{Pool: "nope", Candidates: []string{"a"}}, wantErr: ErrUnknownPool},
		{name: "pool annotation excluded", req: Request{Pool: "b", Excluded: []string{"b"}}, wantErr: ErrPoolNotAllowed},
		{name: "pool annotation wrong family", req: Request{Pool: "v6"}, wantErr: ErrNoFamily},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			a.SetPools(pools(t))
			for p, n := range tc.fill {
				for i := 0; i < n; i++ {
					if _, err := a.Allocate(Request{Key: svcKey(fmt.Sprintf("fill-%s-%d", p, i)), Pool: p}); err != nil {
						t.Fatal(err)
					}
				}
			}
			tc.req.Key = svcKey("x")
			runSteps(t, a, []step{{req: tc.req, want: tc.want, wantErr: tc.wantErr}})
		})
	}
}

func TestRequested(t *testing.T) {
	a := New()
	a.SetPools([]Pool{
		mkPool(t, "p", true, false, "10.0.0.0/24", "fc00::/120"),
		mkPool(t, "q", false, false, "10.0.1.0/24"),
	})
	k := svcKey
	runSteps(t, a, []step{
		{name: "in pool", req: Request{Key: k("a"), Requested: addrs("10.0.0.50")}, want: asg("p", "10.0.0.50")},
		{name: "idempotent", req: Request{Key: k("a"), Requested: addrs("10.0.0.50")}, want: asg("p", "10.0.0.50")},
		{name: "autoAssign false pool", req: Request{Key: k("b"), Requested: addrs("10.0.1.7")}, want: asg("q", "10.0.1.7")},
		{name: "not in pool", req: Request{Key: k("c"), Requested: addrs("192.168.0.1")}, wantErr: ErrNotInPool},
		{name: "in use", req: Request{Key: k("c"), Requested: addrs("10.0.0.50")}, wantErr: ErrInUse},
		{name: "pool annotation agrees", req: Request{Key: k("c"), Requested: addrs("10.0.0.51"), Pool: "p"}, want: asg("p", "10.0.0.51")},
		{name: "pool annotation disagrees", req: Request{Key: k("d"), Requested: addrs("10.0.0.52"), Pool: "q"}, wantErr: ErrPoolMismatch},
		{name: "pool annotation unknown", req: Request{Key: k("d"), Requested: addrs("10.0.0.52"), Pool: "zz"}, wantErr: ErrUnknownPool},
		{name: "excluded pool", req: Request{Key: k("d"), Requested: addrs("10.0.0.52"), Excluded: []string{"p"}}, wantErr: ErrPoolNotAllowed},
		{name: "wrong family", req: Request{Key: k("d"), Requested: addrs("fc00::1")}, wantErr: ErrNoFamily},
		{name: "two of a family", req: Request{Key: k("d"), Policy: PreferDualStack, Families: []Family{IPv4, IPv6}, Requested: addrs("10.0.0.1", "10.0.0.2")}, wantErr: ErrInvalidRequest},
		{name: "dual in one pool", req: Request{Key: k("d"), Policy: RequireDualStack, Families: []Family{IPv6, IPv4}, Requested: addrs("10.0.0.52", "fc00::52")}, want: asg("p", "fc00::52", "10.0.0.52")},
		{name: "dual across pools", req: Request{Key: k("e"), Policy: RequireDualStack, Families: []Family{IPv4, IPv6}, Requested: addrs("10.0.1.9", "fc00::9")}, wantErr: ErrPoolMismatch},
		{name: "require dual, one given", req: Request{Key: k("e"), Policy: RequireDualStack, Families: []Family{IPv4, IPv6}, Requested: addrs("10.0.0.9")}, wantErr: ErrNoFamily},
		{name: "prefer dual, one given", req: Request{Key: k("e"), Policy: PreferDualStack, Families: []Family{IPv4, IPv6}, Requested: addrs("fc00::9")}, want: asg("p", "fc00::9")},
		{name: "ipv4-mapped is ipv4", req: Request{Key: k("f"), Requested: addrs("::ffff:10.0.0.60")}, want: asg("p", "10.0.0.60")},
		{name: "change requested", req: Request{Key: k("a"), Requested: addrs("10.0.0.70")}, want: asg("p", "10.0.0.70")},
		{name: "old one free again", req: Request{Key: k("g"), Requested: addrs("10.0.0.50")}, want: asg("p", "10.0.0.50")},
		{name: "assign other than requested", req: Request{Key: k("a"), Requested: addrs("10.0.0.70")}, assign: addrs("10.0.0.71"), wantErr: ErrRequestMismatch},
		{name: "assign existing", req: Request{Key: k("h")}, assign: addrs("10.0.0.71"), want: asg("p", "10.0.0.71")},
		{name: "assign in use", req: Request{Key: k("i")}, assign: addrs("10.0.0.71"), wantErr: ErrInUse},
		{name: "assign nothing", req: Request{Key: k("i")}, assign: []netip.Addr{}, wantErr: ErrInvalidRequest},
	})
}

func TestSharing(t *testing.T) {
	const ip = "10.0.0.0"
	udp53 := []Port{{Protocol: "UDP", Port: 53}}
	tcp53 := []Port{{Protocol: "TCP", Port: 53}}
	for _, tc := range []struct {
		name        string
		first       Request
		second      Request
		wantErr     Reason // for the second Service requesting the same address
		wantAuto    string // address the second Service gets when auto-allocated from the pool instead
		wantMessage string
	}{
		{
			name:     "same key, disjoint ports",
			first:    Request{SharingKey: "k", Ports: tcp(80)},
			second:   Request{SharingKey: "k", Ports: tcp(443)},
			wantAuto: ip,
		},
		{
			name:        "same key, same port",
			first:       Request{SharingKey: "k", Ports: tcp(80, 443)},
			second:      Request{SharingKey: "k", Ports: tcp(443)},
			wantErr:     ErrSharingConflict,
			wantAuto:    "10.0.0.1",
			wantMessage: "service default/second: port TCP/443 on address 10.0.0.0 is already used by default/first",
		},
		{
			name:     "TCP/53 and UDP/53",
			first:    Request{SharingKey: "dns", Ports: tcp53},
			second:   Request{SharingKey: "dns", Ports: udp53},
			wantAuto: ip,
		},
		{
			name:        "different backend keys",
			first:       Request{SharingKey: "k", BackendKey: "app=a", Ports: tcp(80)},
			second:      Request{SharingKey: "k", BackendKey: "app=b", Ports: tcp(443)},
			wantErr:     ErrSharingConflict,
			wantAuto:    "10.0.0.1",
			wantMessage: `service default/second: address 10.0.0.0 is shared by default/first with backend key "app=a", not "app=b" (services sharing an address with externalTrafficPolicy Local must select the same pods)`,
		},
		{
			name:     "same backend keys",
			first:    Request{SharingKey: "k", BackendKey: "app=a", Ports: tcp(80)},
			second:   Request{SharingKey: "k", BackendKey: "app=a", Ports: tcp(443)},
			wantAuto: ip,
		},
		{
			name:        "no key on the holder",
			first:       Request{Ports: tcp(80)},
			second:      Request{SharingKey: "k", Ports: tcp(443)},
			wantErr:     ErrInUse,
			wantAuto:    "10.0.0.1",
			wantMessage: "service default/second: address 10.0.0.0 is in use by default/first, which does not allow sharing",
		},
		{
			name:        "no key on the newcomer",
			first:       Request{SharingKey: "k", Ports: tcp(80)},
			second:      Request{Ports: tcp(443)},
			wantErr:     ErrInUse,
			wantAuto:    "10.0.0.1",
			wantMessage: "service default/second: address 10.0.0.0 is in use by default/first, and this service has no sharing key",
		},
		{
			name:        "different keys",
			first:       Request{SharingKey: "k1", Ports: tcp(80)},
			second:      Request{SharingKey: "k2", Ports: tcp(443)},
			wantErr:     ErrInUse,
			wantAuto:    "10.0.0.1",
			wantMessage: `service default/second: address 10.0.0.0 is in use by default/first, with sharing key "k1", not "k2"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			a.SetPools([]Pool{mkPool(t, "p", true, false, "10.0.0.0/24")})
			first := tc.first
			first.Key, first.Requested = svcKey("first"), addrs(ip)
			if _, err := a.Allocate(first); err != nil {
				t.Fatal(err)
			}
			second := tc.second
			second.Key, second.Requested = svcKey("second"), addrs(ip)
			got, err := a.Allocate(second)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("second: %v", err)
			case tc.wantErr == "" && !cmp.Equal(got, asg("p", ip), addrCmp):
				t.Fatalf("second got %v", got)
			case tc.wantErr != "" && !errors.Is(err, tc.wantErr):
				t.Fatalf("second: got %v, %v; want %s", got, err, tc.wantErr)
			}
			if tc.wantMessage != "" && err.Error() != tc.wantMessage {
				t.Errorf("message\n got %q\nwant %q", err.Error(), tc.wantMessage)
			}
			if tc.wantErr != "" {
				var e *Error
				if !errors.As(err, &e) || !cmp.Equal(e.Holders, []Key{svcKey("first")}) || e.Addr != netip.MustParseAddr(ip) || e.Pool != "p" {
					t.Errorf("error fields %+v", e)
				}
				if ReasonOf(err) != tc.wantErr {
					t.Errorf("ReasonOf = %q", ReasonOf(err))
				}
			}
			// Auto allocation: the lowest address that is free or shareable.
			a.Release(second.Key)
			second.Requested = nil
			second.Candidates = []string{"p"}
			got, err = a.Allocate(second)
			if err != nil {
				t.Fatal(err)
			}
			if want := asg("p", tc.wantAuto); !cmp.Equal(got, want, addrCmp) {
				t.Errorf("auto: got %v, want %v", got, want)
			}
			st, _ := a.Stats("p")
			wantAssigned := int64(2)
			if tc.wantAuto == ip {
				wantAssigned = 1 // a shared address counts once
			}
			if st.AssignedV4 != wantAssigned || st.AvailableV4 != 256-wantAssigned {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestSharingPicksLowestCompatible(t *testing.T) {
	a := New()
	a.SetPools([]Pool{mkPool(t, "p", true, false, "10.0.0.0/24")})
	k := svcKey
	cand := []string{"p"}
	runSteps(t, a, []step{
		{req: Request{Key: k("a"), SharingKey: "s", Ports: tcp(80), Candidates: cand}, want: asg("p", "10.0.0.0")},
		{req: Request{Key: k("b"), Ports: tcp(80), Candidates: cand}, want: asg("p", "10.0.0.1")},
		{name: "shares .0", req: Request{Key: k("c"), SharingKey: "s", Ports: tcp(443), Candidates: cand}, want: asg("p", "10.0.0.0")},
		{name: "port 80 taken on .0: next free", req: Request{Key: k("d"), SharingKey: "s", Ports: tcp(80), Candidates: cand}, want: asg("p", "10.0.0.2")},
		{name: "shares .2 (80 free there? no: 443 is)", req: Request{Key: k("e"), SharingKey: "s", Ports: tcp(443), Candidates: cand}, want: asg("p", "10.0.0.2")},
		{release: true, req: Request{Key: k("b")}},
		{name: "free .1 is lower than shareable .2", req: Request{Key: k("f"), SharingKey: "s", Ports: tcp(8080, 80), Candidates: cand}, want: asg("p", "10.0.0.1")},
		{name: "other key does not share", req: Request{Key: k("g"), SharingKey: "t", Ports: tcp(9), Candidates: cand}, want: asg("p", "10.0.0.3")},
		{name: "sole holder changes its key in place", req: Request{Key: k("g"), SharingKey: "u", Ports: tcp(9), Candidates: cand}, want: asg("p", "10.0.0.3")},
		{name: "holder with company cannot change key: moves", req: Request{Key: k("a"), SharingKey: "v", Ports: tcp(80), Candidates: cand}, want: asg("p", "10.0.0.4")},
		{name: "port change that clashes: moves to the lowest fit", req: Request{Key: k("c"), SharingKey: "s", Ports: tcp(80, 443), Candidates: cand}, want: asg("p", "10.0.0.0")},
		{name: "port change that fits: stays", req: Request{Key: k("c"), SharingKey: "s", Ports: tcp(81, 443), Candidates: cand}, want: asg("p", "10.0.0.0")},
	})
}

func TestDualStack(t *testing.T) {
	pools := func(t *testing.T) []Pool {
		return []Pool{
			mkPool(t, "v4", true, false, "10.0.0.0/30"),
			mkPool(t, "v6", true, false, "fc00::/126"),
			mkPool(t, "dual", true, false, "10.0.1.0/30", "fc00:1::/126"),
		}
	}
	v4v6 := []Family{IPv4, IPv6}
	v6v4 := []Family{IPv6, IPv4}
	for _, tc := range []struct {
		name    string
		fill    map[string]int // pool -> Services (SingleStack IPv4 unless v6 in the name) to allocate first
		req     Request
		want    Assignment
		wantErr Reason
	}{
		{name: "require: first pool with both", req: Request{Policy: RequireDualStack, Families: v4v6, Candidates: []string{"v4", "v6", "dual"}}, want: asg("dual", "10.0.1.0", "fc00:1::")},
		{name: "require: ipv6 primary first", req: Request{Policy: RequireDualStack, Families: v6v4, Candidates: []string{"dual"}}, want: asg("dual", "fc00:1::", "10.0.1.0")},
		{name: "require: none with both", req: Request{Policy: RequireDualStack, Families: v4v6, Candidates: []string{"v4", "v6"}}, wantErr: ErrNoFamily},
		{name: "require: one family", req: Request{Policy: RequireDualStack, Families: []Family{IPv4}, Candidates: []string{"dual"}}, wantErr: ErrInvalidRequest},
		{name: "require: pool annotation single family", req: Request{Policy: RequireDualStack, Families: v4v6, Pool: "v4"}, wantErr: ErrNoFamily},
		{name: "require: dual pool v4 full", fill: map[string]int{"dual": 4}, req: Request{Policy: RequireDualStack, Families: v4v6, Candidates: []string{"dual"}}, wantErr: ErrPoolExhausted},
		{name: "prefer: both beats earlier single", req: Request{Policy: PreferDualStack, Families: v4v6, Candidates: []string{"v4", "dual"}}, want: asg("dual", "10.0.1.0", "fc00:1::")},
		{name: "prefer: primary fallback", req: Request{Policy: PreferDualStack, Families: v4v6, Candidates: []string{"v6", "v4"}}, want: asg("v4", "10.0.0.0")},
		{name: "prefer: primary ipv6 fallback", req: Request{Policy: PreferDualStack, Families: v6v4, Candidates: []string{"v4", "v6"}}, want: asg("v6", "fc00::")},
		{name: "prefer: secondary fallback", fill: map[string]int{"v4": 4}, req: Request{Policy: PreferDualStack, Families: v4v6, Candidates: []string{"v4", "v6"}}, want: asg("v6", "fc00::")},
		{name: "prefer: dual pool with v4 full gives v6 only", fill: map[string]int{"dual": 4}, req: Request{Policy: PreferDualStack, Families: v4v6, Candidates: []string{"dual"}}, want: asg("dual", "fc00:1::")},
		{name: "prefer: pool annotation single family", req: Request{Policy: PreferDualStack, Families: v4v6, Pool: "v6"}, want: asg("v6", "fc00::")},
		{name: "prefer with one family is single stack", req: Request{Policy: PreferDualStack, Families: []Family{IPv6}, Candidates: []string{"dual"}}, want: asg("dual", "fc00:1::")},
		{name: "single: primary only", req: Request{Families: v6v4, Candidates: []string{"dual"}}, want: asg("dual", "fc00:1::")},
		{name: "duplicate family", req: Request{Families: []Family{IPv4, IPv4}, Candidates: []string{"dual"}}, wantErr: ErrInvalidRequest},
		{name: "bad family", req: Request{Families: []Family{7}, Candidates: []string{"dual"}}, wantErr: ErrInvalidRequest},
		{name: "bad policy", req: Request{Policy: 9, Candidates: []string{"dual"}}, wantErr: ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			a.SetPools(pools(t))
			for p, n := range tc.fill {
				for i := 0; i < n; i++ {
					if _, err := a.Allocate(Request{Key: svcKey(fmt.Sprintf("fill-%s-%d", p, i)), Pool: p}); err != nil {
						t.Fatal(err)
					}
				}
			}
			tc.req.Key = svcKey("x")
			runSteps(t, a, []step{{req: tc.req, want: tc.want, wantErr: tc.wantErr}})
		})
	}
}

func TestPreferDualStackGainsSecondFamily(t *testing.T) {
	a := New()
	a.SetPools([]Pool{mkPool(t, "p", true, false, "10.0.0.0/30")})
	req := Request{Key: svcKey("x"), Policy: PreferDualStack, Families: []Family{IPv6, IPv4}, Candidates: []string{"p"}}
	runSteps(t, a, []step{{name: "v4 only for now", req: req, want: asg("p", "10.0.0.0")}})
	if ev := a.SetPools([]Pool{mkPool(t, "p", true, false, "10.0.0.0/30", "fc00::/126")}); len(ev) != 0 {
		t.Fatalf("evicted %v", ev)
	}
	runSteps(t, a, []step{
		{name: "v6 added, primary first", req: req, want: asg("p", "fc00::", "10.0.0.0")},
		{name: "stable", req: req, want: asg("p", "fc00::", "10.0.0.0")},
	})
}

func TestSetPools(t *testing.T) {
	a := New()
	a.SetPools([]Pool{mkPool(t, "p", true, true, "10.0.0.0/24"), mkPool(t, "q", true, false, "10.0.1.0/24", "fc00::/120")})
	for i := 0; i < 10; i++ {
		if _, err := a.Allocate(Request{Key: svcKey(fmt.Sprintf("p%d", i)), Candidates: []string{"p"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Two Services share 10.0.1.0.
	for _, n := range []string{"q0", "q1"} {
		if _, err := a.Allocate(Request{Key: svcKey(n), SharingKey: "s", Ports: tcp(int32(len(n) + int(n[1]))), Candidates: []string{"q"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Allocate(Request{Key: svcKey("q6"), Families: []Family{IPv6}, Candidates: []string{"q"}}); err != nil {
		t.Fatal(err)
	}
	keys := func(ns ...string) []Key {
		var out []Key
		for _, n := range ns {
			out = append(out, svcKey(n))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		pools   []Pool
		evicted []Key
		stats   map[string]PoolStats
	}{
		{
			name:  "unchanged",
			pools: []Pool{mkPool(t, "p", true, true, "10.0.0.0/24"), mkPool(t, "q", true, false, "10.0.1.0/24", "fc00::/120")},
			stats: map[string]PoolStats{"p": {AssignedV4: 10, AvailableV4: 244, Services: 10}, "q": {AssignedV4: 1, AvailableV4: 255, AssignedV6: 1, AvailableV6: 255, Services: 3}},
		},
		{
			name:    "shrink p to .1-.5",
			pools:   []Pool{mkPool(t, "p", true, true, "10.0.0.1-10.0.0.5"), mkPool(t, "q", true, false, "10.0.1.0/24", "fc00::/120")},
			evicted: keys("p5", "p6", "p7", "p8", "p9"),
			stats:   map[string]PoolStats{"p": {AssignedV4: 5, AvailableV4: 0, Services: 5}, "q": {AssignedV4: 1, AvailableV4: 255, AssignedV6: 1, AvailableV6: 255, Services: 3}},
		},
		{
			name:    "q avoids buggy addresses now: the sharers of .0 go, the v6 one stays",
			pools:   []Pool{mkPool(t, "p", true, true, "10.0.0.1-10.0.0.5"), mkPool(t, "q", true, true, "10.0.1.0/24", "fc00::/120")},
			evicted: keys("q0", "q1"),
			stats:   map[string]PoolStats{"p": {AssignedV4: 5, Services: 5}, "q": {AvailableV4: 254, AssignedV6: 1, AvailableV6: 255, Services: 1}},
		},
		{
			name:    "renamed pool",
			pools:   []Pool{mkPool(t, "p2", true, true, "10.0.0.1-10.0.0.5"), mkPool(t, "q", true, true, "10.0.1.0/24", "fc00::/120")},
			evicted: keys("p0", "p1", "p2", "p3", "p4"),
			stats:   map[string]PoolStats{"p2": {AvailableV4: 5}, "q": {AvailableV4: 254, AssignedV6: 1, AvailableV6: 255, Services: 1}},
		},
		{
			name:    "removed pool",
			pools:   nil,
			evicted: keys("q6"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := a.SetPools(tc.pools)
			if diff := cmp.Diff(tc.evicted, ev); diff != "" {
				t.Errorf("evicted (-want +got):\n%s", diff)
			}
			for _, k := range ev {
				if _, ok := a.Get(k); ok {
					t.Errorf("%v still assigned", k)
				}
			}
			got := map[string]PoolStats{}
			for _, p := range tc.pools {
				got[p.Name], _ = a.Stats(p.Name)
			}
			if diff := cmp.Diff(tc.stats, got, cmpEmptyMap); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
		})
	}
}

var cmpEmptyMap = cmp.FilterValues(func(x, y map[string]PoolStats) bool { return len(x) == 0 && len(y) == 0 }, cmp.Ignore())

func TestOverlappingPools(t *testing.T) {
	a := New()
	a.SetPools([]Pool{
		mkPool(t, "first", true, false, "10.0.0.0/30"),
		mkPool(t, "second", true, false, "10.0.0.0/29"),
		mkPool(t, "first", true, false, "10.0.9.0/24"), // repeated name: ignored
	})
	runSteps(t, a, []step{
		{name: "overlap belongs to the first pool", req: Request{Key: svcKey("a"), Requested: addrs("10.0.0.1")}, want: asg("first", "10.0.0.1")},
		{name: "second starts after the overlap", req: Request{Key: svcKey("b"), Candidates: []string{"second"}}, want: asg("second", "10.0.0.4")},
		{name: "repeated name ignored", req: Request{Key: svcKey("c"), Requested: addrs("10.0.9.1")}, wantErr: ErrNotInPool},
	})
	if st, _ := a.Stats("second"); st != (PoolStats{AssignedV4: 1, AvailableV4: 3, Services: 1}) {
		t.Errorf("second: %+v", st)
	}
}

func TestStats(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool Pool
		want PoolStats
	}{
		{name: "v4 /24", pool: mkPool(t, "p", true, false, "10.0.0.0/24"), want: PoolStats{AvailableV4: 256}},
		{name: "v4 /24 avoiding buggy", pool: mkPool(t, "p", true, true, "10.0.0.0/24"), want: PoolStats{AvailableV4: 254}},
		{name: "v4 /22 avoiding buggy", pool: mkPool(t, "p", true, true, "10.0.0.0/22"), want: PoolStats{AvailableV4: 1016}},
		{name: "v4 range across .255", pool: mkPool(t, "p", true, true, "10.0.0.250-10.0.1.5"), want: PoolStats{AvailableV4: 10}},
		{name: "v4 /8 and /16", pool: mkPool(t, "p", true, false, "10.0.0.0/8", "192.168.0.0/16"), want: PoolStats{AvailableV4: 1<<24 + 1<<16}},
		{name: "v4 everything avoiding buggy", pool: mkPool(t, "p", true, true, "0.0.0.0/0"), want: PoolStats{AvailableV4: 1<<32 - 1<<25}},
		{name: "v6 /120, buggy does not apply", pool: mkPool(t, "p", true, true, "fc00::/120"), want: PoolStats{AvailableV6: 256}},
		{name: "v6 /66 is exact", pool: mkPool(t, "p", true, false, "fc00::/66"), want: PoolStats{AvailableV6: 1 << 62}},
		{name: "v6 /65 saturates", pool: mkPool(t, "p", true, false, "fc00::/65"), want: PoolStats{AvailableV6: math.MaxInt64}},
		{name: "v6 /64 saturates", pool: mkPool(t, "p", true, false, "fc00::/64"), want: PoolStats{AvailableV6: math.MaxInt64}},
		{name: "v6 everything saturates", pool: mkPool(t, "p", true, false, "::/0"), want: PoolStats{AvailableV6: math.MaxInt64}},
		{name: "dual", pool: mkPool(t, "p", true, false, "10.0.0.0/30", "fc00::/126"), want: PoolStats{AvailableV4: 4, AvailableV6: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			a.SetPools([]Pool{tc.pool})
			got, ok := a.Stats("p")
			if !ok {
				t.Fatal("no stats")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, ok := New().Stats("nope"); ok {
		t.Error("stats for an unknown pool")
	}

	// Assigned counts distinct addresses; saturated counts stay saturated.
	a := New()
	a.SetPools([]Pool{mkPool(t, "p", true, false, "10.0.0.0/30", "fc00::/64")})
	for i, fam := range []Family{IPv4, IPv4, IPv6, IPv6, IPv6} {
		if _, err := a.Allocate(Request{Key: svcKey(fmt.Sprint(i)), Families: []Family{fam}, SharingKey: "s", Ports: tcp(int32(i)), Candidates: []string{"p"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Allocate(Request{Key: svcKey("solo"), Candidates: []string{"p"}}); err != nil {
		t.Fatal(err)
	}
	got, _ := a.Stats("p")
	if diff := cmp.Diff(PoolStats{AssignedV4: 2, AvailableV4: 2, AssignedV6: 1, AvailableV6: math.MaxInt64, Services: 6}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestExistingAssignment(t *testing.T) {
	a := New()
	a.SetPools([]Pool{mkPool(t, "p", true, false, "10.0.0.0/24"), mkPool(t, "q", false, false, "10.0.1.0/24")})
	k := svcKey
	runSteps(t, a, []step{
		{name: "start", req: Request{Key: k("a"), Candidates: []string{"p"}}, want: asg("p", "10.0.0.0")},
		{name: "kept when candidates change", req: Request{Key: k("a"), Candidates: []string{"zz"}}, want: asg("p", "10.0.0.0")},
		{name: "kept when ports change", req: Request{Key: k("a"), Ports: tcp(1, 2, 3)}, want: asg("p", "10.0.0.0")},
		{name: "moves on pool annotation", req: Request{Key: k("a"), Pool: "q"}, want: asg("q", "10.0.1.0")},
		{name: "stays with annotation removed", req: Request{Key: k("a"), Candidates: []string{"p"}}, want: asg("q", "10.0.1.0")},
		{name: "moves when its pool is excluded", req: Request{Key: k("a"), Candidates: []string{"p"}, Excluded: []string{"q"}}, want: asg("p", "10.0.0.0")},
		{name: "failure keeps the old assignment", req: Request{Key: k("a"), Pool: "zz"}, wantErr: ErrUnknownPool},
		{name: "moves to requested", req: Request{Key: k("a"), Requested: addrs("10.0.0.9")}, want: asg("p", "10.0.0.9")},
		{name: "b takes .0", req: Request{Key: k("b"), Candidates: []string{"p"}}, want: asg("p", "10.0.0.0")},
		{name: "failed move keeps old", req: Request{Key: k("a"), Requested: addrs("10.0.0.0")}, wantErr: ErrInUse},
		{name: "failed family change keeps old", req: Request{Key: k("a"), Families: []Family{IPv6}, Candidates: []string{"p"}}, wantErr: ErrNoFamily},
	})
	if got, _ := a.Get(k("a")); !cmp.Equal(got, asg("p", "10.0.0.9"), addrCmp) {
		t.Errorf("a holds %v", got)
	}
}
