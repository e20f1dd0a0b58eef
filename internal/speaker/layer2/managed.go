package layer2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
)

var (
	// ErrNoResponder is returned by a Managed responder's Announce, Gratuitous and GratuitousTo while
	// it has no socket: the last one failed and Reopen has not succeeded since.
	ErrNoResponder = errors.New("no responder: its socket failed and was not reopened")
	// ErrLinkDown is returned by LookupUp for an interface that exists but is administratively down.
	ErrLinkDown = errors.New("link not up")
)

// LookupUp returns the interface named name if it is administratively up, an error wrapping
// ErrLinkDown if it is not, or the lookup's error if no interface has the name. The carrier is not
// asked: the kernel reports it (IFF_RUNNING) up to a second after the link notification that says it
// is back, and the link's watcher (WatchLink) judges it. It looks in the network namespace of the
// calling thread.
func LookupUp(name string) (*net.Interface, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("%s (flags %v): %w", name, ifi.Flags, ErrLinkDown)
	}
	return ifi, nil
}

// Managed is a Responder that can be replaced by a fresh one. Announce, Withdraw, Gratuitous and
// GratuitousTo go to the current Responder; Reopen opens a new one (with the dial function given) and
// makes it current, closing the old one; Run runs the current one, each in turn. A packet socket
// outlives its interface without a word (after ENETDOWN it never receives again), and the interface
// created again has another index: only a new socket serves it.
//
// When the current Responder's Run fails, Managed closes it, reports the error to onFail and has no
// Responder until Reopen succeeds. A new Responder announces nothing: the caller announces its
// addresses again. Managed decides nothing; when to reopen is the caller's choice. All methods are
// safe for concurrent use.
type Managed struct {
	fam    family
	dial   func() (*Responder, error)
	onFail func(error)
	next   chan *Responder // the Responder Reopen made current, for Run; capacity 1

	mu     sync.Mutex // guards the following fields
	cur    *Responder // nil after a failure
	answer AnswerFunc
}

// NewManaged returns a Managed responder whose current Responder is r (not running yet). dial opens a
// new Responder of the same family for Reopen (DialARP or DialNDP after LookupUp); onFail, if set, is
// called from Run's goroutine when a Responder's Run fails, with its error. It starts nothing.
func NewManaged(r *Responder, dial func() (*Responder, error), onFail func(error)) (*Managed, error) {
	if r == nil || dial == nil {
		return nil, errors.New("new managed responder: nil responder or dial")
	}
	if onFail == nil {
		onFail = func(error) {}
	}
	return &Managed{fam: r.fam, dial: dial, onFail: onFail, next: make(chan *Responder, 1), cur: r}, nil
}

// Reopen opens a new Responder with the dial function, sets the answer function on it, makes it
// current and hands it to Run, which stops and closes the previous one. It returns the new
// Responder's interface, or dial's error (the current Responder, if any, stays).
func (m *Managed) Reopen() (*net.Interface, error) {
	r, err := m.dial()
	if err != nil {
		return nil, fmt.Errorf("reopening %s responder: %w", m.fam, err)
	}
	if r.fam != m.fam {
		_ = r.Close()
		return nil, fmt.Errorf("reopening %s responder: dial returned a %s responder", m.fam, r.fam)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r.SetAnswerFunc(m.answer)
	m.cur = r
	select { // a Responder Run never picked up is replaced, and closed
	case old := <-m.next:
		_ = old.Close()
	default:
	}
	m.next <- r
	return r.Interface(), nil
}

// Run runs the current Responder, and each one Reopen makes current after it, until ctx ends; then it
// returns nil, leaving the current Responder open (Close closes it).
func (m *Managed) Run(ctx context.Context) error {
	m.mu.Lock()
	cur := m.cur
	m.mu.Unlock()
	for {
		if cur == nil {
			select {
			case <-ctx.Done():
				return nil
			case cur = <-m.next:
			}
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func(r *Responder) { done <- r.Run(rctx) }(cur)
		select {
		case err := <-done:
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			m.failed(cur, err)
			cur = nil
		case next := <-m.next:
			cancel()
			<-done
			if next != cur {
				_ = cur.Close()
			}
			cur = next
		case <-ctx.Done():
			cancel()
			<-done
			return nil
		}
	}
}

// failed closes r after its Run failed with err, forgets it if it is current, and reports err.
func (m *Managed) failed(r *Responder, err error) {
	m.mu.Lock()
	if m.cur == r {
		m.cur = nil
	}
	m.mu.Unlock()
	_ = r.Close()
	if err == nil {
		err = fmt.Errorf("%s responder on %s stopped", r.fam, r.ifi.Name)
	}
	m.onFail(err)
}

// Close closes the current Responder, and one Reopen made that Run did not pick up.
func (m *Managed) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var err error
	select {
	case r := <-m.next:
		if r != m.cur {
			err = r.Close()
		}
	default:
	}
	if m.cur != nil {
		err = errors.Join(err, m.cur.Close())
		m.cur = nil
	}
	return err
}

func (m *Managed) current() (*Responder, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return nil, fmt.Errorf("%s: %w", m.fam, ErrNoResponder)
	}
	return m.cur, nil
}

// Interface returns the current Responder's interface, nil without one.
func (m *Managed) Interface() *net.Interface {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return nil
	}
	return m.cur.Interface()
}

// SetAnswerFunc sets the answer function of the current Responder and of those Reopen makes.
func (m *Managed) SetAnswerFunc(f AnswerFunc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.answer = f
	if m.cur != nil {
		m.cur.SetAnswerFunc(f)
	}
}

// Announce is the current Responder's Announce, or an error wrapping ErrNoResponder.
func (m *Managed) Announce(ip netip.Addr) error {
	r, err := m.current()
	if err != nil {
		return fmt.Errorf("announcing %v: %w", ip, err)
	}
	return r.Announce(ip)
}

// Withdraw is the current Responder's Withdraw; without one it does nothing (nothing is announced).
func (m *Managed) Withdraw(ip netip.Addr) error {
	r, err := m.current()
	if err != nil {
		return nil
	}
	return r.Withdraw(ip)
}

// Gratuitous is the current Responder's Gratuitous, or an error wrapping ErrNoResponder.
func (m *Managed) Gratuitous(ip netip.Addr) error {
	r, err := m.current()
	if err != nil {
		return fmt.Errorf("gratuitous for %v: %w", ip, err)
	}
	return r.Gratuitous(ip)
}

// Notify is the current Responder's Notify, or an error wrapping ErrNoResponder.
func (m *Managed) Notify(ip netip.Addr) error {
	r, err := m.current()
	if err != nil {
		return fmt.Errorf("notifying %v: %w", ip, err)
	}
	return r.Notify(ip)
}

// Ask is the current Responder's Ask, or an error wrapping ErrNoResponder.
func (m *Managed) Ask(self, target netip.Addr) error {
	r, err := m.current()
	if err != nil {
		return fmt.Errorf("asking for %v: %w", target, err)
	}
	return r.Ask(self, target)
}

// GratuitousTo is the current Responder's GratuitousTo, or an error wrapping ErrNoResponder.
func (m *Managed) GratuitousTo(ip, clientIP netip.Addr, clientMAC, mac net.HardwareAddr) error {
	r, err := m.current()
	if err != nil {
		return fmt.Errorf("gratuitous for %v to %v: %w", ip, clientIP, err)
	}
	return r.GratuitousTo(ip, clientIP, clientMAC, mac)
}
