package speaker

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
)

// TestOwnerSecondaryInterface: an address whose advertisement names eth1 is answered on eth1 only,
// the ServiceL2Status lists eth1, the heartbeats carry both interfaces; eth1's socket failing
// takes eth1 out of the node's interfaces (the address is withdrawn: no node has eth1 now) until
// it is reopened; an advertisement naming no interface answers on both.
func TestOwnerSecondaryInterface(t *testing.T) {
	e := newOwnerEnv(t, true, Config{})
	eth1, reopen := newFakeResponder(), &fakeReopener{ifi: &net.Interface{Index: 3, Name: "eth1"}}
	e.s.sec = []secondaryLink{{Name: "eth1", ARP: eth1, Reopen: []reopener{reopen}}}
	setAd := func(ifs ...string) {
		if err := e.objs.l2ads.Update(toUnstructured(t, "L2Advertisement", &v1beta1.L2Advertisement{
			ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: testNS}, Spec: v1beta1.L2AdvertisementSpec{Interfaces: ifs}})); err != nil {
			t.Fatal(err)
		}
		e.s.dirty.Store(true)
	}
	statusIfs := func() []string {
		st, ok := e.status.want["default/web"]
		if !ok {
			return nil
		}
		var out []string
		for _, i := range st["interfaces"].([]any) {
			out = append(out, i.(map[string]any)["name"].(string))
		}
		return out
	}
	e.peerUp()
	e.s.eligible[e.peer] = e.clock.Now()
	setAd("eth1")
	e.s.reconcile(context.Background())
	if !eth1.announced[vip] || e.arp.announced[vip] {
		t.Fatalf("announced on eth0 %v, eth1 %v; want eth1 only", e.arp.announced[vip], eth1.announced[vip])
	}
	if n := eth1.take("gratuitous"); n != 1 {
		t.Errorf("%d gratuitous announcements on eth1, want 1", n)
	}
	if diff := cmp.Diff([]string{"eth1"}, statusIfs()); diff != "" {
		t.Errorf("ServiceL2Status interfaces (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"eth0", "eth1"}, e.s.heartbeat().Interfaces); diff != "" {
		t.Errorf("heartbeat interfaces (-want +got):\n%s", diff)
	}

	// eth1's socket fails: eth1 is not an announcing interface any more; the peer lacks it too.
	e.s.onSecondaryError("eth1")(errors.New("reading ARP on eth1: network is down"))
	reopen.err = errors.New("link not up")
	e.s.reconcile(context.Background())
	if eth1.announced[vip] || len(e.s.announced) != 0 {
		t.Errorf("still announced after eth1 failed: %v", e.s.announced)
	}
	if diff := cmp.Diff([]string{"eth0"}, e.s.heartbeat().Interfaces); diff != "" {
		t.Errorf("heartbeat interfaces (-want +got):\n%s", diff)
	}
	if e.s.dp.Up() != true {
		t.Error("a secondary's failure took the node's data plane down")
	}
	if e.s.wake.IsZero() || e.s.wake.After(e.clock.Now().Add(secondaryRetry)) {
		t.Errorf("wake %v, want a reopen within %v", e.s.wake, secondaryRetry)
	}
	// Reopened a second later: announced there again.
	reopen.err = nil
	e.clock.Advance(secondaryRetry)
	e.s.reconcile(context.Background())
	if reopen.calls != 2 || !eth1.announced[vip] {
		t.Errorf("reopen calls %d, announced on eth1 %v; want 2 and announced", reopen.calls, eth1.announced[vip])
	}

	// An advertisement naming no interface: every interface.
	setAd()
	e.s.reconcile(context.Background())
	if !eth1.announced[vip] || !e.arp.announced[vip] {
		t.Errorf("announced on eth0 %v, eth1 %v; want both", e.arp.announced[vip], eth1.announced[vip])
	}
	if diff := cmp.Diff([]string{"eth0", "eth1"}, statusIfs()); diff != "" {
		t.Errorf("ServiceL2Status interfaces (-want +got):\n%s", diff)
	}
	// Back to eth1: withdrawn from eth0 only.
	setAd("eth1")
	e.s.reconcile(context.Background())
	if !eth1.announced[vip] || e.arp.announced[vip] {
		t.Errorf("announced on eth0 %v, eth1 %v; want eth1 only", e.arp.announced[vip], eth1.announced[vip])
	}
}

// TestOwnerSecondaryClaim: on another interface than the InternalIP's the peers' MACs are unknown,
// so a claim seen there of an address this node lingers on (make-before-break) is the winner's and
// ends the handover; the same unknown MAC on the InternalIP's interface is an unknown host.
func TestOwnerSecondaryClaim(t *testing.T) {
	for _, secondary := range []bool{true, false} {
		e := newOwnerEnv(t, true, Config{})
		e.s.sec = []secondaryLink{{Name: "eth1", ARP: newFakeResponder()}}
		e.peerUp()
		e.s.eligible[e.peer] = e.clock.Now()
		e.s.reconcile(context.Background())
		if _, ok := e.s.announced[vip]; !ok {
			t.Fatal("not announced")
		}
		e.events()
		e.s.handover.keep(vip, true, e.clock.Now())
		e.s.resolve(conflict{vip, net.HardwareAddr{0x02, 0x42, 0xac, 0x13, 0, 9}, secondary})
		_, still := e.s.announced[vip]
		if still == secondary {
			t.Errorf("secondary %v: still announced %v", secondary, still)
		}
		if ev := e.events(); (len(ev) > 0) == secondary {
			t.Errorf("secondary %v: events %v", secondary, ev)
		}
	}
}
