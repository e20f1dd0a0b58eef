package liveness

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	otherKey = []byte("ZYXWVUTSRQPONMLKJIHGFEDCBA987654")
	addrA    = netip.MustParseAddr("10.0.0.1")
	addrB    = netip.MustParseAddr("10.0.0.2")
	addrC6   = netip.MustParseAddr("fc00:f853:ccd:e793::5")
)

func testPeers() []Peer {
	return []Peer{{Node: "a", Addr: netip.AddrPortFrom(addrA, 7947)}, {Node: "b", Addr: netip.AddrPortFrom(addrB, 7947)}}
}

func signer(boot uint64, key []byte) *Signer {
	s := NewSigner(boot)
	s.SetKey(key)
	return s
}

// sign returns a copy of a signed packet (Sign's buffer is reused).
func sign(s *Signer, hb Heartbeat, at time.Time) []byte { return slices.Clone(s.Sign(hb, at)) }

// TestVerifier: the Verifier's decisions, one row per rule, in order on one Verifier (each row sees
// what the rows before it were accepted). Node a sends from 10.0.0.1, b from 10.0.0.2, with the key.
func TestVerifier(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	v := NewVerifier(2 * time.Second)
	v.SetKeys(testKey, nil)
	v.SetPeers(testPeers())
	a1 := signer(100, testKey) // a's first run
	a2 := signer(200, testKey) // a after a restart
	b := signer(300, testKey)
	forger := signer(100, otherKey) // same boot as a, wrong key
	c6 := signer(900, testKey)      // an IPv6-only node
	c6first := sign(c6, Heartbeat{Node: "c"}, ms(900))
	hbA := Heartbeat{Node: "a", Ready: true, Interfaces: []string{"eth0"}}

	first := sign(a1, hbA, ms(0))   // seq 1
	second := sign(a1, hbA, ms(50)) // seq 2
	held := sign(a1, hbA, ms(100))  // seq 3, held back by an attacker, never delivered in time
	last := sign(a1, hbA, ms(150))  // seq 4
	tampered := slices.Clone(last)
	tampered[offFlags] |= 2 // flip "leaving" on
	var garbage [80]byte

	for _, row := range []struct {
		name  string
		setup func()
		pkt   []byte
		from  netip.Addr
		at    time.Time
		want  Reason
	}{
		{name: "genuine", pkt: first, from: addrA, at: ms(1), want: Accepted},
		{name: "the same packet again", pkt: first, from: addrA, at: ms(2), want: Replay},
		{name: "the next one", pkt: second, from: addrA, at: ms(51), want: Accepted},
		{name: "an older one replayed", pkt: first, from: addrA, at: ms(60), want: Replay},
		{name: "a later one (seq 4; seq 3 lost)", pkt: last, from: addrA, at: ms(151), want: Accepted},
		{name: "a held-back one released late", pkt: held, from: addrA, at: ms(160), want: Replay},
		{name: "tampered (leaving set)", pkt: tampered, from: addrA, at: ms(160), want: BadMAC},
		{name: "signed with another key", pkt: sign(forger, hbA, ms(170)), from: addrA, at: ms(170), want: BadMAC},
		{name: "from another address", pkt: sign(a1, hbA, ms(180)), from: netip.MustParseAddr("10.0.0.99"), at: ms(180), want: WrongSource},
		{name: "from b's address", pkt: sign(a1, hbA, ms(185)), from: addrB, at: ms(185), want: WrongSource},
		{name: "an unknown node", pkt: sign(b, Heartbeat{Node: "c"}, ms(190)), from: addrB, at: ms(190), want: UnknownNode},
		{name: "garbage", pkt: garbage[:], from: addrA, at: ms(190), want: Malformed},
		{name: "truncated", pkt: last[:len(last)-1], from: addrA, at: ms(190), want: Malformed},
		{name: "no tag", pkt: last[:len(last)-TagLen], from: addrA, at: ms(190), want: Malformed},
		{name: "too old (clock 3 s behind)", pkt: sign(a1, hbA, ms(200-3000)), from: addrA, at: ms(200), want: Stale},
		{name: "too new (clock 3 s ahead)", pkt: sign(a1, hbA, ms(210+3000)), from: addrA, at: ms(210), want: Stale},
		{name: "skew within the window", pkt: sign(a1, hbA, ms(220-1500)), from: addrA, at: ms(220), want: Accepted},
		{name: "a restarts: believed at once", pkt: sign(a2, hbA, ms(300)), from: addrA, at: ms(301), want: Accepted},
		{name: "its previous run replayed", pkt: sign(a1, hbA, ms(250)), from: addrA, at: ms(310), want: Replay},
		{name: "its previous run's last packet replayed", pkt: last, from: addrA, at: ms(320), want: Replay},
		{name: "b, independently", pkt: sign(b, Heartbeat{Node: "b"}, ms(330)), from: addrB, at: ms(330), want: Accepted},
		{name: "rotation: primary new, secondary old; old-key packet", setup: func() { v.SetKeys(otherKey, testKey) },
			pkt: sign(a2, hbA, ms(400)), from: addrA, at: ms(400), want: Accepted},
		{name: "rotation: new-key packet", pkt: sign(signer(400, otherKey), hbA, ms(410)), from: addrA, at: ms(410), want: Accepted},
		{name: "rotation done: old key dropped", setup: func() { v.SetKeys(otherKey, nil) },
			pkt: sign(a2, hbA, ms(420)), from: addrA, at: ms(420), want: BadMAC},
		{name: "no key", setup: func() { v.SetKeys(nil, nil) }, pkt: sign(signer(500, otherKey), hbA, ms(500)), from: addrA, at: ms(500), want: NoKey},
		{name: "a short key is no key", setup: func() { v.SetKeys(testKey[:16], nil) },
			pkt: sign(a2, hbA, ms(501)), from: addrA, at: ms(501), want: NoKey},
		{name: "a's address changes: its replay state is kept", setup: func() {
			v.SetKeys(testKey, nil)
			v.SetPeers([]Peer{{Node: "a", Addr: netip.MustParseAddrPort("10.0.0.5:7947")}, testPeers()[1]})
		}, pkt: second, from: netip.MustParseAddr("10.0.0.5"), at: ms(600), want: Replay},
		{name: "a's Node is deleted", setup: func() { v.SetPeers(testPeers()[1:]) },
			pkt: sign(a2, hbA, ms(700)), from: addrA, at: ms(700), want: UnknownNode},
		{name: "an IPv4-mapped source is the same address", setup: func() { v.SetPeers(testPeers()) },
			pkt: sign(b, Heartbeat{Node: "b"}, ms(800)), from: netip.AddrFrom16(addrB.As16()), at: ms(800), want: Accepted},
		// An IPv6-only node: its heartbeats come over UDP/IPv6 from its IPv6 InternalIP.
		{name: "IPv6 node: from its InternalIP", setup: func() {
			v.SetPeers(append(testPeers(), Peer{Node: "c", Addr: netip.AddrPortFrom(addrC6, 7947)}))
		}, pkt: c6first, from: addrC6, at: ms(900), want: Accepted},
		{name: "IPv6 node: the same packet again", pkt: c6first, from: addrC6, at: ms(901), want: Replay},
		{name: "IPv6 node: from another address of its subnet", pkt: sign(c6, Heartbeat{Node: "c"}, ms(910)),
			from: netip.MustParseAddr("fc00:f853:ccd:e793::99"), at: ms(910), want: WrongSource},
		{name: "IPv6 node: from its link-local address", pkt: sign(c6, Heartbeat{Node: "c"}, ms(920)),
			from: netip.MustParseAddr("fe80::42:acff:fe12:5"), at: ms(920), want: WrongSource},
		{name: "IPv6 node: claiming an IPv4 node from its own address", pkt: sign(c6, Heartbeat{Node: "b"}, ms(930)),
			from: addrC6, at: ms(930), want: WrongSource},
		{name: "IPv6 node: forged with another key from its address", pkt: sign(signer(901, otherKey), Heartbeat{Node: "c"}, ms(940)),
			from: addrC6, at: ms(940), want: BadMAC},
	} {
		if row.setup != nil {
			row.setup()
		}
		hb, got := v.Verify(row.pkt, row.from, row.at)
		if got != row.want {
			t.Errorf("%s: %v, want %v", row.name, got, row.want)
		}
		if got != Accepted && hb.Node != "" {
			t.Errorf("%s: a rejected packet returned a heartbeat %+v", row.name, hb)
		}
	}
}

// A restarted receiver remembers nothing: a captured packet is still rejected once it is older than
// the window.
func TestVerifierFreshReceiver(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	s := signer(1, testKey)
	captured := sign(s, Heartbeat{Node: "a"}, t0)
	v := NewVerifier(time.Second)
	v.SetKeys(testKey, nil)
	v.SetPeers(testPeers())
	if _, r := v.Verify(captured, addrA, t0.Add(1001*time.Millisecond)); r != Stale {
		t.Fatalf("a packet older than the window: %v, want stale", r)
	}
	hb, r := v.Verify(sign(s, Heartbeat{Node: "a", Ready: true, Interfaces: []string{"eth0"}, ReadyFor: time.Second}, t0.Add(time.Second)), addrA, t0.Add(time.Second))
	if r != Accepted {
		t.Fatalf("genuine: %v", r)
	}
	want := Heartbeat{Node: "a", Boot: 1, Seq: 2, Time: t0.Add(time.Second), Ready: true, Interfaces: []string{"eth0"}, ReadyFor: time.Second}
	if diff := cmp.Diff(want, hb, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("heartbeat (-want +got):\n%s", diff)
	}
}

// FuzzVerifierStream feeds a Verifier and a Detector, as the Monitor wires them, a hostile stream:
// arbitrary packets from arbitrary addresses, replays of captured genuine packets (from the right
// address or not), tampered ones, and restarts, interleaved with genuine heartbeats of three known
// nodes. Properties: no unknown name enters the table; the table never holds more nodes than are
// known; a node's state changes only with its own genuinely signed, fresh packets (each accepted at
// most once), and every genuine packet delivered in order and on time is accepted, a restarted
// node's first one included; what is accepted survives Marshal and Parse.
func FuzzVerifierStream(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 1, 0x10, 0x21, 9, 0xff, 0x80, 3})
	f.Add(append([]byte{1, 40}, Heartbeat{Node: "a", Seq: 3, Ready: true}.Marshal()...))
	f.Add([]byte{0x00, 0x04, 0x02, 0x12, 0x03, 0x00, 0x05, 0x06, 0x22})
	f.Fuzz(func(t *testing.T, script []byte) {
		names := []string{"a", "b", "c"}
		addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
		strangers := []netip.Addr{netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("192.0.2.1"), netip.IPv6Loopback()}
		var peers []Peer
		for i, n := range names {
			peers = append(peers, Peer{Node: n, Addr: netip.AddrPortFrom(addrs[i], 7947)})
		}
		const window = time.Second
		v := NewVerifier(window)
		v.SetKeys(testKey, nil)
		v.SetPeers(peers)
		det := NewDetector(50*time.Millisecond, 6)
		now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
		boots := []uint64{1, 2, 3}
		signers := []*Signer{signer(1, testKey), signer(2, testKey), signer(3, testKey)}
		nextBoot := uint64(10)
		var captured [][]byte         // every genuine packet ever signed
		accepted := map[string]bool{} // genuine packets accepted (at most once each)
		genuine := map[string]int{}   // genuine packet -> sender index
		lastAccepted := make([]Heartbeat, len(names))
		deliver := func(pkt []byte, from netip.Addr, mustAccept bool) {
			hb, why := v.Verify(pkt, from, now)
			if why != Accepted {
				if mustAccept {
					t.Fatalf("a genuine, fresh, in-order packet was rejected: %v", why)
				}
				return
			}
			i, ok := genuine[string(pkt)]
			switch {
			case !ok:
				t.Fatalf("accepted a packet no genuine node signed: %q from %v", pkt, from)
			case accepted[string(pkt)]:
				t.Fatalf("accepted the same genuine packet twice (replay) from %v", from)
			case names[i] != hb.Node || from.Unmap() != addrs[i]:
				t.Fatalf("accepted %s's packet as %s from %v", names[i], hb.Node, from)
			}
			accepted[string(pkt)] = true
			again, err := Parse(pkt[:len(pkt)-TagLen])
			if err != nil || !bytes.Equal(again.Marshal(), hb.Marshal()) {
				t.Fatalf("accepted heartbeat does not round-trip: %v", err)
			}
			det.Heard(hb, now)
			lastAccepted[i] = hb
		}
		for len(script) > 0 {
			op, arg := script[0]%8, script[0]>>3
			script = script[1:]
			node := int(arg) % len(names)
			switch op {
			case 0: // a genuine heartbeat, delivered at once from the right address: always accepted
				hb := Heartbeat{Node: names[node], Ready: arg&4 != 0, Leaving: arg&8 != 0, Interfaces: []string{"eth0"}}
				pkt := sign(signers[node], hb, now)
				captured = append(captured, pkt)
				genuine[string(pkt)] = node
				deliver(pkt, addrs[node], true)
			case 1: // arbitrary bytes from an arbitrary address
				n := 0
				if len(script) > 0 {
					n = min(int(script[0]), len(script)-1)
					script = script[1:]
				}
				pkt := slices.Clone(script[:n])
				script = script[n:]
				from := strangers[int(arg)%len(strangers)]
				if arg&16 != 0 {
					from = addrs[node]
				}
				deliver(pkt, from, false)
			case 2, 3: // replay a captured genuine packet, from its sender's address or another
				if len(captured) == 0 {
					continue
				}
				pkt := captured[int(arg)%len(captured)]
				from := addrs[genuine[string(pkt)]]
				if op == 3 {
					from = addrs[(genuine[string(pkt)]+1)%len(addrs)]
				}
				deliver(pkt, from, false)
			case 4: // tamper with a captured packet (one bit) and send it from the sender's address
				if len(captured) == 0 || len(script) == 0 {
					continue
				}
				pkt := slices.Clone(captured[int(arg)%len(captured)])
				pos := int(script[0]) % len(pkt)
				pkt[pos] ^= 1 << (arg % 8)
				script = script[1:]
				deliver(pkt, addrs[genuine[string(captured[int(arg)%len(captured)])]], false)
			case 5: // a node restarts (which takes a moment): a new boot nonce, sequence from 1
				now = now.Add(time.Millisecond)
				nextBoot++
				boots[node] = nextBoot
				signers[node] = signer(nextBoot, testKey)
			case 6: // time passes, up to 3.1 s
				now = now.Add(time.Duration(arg) * 100 * time.Millisecond)
			case 7: // a genuine packet signed now, held, and delivered after some time
				pkt := sign(signers[node], Heartbeat{Node: names[node]}, now)
				captured = append(captured, pkt)
				genuine[string(pkt)] = node
			}
			// The tables hold known nodes only, never more than are known.
			if len(det.peers) > len(names) || len(v.peers) > len(names) {
				t.Fatalf("tables grew past the known nodes: detector %d, verifier %d", len(det.peers), len(v.peers))
			}
			for name := range det.peers {
				if !slices.Contains(names, name) {
					t.Fatalf("unknown node %q entered the detector", name)
				}
			}
			// Each node's state is its last genuine accepted heartbeat.
			for i, n := range names {
				got, ok := det.Info(n)
				if ok != (lastAccepted[i].Node != "") || ok && (got.Seq != lastAccepted[i].Seq || got.Boot != lastAccepted[i].Boot ||
					got.Leaving != lastAccepted[i].Leaving || got.Ready != lastAccepted[i].Ready) {
					t.Fatalf("%s's state %+v is not its last genuine heartbeat %+v", n, got, lastAccepted[i])
				}
			}
		}
	})
}

// BenchmarkSign: what a speaker spends to seal one heartbeat (once per peer per interval: the
// packet is signed once and sent to every peer, so per interval it is one Sign).
func BenchmarkSign(b *testing.B) {
	s := signer(1, testKey)
	hb := Heartbeat{Node: "worker-042.example.internal", Ready: true, Interfaces: []string{"eth0"}, ReadyFor: time.Hour}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		s.Sign(hb, now)
	}
}

// BenchmarkVerify: what a speaker spends to check one heartbeat received (one per peer per
// interval).
func BenchmarkVerify(b *testing.B) {
	s := signer(1, testKey)
	hb := Heartbeat{Node: "worker-042.example.internal", Ready: true, Interfaces: []string{"eth0"}, ReadyFor: time.Hour}
	v := NewVerifier(time.Second)
	v.SetKeys(testKey, nil)
	v.SetPeers([]Peer{{Node: hb.Node, Addr: netip.AddrPortFrom(addrA, 7947)}})
	now := time.Now()
	// Packets with fresh sequence numbers, so each is accepted as in steady state; after the last,
	// the verifier forgets the node (amortised over the batch) and the batch starts again.
	pkts := make([][]byte, 4096)
	for i := range pkts {
		pkts[i] = sign(s, hb, now)
	}
	peers := []Peer{{Node: hb.Node, Addr: netip.AddrPortFrom(addrA, 7947)}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(pkts) {
			i = 0
			v.SetPeers(nil)
			v.SetPeers(peers)
		}
		if _, r := v.Verify(pkts[i], addrA, now); r != Accepted {
			b.Fatal(r)
		}
		i++
	}
}
