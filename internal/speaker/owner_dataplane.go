package speaker

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ironlb/ironlb/internal/speaker/layer2"
)

// The owner's side of the data plane's health (dataplane.go has the rules): the adapters report
// events (onDataplane, onLink, from their goroutines), the run goroutine reopens what is due and
// reports changes (dataplaneStep), the heartbeat and /readyz read the verdict (readyLocked,
// readiness).

// reopener opens a responder's socket again on its interface as it is now (*layer2.Managed). The
// new socket answers for nothing until addresses are announced on it again.
type reopener interface {
	Reopen() (*net.Interface, error)
}

// rejoiner tells the link that this node is back after its data plane was down (linkRejoin): it
// announces its own address, so that the peers' neighbour entries for it, left unresolved while the
// link was down, resolve at once; and it asks for each peer's address, so that its own entries do
// too. Without it both wait for the kernel's next retransmission, up to a second: heartbeats and
// echoes cannot pass, and each side thinks the other gone, so a healed partition had two nodes
// answering for an address for up to a second (a flaky e2e TestPartitionHeals showed it). Both go
// out through the responder's packet socket: the speaker has NET_RAW, not NET_ADMIN, so it cannot
// simply delete the kernel's unresolved entries.
type rejoiner interface {
	Rejoin(peers []netip.Addr) error
}

// linkRejoin is the rejoiner over the responder of the node address's family.
type linkRejoin struct {
	ip netip.Addr // the node's InternalIP
	l2 interface {
		Notify(ip netip.Addr) error
		Ask(self, target netip.Addr) error
	}
}

func (l linkRejoin) Rejoin(peers []netip.Addr) error {
	errs := []error{l.l2.Notify(l.ip)}
	for _, p := range peers {
		if p.Is4() == l.ip.Is4() {
			errs = append(errs, l.l2.Ask(l.ip, p))
		}
	}
	return errors.Join(errs...)
}

// The responders' names in the data plane's health.
const (
	responderARP = "ARP"
	responderNDP = "NDP"
)

// dataplaneShown is the data plane's state last reported (log, event, gauge); owned by run.
type dataplaneShown struct {
	down   bool
	reason dataplaneReason
	since  time.Time // when it went down
}

// initDataplane sets up the data plane's health over the responders in d: healthy, on the
// interface's index.
func (s *speaker) initDataplane(d deps) {
	var names []string
	if d.ARP != nil {
		names = append(names, responderARP)
	}
	if d.NDP != nil {
		names = append(names, responderNDP)
	}
	s.dp = newDataplane(names...)
	s.dp.LinkIndex = d.Interface.Index
	s.dp.Listen = s.listenTime()
	s.reopen = d.Reopen
}

// readyLocked says whether this node is ready: past its start-up listening and with a data plane
// that can answer. s.mu is held.
func (s *speaker) readyLocked() bool { return s.ready && s.dp.Ready(s.clock.Now()) }

// readiness says whether this node is ready, and why not, for /readyz.
func (s *speaker) readiness() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.leaving:
		return false, "leaving: handing addresses over"
	case !s.ready:
		if s.keys != nil {
			if why := s.keys.missing(); why != "" {
				return false, why
			}
		}
		return false, "listening to peers before the first election"
	case !s.dp.Ready(s.clock.Now()):
		f, r := s.dp.Why(s.clock.Now())
		return false, fmt.Sprintf("data plane not ready: %s", describeFault(f, r))
	case s.noL2 != "":
		return true, fmt.Sprintf("ok: BGP only, not eligible for layer 2 (%s on %s)", s.noL2, s.ifi.Name)
	}
	return true, "ok"
}

// readyCheck is readiness as a health check (kube.Check): nil when ready, else why not.
func (s *speaker) readyCheck() error {
	if ok, why := s.readiness(); !ok {
		return errors.New(why)
	}
	return nil
}

// readyz serves /readyz: 200 when this node is ready, 503 with the reason otherwise.
func (s *speaker) readyz(w http.ResponseWriter, _ *http.Request) {
	ok, why := s.readiness()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = fmt.Fprintln(w, why)
}

// onDataplane takes a report of the data-plane adapters (any goroutine). Going down, this node's
// heartbeat says Ready=false at once, so peers elect without it now; the run loop is poked to
// withdraw, reopen and report.
func (s *speaker) onDataplane(ev dataplaneEvent) {
	s.mu.Lock()
	down := s.applyDataplaneLocked(ev)
	s.mu.Unlock()
	if down {
		s.mon.SendNow()
	}
	s.poke()
}

// onLink is layer2.WatchLink's callback: the served link's state, as a data-plane event.
func (s *speaker) onLink(st layer2.LinkState) {
	ev := dataplaneEvent{Up: st.Up, Index: st.Index, Detail: st.Detail}
	switch st.Reason {
	case "":
	case layer2.LinkMissing:
		ev.Reason = DataplaneLinkMissing
	case layer2.LinkRenamed:
		ev.Reason = DataplaneLinkRenamed
	default:
		ev.Reason, ev.Detail = DataplaneLinkDown, string(st.Reason)
	}
	if !st.Up && ev.Detail == "" {
		ev.Detail = string(st.Reason)
	}
	s.onDataplane(ev)
}

// onSocketError returns the callback for a responder's socket failing (layer2.Managed's onFail,
// layer2.Config.OnNetDown).
func (s *speaker) onSocketError(responder string) func(error) {
	return func(err error) {
		s.onDataplane(dataplaneEvent{Responder: responder, Reason: DataplaneSocketError, Detail: err.Error()})
	}
}

// applyDataplaneLocked applies ev and reports whether the data plane went down. Coming back, this
// node's ready time starts over when its listening ends (dataplane rules 1 and 5). s.mu is held.
func (s *speaker) applyDataplaneLocked(ev dataplaneEvent) (wentDown bool) {
	was := s.dp.Up()
	s.dp = s.dp.apply(ev, s.clock.Now())
	switch {
	case was && !s.dp.Up():
		return true
	case !was && s.dp.Up():
		s.readyAt = s.dp.ListenUntil
	}
	return false
}

// dataplaneStep runs on the run goroutine before each plan: it reopens the responders due, applies
// the results and reports a change of the data plane's state. It returns why the data plane is not
// ready (empty when it is) and when that may change by itself (a reopen, the listening's end; zero:
// never).
func (s *speaker) dataplaneStep() (dataplaneReason, time.Time) {
	s.mu.Lock()
	due := s.dp.Due(s.clock.Now())
	s.mu.Unlock()
	for _, name := range due {
		ro := s.reopen[name]
		if ro == nil {
			continue
		}
		ev := dataplaneEvent{Responder: name, Up: true}
		ifi, err := ro.Reopen()
		if err != nil {
			ev = dataplaneEvent{Responder: name, Reason: DataplaneReopenFailed, Detail: err.Error()}
			s.log.Info("reopening responder failed; retrying with backoff", "proto", name, "err", err)
		} else {
			s.reopened(name, ifi)
		}
		s.mu.Lock()
		s.applyDataplaneLocked(ev)
		s.mu.Unlock()
	}
	s.mu.Lock()
	dp := s.dp
	s.mu.Unlock()
	now := s.clock.Now()
	was := s.dpShown
	s.showDataplane(dp, now)
	// Back from a fault (listening), and ready again: tell the link each time (the first may go out
	// before the carrier forwards).
	back := was.down && (!s.dpShown.down || s.dpShown.reason == DataplaneListening && was.reason != DataplaneListening)
	if back && s.rejoin != nil {
		var peers []netip.Addr
		if s.cur != nil {
			for _, p := range heartbeatPeers(s.cur, s.cfg.Node, 0) {
				peers = append(peers, p.Addr.Addr())
			}
		}
		if err := s.rejoin.Rejoin(peers); err != nil {
			s.log.Warn("telling the link this node is back", "err", err)
		}
	}
	f, _ := dp.Why(now)
	return f.Reason, dp.Next(now)
}

// reopened takes a responder opened again on ifi: it answers for nothing, so the addresses of its
// family are forgotten, for the plan to announce them again; a link created again may have another
// MAC, which the heartbeats and answers then carry.
func (s *speaker) reopened(name string, ifi *net.Interface) {
	s.log.Info("responder reopened", "proto", name, "ifindex", ifi.Index, "mac", ifi.HardwareAddr.String())
	var drop []netip.Addr
	for a := range s.announced {
		if (name == responderARP) == a.Is4() {
			drop = append(drop, a)
		}
	}
	slices.SortFunc(drop, netip.Addr.Compare)
	for _, a := range drop {
		s.withdraw(a, s.announced[a])
	}
	if ifi.HardwareAddr.String() != s.ifi.HardwareAddr.String() {
		s.log.Warn("the interface came back with another MAC", "old", s.ifi.HardwareAddr.String(), "mac", ifi.HardwareAddr.String())
		s.mu.Lock()
		s.ifi = ifi
		s.mu.Unlock()
		s.sp.setMAC(ifi.HardwareAddr)
	}
}

// showDataplane reports a change of the data plane's state: a log line, an event on this node, the
// ironlb_speaker_dataplane_ready gauge.
func (s *speaker) showDataplane(dp dataplane, now time.Time) {
	f, r := dp.Why(now)
	down := !dp.Ready(now)
	if down == s.dpShown.down && f.Reason == s.dpShown.reason {
		return
	}
	was := s.dpShown
	s.dpShown = dataplaneShown{down: down, reason: f.Reason, since: dp.Since}
	if down && was.down && !was.since.IsZero() {
		s.dpShown.since = was.since // still the same fault: listening after it
	}
	node := &corev1.ObjectReference{Kind: "Node", Name: s.cfg.Node, UID: "", APIVersion: "v1"}
	switch {
	case down && !was.down:
		s.m.dataplaneReady.Set(0)
		s.log.Warn("data plane down: not ready, withdrawing; peers take the addresses over", "reason", f.Reason, "proto", r, "detail", f.Detail)
		s.rec.Eventf(node, corev1.EventTypeWarning, "DataplaneDown",
			"node %q cannot answer ARP/NDP on %s: %s; it reports not ready and its addresses move to other nodes", s.cfg.Node, s.ifi.Name, describeFault(f, r))
	case down && f.Reason == DataplaneListening:
		s.log.Info("data plane up again: listening to the peers before electing", "listen", dp.Listen)
	case down:
		s.log.Info("data plane still down", "reason", f.Reason, "proto", r, "detail", f.Detail)
	default:
		s.m.dataplaneReady.Set(1)
		s.log.Info("data plane ready again: responders reopened", "down", dp.HealthySince.Sub(was.since), "listened", dp.Listen)
		s.rec.Eventf(node, corev1.EventTypeNormal, "DataplaneReady", "node %q answers ARP/NDP on %s again", s.cfg.Node, s.ifi.Name)
	}
}

// describeFault says a fault for people.
func describeFault(f dataplaneFault, responder string) string {
	what := string(f.Reason)
	if responder != "" {
		what = responder + " " + what
	}
	if f.Detail != "" {
		what += " (" + f.Detail + ")"
	}
	return what
}
