package layer2

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
)

// TestManaged: a Managed responder reports its socket's failure and has no responder until Reopen;
// Reopen gives it a fresh one (announcing nothing, with the answer function kept), which Run runs and
// answers with; a second Reopen replaces and closes the first; ctx's end stops Run.
func TestManaged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu       sync.Mutex
			fails    []error
			conns    []*FakeConn
			netDowns int
		)
		dial := func() (*Responder, error) {
			c := NewFakeConn()
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			return NewARP(testIfi, c, Config{OnNetDown: func(error) { mu.Lock(); netDowns++; mu.Unlock() }})
		}
		first, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewManaged(first, dial, func(err error) { mu.Lock(); fails = append(fails, err); mu.Unlock() })
		if err != nil {
			t.Fatal(err)
		}
		answers := 0
		m.SetAnswerFunc(func(ip, clientIP netip.Addr, clientMAC net.HardwareAddr) (net.HardwareAddr, bool) {
			answers++
			return ownMAC, true
		})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- m.Run(ctx) }()
		synctest.Wait()
		if err := m.Announce(vip4); err != nil {
			t.Fatal(err)
		}

		// The socket fails.
		boom := errors.New("boom")
		conns[0].InjectError(boom)
		synctest.Wait()
		if len(fails) != 1 || !errors.Is(fails[0], boom) {
			t.Fatalf("failures reported %v, want boom", fails)
		}
		if err := m.Announce(vip4); !errors.Is(err, ErrNoResponder) {
			t.Errorf("Announce without a responder = %v, want ErrNoResponder", err)
		}
		if err := m.Gratuitous(vip4); !errors.Is(err, ErrNoResponder) {
			t.Errorf("Gratuitous without a responder = %v, want ErrNoResponder", err)
		}
		if err := m.Withdraw(vip4); err != nil {
			t.Errorf("Withdraw without a responder = %v, want nil", err)
		}
		if _, err := conns[0].WriteTo(nil, nil); !errors.Is(err, net.ErrClosed) {
			t.Errorf("the failed responder's conn is not closed: %v", err)
		}

		// Reopened: announces nothing until told, then answers, with the answer function kept.
		if ifi, err := m.Reopen(); err != nil || ifi != testIfi {
			t.Fatalf("Reopen = %v, %v", ifi, err)
		}
		synctest.Wait()
		if got := m.Interface(); got != testIfi {
			t.Errorf("Interface() = %v", got)
		}
		conns[1].Inject(mustMarshal(t, arpRequest(broadcastMAC, vip4)))
		synctest.Wait()
		if n := len(conns[1].Sent()); n != 0 {
			t.Errorf("a reopened responder answered %d frames for an address not announced on it", n)
		}
		if err := m.Announce(vip4); err != nil {
			t.Fatal(err)
		}
		conns[1].Inject(mustMarshal(t, arpRequest(broadcastMAC, vip4)))
		synctest.Wait()
		if n := len(conns[1].Sent()); n != 1 || answers != 1 {
			t.Errorf("%d frames sent, answer function asked %d times; want 1 and 1", n, answers)
		}

		// Reopened while healthy: the old one is stopped and closed.
		if _, err := m.Reopen(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, err := conns[1].WriteTo(nil, nil); !errors.Is(err, net.ErrClosed) {
			t.Errorf("the replaced responder's conn is not closed: %v", err)
		}
		if len(fails) != 1 {
			t.Errorf("a replacement was reported as a failure: %v", fails)
		}
		// ENETDOWN is not a failure of Run, which keeps reading, but it is reported (OnNetDown).
		conns[2].InjectError(syscall.ENETDOWN)
		synctest.Wait()
		if len(fails) != 1 || netDowns != 1 {
			t.Errorf("after ENETDOWN: failures %v, OnNetDown calls %d; want no failure and 1 call", fails, netDowns)
		}

		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v after cancel", err)
		}
		if err := m.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
}

// TestManagedReopenError: a failing dial leaves the current responder in place.
func TestManagedReopenError(t *testing.T) {
	first, err := NewARP(testIfi, NewFakeConn(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("down")
	m, err := NewManaged(first, func() (*Responder, error) { return nil, down }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reopen(); !errors.Is(err, down) {
		t.Errorf("Reopen = %v, want the dial's error", err)
	}
	if err := m.Announce(vip4); err != nil {
		t.Errorf("the current responder was lost: %v", err)
	}
}
