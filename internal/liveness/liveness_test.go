package liveness

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDetector(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := NewDetector(10*time.Millisecond, 5)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if !d.Heard(Heartbeat{Node: "a"}, ms(0)) {
		t.Fatal("first heartbeat should make a alive")
	}
	if d.Heard(Heartbeat{Node: "a"}, ms(10)) {
		t.Fatal("second heartbeat is not a change")
	}
	if alive, since := d.Alive("a"); !alive || !since.Equal(ms(0)) {
		t.Fatalf("a alive=%v since %v", alive, since)
	}
	if died := d.Check(ms(60)); len(died) != 0 { // 50 ms after the last one: exactly the timeout, still alive
		t.Fatalf("declared dead at the timeout: %v", died)
	}
	d.Heard(Heartbeat{Node: "b"}, ms(55))
	if diff := cmp.Diff([]string{"a"}, d.Check(ms(61))); diff != "" {
		t.Fatalf("dead after 51 ms of silence (-want +got):\n%s", diff)
	}
	if died := d.Check(ms(62)); len(died) != 0 {
		t.Fatalf("a dead peer is reported once: %v", died)
	}
	if alive, _ := d.Alive("a"); alive {
		t.Fatal("a should be dead")
	}
	if !d.Heard(Heartbeat{Node: "a"}, ms(200)) {
		t.Fatal("a coming back is a change")
	}
	if _, since := d.Alive("a"); !since.Equal(ms(200)) {
		t.Fatalf("aliveSince should restart at the return, got %v", since)
	}
	// A lost packet or two (1% loss) must not kill a peer: 4 missed intervals are fine.
	for i := 200; i <= 400; i += 10 {
		if i%50 != 0 { // drop 4 of every 5
			continue
		}
		d.Heard(Heartbeat{Node: "a"}, ms(i))
		if died := d.Check(ms(i + 9)); len(died) != 0 && died[0] == "a" {
			t.Fatalf("declared dead while heartbeats still arrive every 50 ms: %v", died)
		}
	}
	d.Forget("a")
	if alive, _ := d.Alive("a"); alive {
		t.Fatal("forgotten peer still alive")
	}
}

// testKey is a heartbeat key for tests.
var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestWireRoundTrip(t *testing.T) {
	for _, hb := range []Heartbeat{
		{Node: "myk8s-worker", Boot: 7, Seq: 1, Time: time.Unix(1000, 5), Ready: true, Interfaces: []string{"eth0", "eth1"}, ReadyFor: time.Minute},
		{Node: "n", Seq: 1 << 60, Leaving: true},
	} {
		got, err := Parse(hb.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(hb, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
	ok := Heartbeat{Node: "n"}.Marshal()
	for _, bad := range [][]byte{nil, []byte("ILB2"), []byte("ILB1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		append([]byte("ILB2\x00"), make([]byte, 8)...), ok[:len(ok)-1], append(slices.Clone(ok), 0),
		Heartbeat{}.Marshal()} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted a malformed packet", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Heartbeat{Node: "a", Seq: 3, Ready: true, Interfaces: []string{"eth0"}}.Marshal())
	f.Add([]byte("ILB2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hb, err := Parse(b)
		if err != nil {
			return
		}
		if hb.Node == "" {
			t.Fatal("accepted an empty node name")
		}
		again, err := Parse(hb.Marshal())
		if err != nil || !bytes.Equal(again.Marshal(), hb.Marshal()) {
			t.Fatalf("re-marshal differs: %v", err)
		}
	})
}
