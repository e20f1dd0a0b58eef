package speaker

import (
	"net/netip"
	"slices"
	"time"
)

// Announcing on several interfaces (issue 20). The InternalIP's interface (s.ifi) is the primary:
// heartbeats and echo probes run there, and its responders' health is the node's data-plane health
// (dataplane.go). Every other interface that can announce (interfaces.go: MetalLB's rules) gets
// responders of its own, a secondary link. A secondary's health is its sockets' only: while one of
// them has failed, the interface leaves this node's announcing interfaces (its heartbeats and its
// own elections), so an address advertised on that interface alone moves to a node that has it,
// and addresses announced on several interfaces stay announced on the others. It is reopened at
// most every secondaryRetry.

// secondaryLink is an interface this node announces on besides the InternalIP's: its responders.
type secondaryLink struct {
	Name     string
	ARP, NDP responder  // NDP nil without IPv6 on it
	Reopen   []reopener // the responders to reopen after a failure
}

// secondaryRetry is how often a failed secondary link's responders are reopened.
const secondaryRetry = time.Second

// onSecondaryError is the callback for a secondary link's socket failing.
func (s *speaker) onSecondaryError(name string) func(error) {
	return func(err error) {
		s.mu.Lock()
		first := s.secFailed[name] == ""
		s.secFailed[name] = err.Error()
		s.mu.Unlock()
		if first {
			s.log.Warn("responder failed on a secondary interface: it stops announcing there until reopened", "iface", name, "err", err)
		}
		s.poke()
	}
}

// interfacesLocked are this node's interfaces that can announce now: the InternalIP's and the
// secondaries whose sockets work, sorted. s.mu is held.
func (s *speaker) interfacesLocked() []string {
	out := []string{s.ifi.Name}
	for _, l := range s.sec {
		if s.secFailed[l.Name] == "" {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}

func (s *speaker) interfaces() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interfacesLocked()
}

// secondaryStep reopens the failed secondary links that are due (run goroutine), and returns when to
// try again (zero: nothing failed). A link reopened answers for nothing: it is taken out of every
// address's interfaces, for the plan to announce there again.
func (s *speaker) secondaryStep(now time.Time) time.Time {
	s.mu.Lock()
	var failed []string
	for _, l := range s.sec {
		if s.secFailed[l.Name] != "" {
			failed = append(failed, l.Name)
		}
	}
	s.mu.Unlock()
	if len(failed) == 0 {
		return time.Time{}
	}
	if now.Before(s.secRetryAt) {
		return s.secRetryAt
	}
	s.secRetryAt = now.Add(secondaryRetry)
	for _, l := range s.sec {
		if !slices.Contains(failed, l.Name) {
			continue
		}
		ok := true
		for _, ro := range l.Reopen {
			if _, err := ro.Reopen(); err != nil {
				s.log.Debug("reopening a secondary interface's responder", "iface", l.Name, "err", err)
				ok = false
			}
		}
		if !ok {
			continue
		}
		for a, ifs := range s.on {
			s.on[a] = slices.DeleteFunc(slices.Clone(ifs), func(i string) bool { return i == l.Name })
		}
		s.mu.Lock()
		delete(s.secFailed, l.Name)
		s.mu.Unlock()
		s.log.Info("secondary interface's responders reopened", "iface", l.Name)
	}
	return s.secRetryAt
}

// respOn returns the responder of address a's family on interface name (nil: none).
func (s *speaker) respOn(name string, a netip.Addr) responder {
	if name == s.ifi.Name {
		return s.responder(a)
	}
	for _, l := range s.sec {
		if l.Name == name {
			if a.Is4() {
				return l.ARP
			}
			return l.NDP
		}
	}
	return nil
}

// respsOf returns the responders address a is answered on.
func (s *speaker) respsOf(a netip.Addr) []responder {
	var out []responder
	for _, name := range s.on[a] {
		if r := s.respOn(name, a); r != nil {
			out = append(out, r)
		}
	}
	return out
}

// move answers an announced address on the interfaces ifs from now: announced (with gratuitous
// announcements) where it was not, withdrawn where it is no more.
func (s *speaker) move(a netip.Addr, key string, ifs []string, spread bool) {
	have := s.on[a]
	if slices.Equal(have, ifs) {
		return
	}
	var now []string
	for _, name := range have {
		if slices.Contains(ifs, name) {
			now = append(now, name)
		} else if r := s.respOn(name, a); r != nil {
			_ = r.Withdraw(a)
		}
	}
	for _, name := range ifs {
		if slices.Contains(have, name) {
			continue
		}
		r := s.respOn(name, a)
		if r == nil {
			continue
		}
		if err := r.Announce(a); err != nil {
			s.log.Warn("announcing on another interface", "ip", a, "service", key, "iface", name, "err", err)
			continue
		}
		now = append(now, name)
		if !spread {
			_ = r.Gratuitous(a)
		}
	}
	slices.Sort(now)
	s.on[a] = now
	s.log.Info("announcing on other interfaces", "ip", a, "service", key, "interfaces", now)
}

// statusInterfaces lists the interfaces the Service key's addresses are answered on, sorted.
func (s *speaker) statusInterfaces(key string) []string {
	var out []string
	for a, k := range s.announced {
		if k == key {
			out = append(out, s.on[a]...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// onFor returns the interfaces a wanted address is answered on: Plan.On, but spread addresses
// only on the InternalIP's interface (the spread ring answers with that interface's MAC).
func (s *speaker) onFor(a netip.Addr, p Plan) []string {
	ifs := p.On[a]
	if _, spread := p.Rings[a]; spread {
		if slices.Contains(ifs, s.ifi.Name) {
			return []string{s.ifi.Name}
		}
		return nil
	}
	return ifs
}
