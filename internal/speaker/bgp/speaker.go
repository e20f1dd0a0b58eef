package bgp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	gobgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/ironlb/ironlb/internal/bgpconfig"
	"github.com/ironlb/ironlb/internal/speaker/bfd"
)

// Config configures a Speaker. The zero value is usable: no logs, no BFD, no callback.
type Config struct {
	// Log receives the speaker's logs (nil: none). Keys: peer, name, state, reason.
	Log *slog.Logger
	// GoBGPLogLevel is the level from which GoBGP's own logs go to Log, with component=gobgp (nil:
	// warnings and errors).
	GoBGPLogLevel slog.Leveler
	// BFD is the connection BFD sessions run on (bfd.Listen; a bfd.FakeNetwork host in tests). Nil
	// runs no BFD: sessions with a BFD profile then report BFDStatus "N/A".
	BFD bfd.Conn
	// BFDRealtime runs the BFD protocol loop at realtime priority (bfd.Config.Realtime).
	BFDRealtime bool
	// ConnectTime is the time between connection attempts for sessions that set none (0:
	// DefaultConnectTime).
	ConnectTime time.Duration
	// OnState is called with a session's status whenever it changes, in order, from Run's
	// goroutine: it must not block for long (it may call Set and Sessions).
	OnState func(SessionStatus)
}

// ErrRunning is returned by Run when the Speaker is already running.
var ErrRunning = errors.New("bgp: speaker already running")

// Speaker makes routers see a bgpconfig.State: it runs an embedded GoBGP server with one neighbor
// per session, advertises each session's paths with their attributes, accepts no routes, ties
// sessions with a BFD profile to a BFD session, and reports every session's status.
//
// Set records the wanted State from any goroutine; Run's goroutine owns GoBGP, the BFD manager and
// the statuses, and applies the latest State whenever it changes (level-triggered: after a failed
// GoBGP call it restarts GoBGP and applies the State again, with backoff).
type Speaker struct {
	cfg     Config
	log     *slog.Logger
	running atomic.Bool
	kick    chan struct{} // Set → Run, capacity 1
	events  chan event    // GoBGP watcher, BFD and GoBGP's log → Run

	mu       sync.Mutex // guards the following fields
	desired  *bgpconfig.State
	statuses map[netip.Addr]SessionStatus // as last reported
	bfd      *bfd.Manager                 // while Run runs; written by Run only, which reads it without mu

	// Owned by Run's goroutine.
	srv       *gobgpServer
	peers     map[netip.Addr]*peerRec
	policy    exportPolicy // as applied; policySet says whether it is
	policySet bool
	paths     map[netip.Prefix]bool // in GoBGP's global RIB
	bfdPeers  map[netip.Addr]bfdSpec
	retryAt   time.Time
	backoff   time.Duration
}

// peerRec is Run's record of one session.
type peerRec struct {
	sess     bgpconfig.Session
	conf     peerConf
	added    bool      // a GoBGP neighbor exists
	rejected *peerConf // the configuration GoBGP refused, not tried again
	// disabled is why we hold the neighbor administratively down ("" if we do not); enableAt when
	// we give up waiting and enable it anyway.
	disabled DownReason
	enableAt time.Time
	// checkAt is when to check that GoBGP's admin state is what we last asked for (zero: no check
	// due). GoBGP takes one admin state request at a time and drops one made while the last is
	// pending (EnablePeer still returns nil): a BFD flap shorter than a scheduling delay held the
	// session down for good.
	checkAt time.Time
	status  SessionStatus
}

type bfdSpec struct {
	local   netip.Addr
	profile bfd.Profile
}

// event is something Run reacts to besides Set.
type event interface{}

type peerEvent struct {
	srv      *gobgpServer // the server it comes from; events of a stopped one are dropped
	peer     netip.Addr
	state    gobgp.FSMState
	reason   api.PeerState_DisconnectReason
	msg      string
	local    netip.Addr
	remoteAS uint32
	at       time.Time
}

type attemptEvent struct {
	peer netip.Addr
	attempt
}

type bfdEvent struct{ bfd.StateChange }

// New returns a Speaker; it starts nothing until Run.
func New(cfg Config) *Speaker {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ConnectTime == 0 {
		cfg.ConnectTime = DefaultConnectTime
	}
	return &Speaker{
		cfg:      cfg,
		log:      log,
		kick:     make(chan struct{}, 1),
		events:   make(chan event, 1024),
		statuses: map[netip.Addr]SessionStatus{},
		peers:    map[netip.Addr]*peerRec{},
		paths:    map[netip.Prefix]bool{},
		bfdPeers: map[netip.Addr]bfdSpec{},
	}
}

// Set records the State to apply, as bgpconfig.Build returns it (sessions with distinct peer
// addresses and one router ID). It never blocks; Run applies the latest one.
func (s *Speaker) Set(st bgpconfig.State) {
	s.mu.Lock()
	s.desired = &st
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Sessions returns the status of every configured session, ordered by name.
func (s *Speaker) Sessions() []SessionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.SortedFunc(maps.Values(s.statuses), func(a, b SessionStatus) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), a.Peer.Compare(b.Peer))
	})
}

// BFDPeers returns the BFD sessions' status (nil when BFD does not run).
func (s *Speaker) BFDPeers() []bfd.PeerStatus {
	s.mu.Lock()
	m := s.bfd
	s.mu.Unlock()
	if m == nil {
		return nil
	}
	return m.Peers()
}

// BFDStats returns the BFD manager's counters, for metrics; ok is false when BFD does not run.
func (s *Speaker) BFDStats() (st bfd.Stats, ok bool) {
	s.mu.Lock()
	m := s.bfd
	s.mu.Unlock()
	if m == nil {
		return bfd.Stats{}, false
	}
	return m.Stats(), true
}

// PeerCounters are GoBGP's counters of one neighbor, for metrics. They restart from zero when the
// neighbor is re-created (a configuration change, a GoBGP restart).
type PeerCounters struct {
	// Name is the BGPPeer's name; Peer its address.
	Name string
	Peer netip.Addr
	// Port is the peer's port.
	Port uint16
	// UpdatesSent and UpdatesReceived count UPDATE messages; NotificationsSent NOTIFICATIONs.
	UpdatesSent, UpdatesReceived, NotificationsSent uint64
	// The other messages, as FRR counts them for MetalLB's FRR-mode metrics: OPENs, KEEPALIVEs,
	// ROUTE-REFRESHes sent, and all messages.
	OpensSent, OpensReceived, KeepalivesSent, KeepalivesReceived, RouteRefreshSent uint64
	TotalSent, TotalReceived                                                       uint64
	// Advertised is the number of prefixes advertised to the peer now; 0 unless Established.
	Advertised uint64
}

// Counters returns GoBGP's counters of every neighbor, ordered by name, read on Run's goroutine
// (which owns GoBGP); nil while GoBGP does not run. It returns ctx's error if Run does not answer
// before ctx ends (Run is not running, or busy).
func (s *Speaker) Counters(ctx context.Context) ([]PeerCounters, error) {
	type result struct {
		c   []PeerCounters
		err error
	}
	res := make(chan result, 1) // Run may answer after we gave up
	read := func() {
		if s.srv == nil {
			res <- result{}
			return
		}
		c, err := s.srv.counters()
		res <- result{c, err}
	}
	select {
	case s.events <- read:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-res:
		slices.SortFunc(r.c, func(a, b PeerCounters) int { return cmp.Or(cmp.Compare(a.Name, b.Name), a.Peer.Compare(b.Peer)) })
		return r.c, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run runs the speaker until ctx ends. It then closes every BGP session with a Cease
// NOTIFICATION (routers withdraw the routes at once, without waiting for BFD or the hold time),
// tells BFD peers AdminDown, and returns nil. It returns an error if BFD's connection fails, and
// ErrRunning if already running.
func (s *Speaker) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer s.running.Store(false)

	bfdCtx, stopBFD := context.WithCancel(context.Background())
	var bfdDone chan error
	if s.cfg.BFD != nil {
		m := bfd.New(s.cfg.BFD, bfd.Config{Log: s.log.With("component", "bfd"), Realtime: s.cfg.BFDRealtime,
			OnChange: func(c bfd.StateChange) { s.post(bfdCtx, bfdEvent{c}) }})
		s.mu.Lock()
		s.bfd = m
		s.mu.Unlock()
		bfdDone = make(chan error, 1)
		go func() { bfdDone <- m.Run(bfdCtx) }()
	}
	defer func() {
		s.stopServer()
		stopBFD()
		if bfdDone != nil {
			<-bfdDone
		}
		s.mu.Lock()
		s.bfd = nil
		s.mu.Unlock()
		clear(s.bfdPeers)
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	s.reconcile()
	for {
		s.arm(timer)
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
			s.reconcile()
		case ev := <-s.events:
			s.handle(ev)
		case <-timer.C:
			s.onTimer()
		case err := <-bfdDone:
			bfdDone = nil
			return fmt.Errorf("bgp: bfd stopped: %w", err)
		}
	}
}

// post hands an event to Run, unless ctx ends first.
func (s *Speaker) post(ctx context.Context, ev event) {
	select {
	case s.events <- ev:
	case <-ctx.Done():
	}
}

// arm sets the timer to the next retry or fallback.
func (s *Speaker) arm(t *time.Timer) {
	next := s.retryAt
	for _, r := range s.peers {
		for _, at := range []time.Time{r.enableAt, r.checkAt} {
			if !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	if next.IsZero() {
		t.Reset(time.Hour)
	} else {
		t.Reset(max(time.Until(next), 0))
	}
}

func (s *Speaker) onTimer() {
	now := time.Now()
	if !s.retryAt.IsZero() && !now.Before(s.retryAt) {
		s.reconcile()
	}
	for _, r := range s.peers {
		if r.disabled != "" && !r.enableAt.IsZero() && !now.Before(r.enableAt) {
			s.log.Warn("re-enabling bgp session still held down", "peer", r.sess.Addr, "name", r.sess.Name, "reason", r.disabled)
			s.enable(r)
		}
		if !r.checkAt.IsZero() && !now.Before(r.checkAt) {
			s.checkAdmin(r)
		}
	}
}

// adminCheckDelay is how long after asking GoBGP to hold a session down or release it the
// speaker checks that it did.
const adminCheckDelay = 500 * time.Millisecond

// checkAdmin asks GoBGP again to hold r down or release it if its admin state is not what we
// asked for, and checks again later until it is.
func (s *Speaker) checkAdmin(r *peerRec) {
	r.checkAt = time.Time{}
	if s.srv == nil || !r.added {
		return
	}
	down, err := s.srv.adminDown(r.sess.Addr)
	switch {
	case err != nil:
		s.log.Error("could not read bgp session's admin state", "peer", r.sess.Addr, "err", err)
	case down == (r.disabled != ""):
		return
	case r.disabled != "":
		s.log.Warn("gobgp dropped our request to hold the bgp session down; asking again", "peer", r.sess.Addr, "name", r.sess.Name)
		err = s.srv.disablePeer(r.sess.Addr, r.status.Message)
	default:
		s.log.Warn("gobgp dropped our request to release the bgp session; asking again", "peer", r.sess.Addr, "name", r.sess.Name)
		err = s.srv.enablePeer(r.sess.Addr)
	}
	if err != nil {
		s.log.Error("could not set bgp session's admin state", "peer", r.sess.Addr, "err", err)
	}
	r.checkAt = time.Now().Add(adminCheckDelay)
}

// reconcile applies the desired State; after a failure it stops GoBGP, so that the next attempt
// starts from nothing, and schedules that attempt.
func (s *Speaker) reconcile() {
	s.mu.Lock()
	want := s.desired
	s.mu.Unlock()
	if want == nil {
		return
	}
	if err := s.apply(want); err != nil {
		s.backoff = min(max(2*s.backoff, time.Second), 30*time.Second)
		s.log.Error("applying bgp state failed; restarting gobgp", "err", err, "retryIn", s.backoff)
		s.stopServer()
		s.retryAt = time.Now().Add(s.backoff)
		return
	}
	s.backoff, s.retryAt = 0, time.Time{}
}

func (s *Speaker) apply(want *bgpconfig.State) error {
	wanted := map[netip.Addr]*bgpconfig.Session{}
	for i := range want.Sessions {
		wanted[want.Sessions[i].Addr] = &want.Sessions[i]
	}
	for addr, r := range s.peers {
		if wanted[addr] != nil {
			continue
		}
		if r.added && s.srv != nil {
			if err := s.srv.deletePeer(addr); err != nil {
				return err
			}
		}
		delete(s.peers, addr)
		st := r.status
		st.Removed = true
		s.report(st)
		s.log.Info("bgp session removed", "peer", addr, "name", r.sess.Name)
	}
	s.syncBFD(want.Sessions)
	if len(want.Sessions) == 0 {
		s.stopServer()
		return nil
	}

	// Records and statuses of the wanted sessions.
	for i := range want.Sessions {
		sess := &want.Sessions[i]
		r := s.peers[sess.Addr]
		if r == nil {
			r = &peerRec{status: SessionStatus{Peer: sess.Addr, Local: sess.SourceAddr, BGPStatus: "Idle",
				Reason: Connecting, Since: time.Now()}}
			s.peers[sess.Addr] = r
			s.log.Info("bgp session added", "peer", sess.Addr, "name", sess.Name, "localASN", sess.LocalASN,
				"peerASN", sess.PeerASN, "bfd", sess.BFDProfile)
		}
		r.sess = *sess
		st := r.status
		st.Name, st.Port, st.Paths = sess.Name, sess.Port, len(sess.Paths)
		st.BFDStatus = r.bfdStatus(st.BFDStatus, s.bfd != nil)
		r.status = s.report(st)
	}

	if !want.RouterID.Is4() {
		s.stopServer()
		for _, r := range s.peers {
			st := r.status
			st.Reason, st.Message = NoRouterID, "no IPv4 router ID: set routerID on a BGPPeer or give the node an IPv4 address"
			r.status = s.report(st)
		}
		return nil
	}
	if s.srv != nil && s.srv.routerID != want.RouterID {
		s.log.Info("bgp router ID changed; restarting gobgp", "old", s.srv.routerID, "new", want.RouterID)
		s.stopServer()
	}
	if s.srv == nil {
		h := &gobgpLog{level: slog.LevelWarn, onAttempt: func(peer netip.Addr, a attempt) {
			select { // best effort: a full queue only loses a message
			case s.events <- attemptEvent{peer: peer, attempt: a}:
			default:
			}
		}}
		if s.cfg.GoBGPLogLevel != nil {
			h.level = s.cfg.GoBGPLogLevel.Level()
		}
		if s.cfg.Log != nil {
			h.next = s.cfg.Log.Handler().WithAttrs([]slog.Attr{slog.String("component", "gobgp")})
		}
		srv, err := startServer(want.RouterID, want.Sessions[0].LocalASN, h, s.post)
		if err != nil {
			return err
		}
		s.srv = srv
		s.log.Info("gobgp started", "routerID", want.RouterID, "asn", want.Sessions[0].LocalASN)
	}

	// Neighbors whose configuration changed are re-created.
	for _, r := range s.peers {
		conf := confOf(&r.sess)
		if r.added && r.conf != conf {
			if err := s.srv.deletePeer(r.sess.Addr); err != nil {
				return err
			}
			r.added, r.disabled, r.enableAt = false, "", time.Time{}
			s.log.Info("bgp session changed; reconnecting", "peer", r.sess.Addr, "name", r.sess.Name)
		}
	}

	// Policy first, so that paths and new neighbors are filtered by it from the start.
	ep := buildExportPolicy(want.Sessions)
	if !s.policySet || ep.key != s.policy.key {
		if err := s.srv.setPolicy(ep); err != nil {
			return err
		}
	}
	added, removed := map[netip.Prefix]bool{}, map[netip.Prefix]bool{}
	for p := range s.paths {
		if !ep.prefixes[p] {
			removed[p] = true
		}
	}
	for p := range ep.prefixes {
		if !s.paths[p] {
			added[p] = true
		}
	}
	if err := s.srv.deletePaths(slices.SortedFunc(maps.Keys(removed), netip.Prefix.Compare)); err != nil {
		return err
	}
	for p := range removed {
		delete(s.paths, p)
	}
	if err := s.srv.addPaths(slices.SortedFunc(maps.Keys(added), netip.Prefix.Compare)); err != nil {
		return err
	}
	maps.Copy(s.paths, added)

	// New neighbors; kept ones get their paths again where the policy changed their view.
	for _, r := range s.peers {
		conf := confOf(&r.sess)
		if r.added {
			if s.policySet && needsSoftReset(s.policy.perPeer[r.sess.Addr], ep.perPeer[r.sess.Addr], added, removed) {
				if err := s.srv.softResetOut(r.sess.Addr); err != nil {
					return err
				}
			}
			continue
		}
		if r.rejected != nil && *r.rejected == conf {
			continue
		}
		if err := s.srv.addPeer(&r.sess, s.cfg.ConnectTime); err != nil {
			s.log.Error("gobgp refused a bgp session", "peer", r.sess.Addr, "name", r.sess.Name, "err", err)
			r.rejected = &conf
			st := r.status
			st.Reason, st.Message = Rejected, err.Error()
			r.status = s.report(st)
			continue
		}
		r.added, r.conf, r.rejected = true, conf, nil
	}
	s.policy, s.policySet = ep, true
	return nil
}

// bfdStatus is the BFD status of a session once (re)configured: "N/A" without BFD.
func (r *peerRec) bfdStatus(cur string, running bool) string {
	switch {
	case r.sess.BFDProfile == "" || !running:
		return NoBFD
	case cur == NoBFD || cur == "":
		return bfdStatus(bfd.StateDown)
	}
	return cur
}

// syncBFD makes the BFD sessions match the sessions with a BFD profile.
func (s *Speaker) syncBFD(sessions []bgpconfig.Session) {
	want := map[netip.Addr]bfdSpec{}
	for i := range sessions {
		if sessions[i].BFDProfile != "" {
			want[sessions[i].Addr] = bfdSpec{local: sessions[i].SourceAddr, profile: sessions[i].BFD}
		}
	}
	if s.bfd == nil {
		for addr := range want {
			if _, warned := s.bfdPeers[addr]; !warned {
				s.log.Warn("bfd profile set, but bfd does not run on this speaker", "peer", addr)
			}
		}
		s.bfdPeers = want
		return
	}
	for addr := range s.bfdPeers {
		if _, ok := want[addr]; ok {
			continue
		}
		s.bfd.RemovePeer(addr)
		delete(s.bfdPeers, addr)
		if r := s.peers[addr]; r != nil && r.disabled == BFDDown {
			s.enable(r)
		}
	}
	for addr, spec := range want {
		if cur, ok := s.bfdPeers[addr]; ok && cur == spec {
			continue
		}
		if err := s.bfd.AddPeer(spec.local, addr, spec.profile); err != nil {
			s.log.Error("bfd session refused", "peer", addr, "err", err)
			continue
		}
		s.bfdPeers[addr] = spec
	}
}

// stopServer stops GoBGP, if running; every neighbor and path is gone with it.
func (s *Speaker) stopServer() {
	if s.srv == nil {
		return
	}
	s.srv.stop()
	s.srv = nil
	s.log.Info("gobgp stopped")
	clear(s.paths)
	s.policy, s.policySet = exportPolicy{}, false
	for _, r := range s.peers {
		r.added, r.rejected, r.disabled, r.enableAt = false, nil, "", time.Time{}
		if r.status.BGPStatus != "Idle" {
			st := r.status
			st.BGPStatus, st.Since = "Idle", time.Now()
			r.status = s.report(st)
		}
	}
}

// handle reacts to an event.
func (s *Speaker) handle(ev event) {
	switch ev := ev.(type) {
	case peerEvent:
		s.onPeerEvent(ev)
	case attemptEvent:
		r := s.peers[ev.peer]
		if r == nil || !r.added || r.disabled != "" || r.status.Established() {
			return
		}
		reason, msg, ok := attemptReason(&r.sess, ev.attempt)
		if !ok {
			return
		}
		st := r.status
		st.Reason, st.Message = reason, msg
		if st.Reason != r.status.Reason || st.Message != r.status.Message {
			s.log.Warn("bgp session attempt failed", "peer", ev.peer, "name", r.sess.Name, "reason", reason, "message", msg)
		}
		r.status = s.report(st)
	case bfdEvent:
		s.onBFDEvent(ev.StateChange)
	case func():
		ev() // Counters, and tests: run on Run's goroutine
	}
}

func (s *Speaker) onPeerEvent(ev peerEvent) {
	r := s.peers[ev.peer]
	if r == nil || ev.srv != s.srv || !r.added {
		return
	}
	st := r.status
	if name := bgpStatus(ev.state); name != st.BGPStatus {
		st.BGPStatus, st.Since = name, ev.at
	}
	if ev.local.IsValid() {
		st.Local = ev.local
	}
	switch {
	case ev.state == gobgp.BGP_FSM_ESTABLISHED:
		if isDynamicExternal(&r.sess) && ev.remoteAS == r.sess.LocalASN {
			// GoBGP accepts any AS number with peerASN 0; dynamicASN external refuses our own.
			r.status = s.report(st)
			s.disable(r, BadPeerAS, fmt.Sprintf("dynamicASN external, but the peer is in our AS %d", ev.remoteAS),
				30*time.Second)
			return
		}
		st.Reason, st.Message = "", ""
		s.log.Info("bgp session established", "peer", ev.peer, "name", r.sess.Name, "local", ev.local)
	case r.disabled != "":
		// Held down by us: keep our reason.
	default:
		if reason, ok := downReason(ev.reason); ok {
			if r.status.Established() {
				s.log.Warn("bgp session down", "peer", ev.peer, "name", r.sess.Name, "reason", reason, "message", ev.msg)
			}
			st.Reason, st.Message = reason, ev.msg
		} else if st.Reason == "" {
			st.Reason, st.Message = Connecting, ""
		}
	}
	r.status = s.report(st)
}

// onBFDEvent ties the BGP session to its BFD session: BFD going down from Up (not because the
// peer took it down administratively, RFC 5882 §3.2) holds the BGP session down at once, and BFD
// coming up again releases it.
func (s *Speaker) onBFDEvent(c bfd.StateChange) {
	r := s.peers[c.Peer]
	if r == nil || r.sess.BFDProfile == "" {
		return
	}
	st := r.status
	st.BFDStatus = bfdStatus(c.New)
	r.status = s.report(st)
	switch {
	case c.Old == bfd.StateUp && c.New == bfd.StateDown && c.RemoteState != bfd.StateAdminDown && r.disabled == "":
		s.disable(r, BFDDown, "BFD down: "+c.Diag.String(), max(r.sess.HoldTime, 3*time.Second))
	case c.New == bfd.StateUp && r.disabled == BFDDown:
		s.log.Info("bfd up again; releasing bgp session", "peer", c.Peer, "name", r.sess.Name)
		s.enable(r)
	}
}

// disable holds a session administratively down for why, until enable, or for at most hold.
func (s *Speaker) disable(r *peerRec, why DownReason, msg string, hold time.Duration) {
	if s.srv == nil || !r.added {
		return
	}
	if err := s.srv.disablePeer(r.sess.Addr, msg); err != nil {
		s.log.Error("could not hold bgp session down", "peer", r.sess.Addr, "err", err)
		return
	}
	s.log.Warn("bgp session held down", "peer", r.sess.Addr, "name", r.sess.Name, "reason", why, "message", msg, "atMost", hold)
	r.disabled, r.enableAt, r.checkAt = why, time.Now().Add(hold), time.Now().Add(adminCheckDelay)
	st := r.status
	st.Reason, st.Message = why, msg
	r.status = s.report(st)
}

func (s *Speaker) enable(r *peerRec) {
	r.disabled, r.enableAt = "", time.Time{}
	if s.srv == nil || !r.added {
		return
	}
	if err := s.srv.enablePeer(r.sess.Addr); err != nil {
		s.log.Error("could not release bgp session", "peer", r.sess.Addr, "err", err)
	}
	r.checkAt = time.Now().Add(adminCheckDelay)
}

// report publishes a status if it changed, calls OnState, and returns it.
func (s *Speaker) report(st SessionStatus) SessionStatus {
	s.mu.Lock()
	old, ok := s.statuses[st.Peer]
	if st.Removed {
		delete(s.statuses, st.Peer)
	} else {
		s.statuses[st.Peer] = st
	}
	s.mu.Unlock()
	if ok && old == st {
		return st
	}
	if s.cfg.OnState != nil {
		s.cfg.OnState(st)
	}
	return st
}

// attemptReason explains a failed attempt to open a session; ok is false for records that explain
// nothing (an FSM error we send after the peer's NOTIFICATION, a Cease we send on purpose).
func attemptReason(sess *bgpconfig.Session, a attempt) (reason DownReason, msg string, ok bool) {
	text := gobgp.NewNotificationErrorCode(a.code, a.subcode).String()
	badAS := a.code == gobgp.BGP_ERROR_OPEN_MESSAGE_ERROR && a.subcode == gobgp.BGP_ERROR_SUB_BAD_PEER_AS
	switch a.kind {
	case connectFailed:
		msg = a.text
		if sess.Password != "" {
			msg += " (TCP MD5 is on: a password mismatch also shows as a timeout)"
		}
		return ConnectFailed, msg, true
	case notificationSent:
		switch {
		case badAS && sess.PeerASN != 0:
			return BadPeerAS, fmt.Sprintf("%s: the peer's AS number is not %d", text, sess.PeerASN), true
		case badAS:
			return BadPeerAS, text, true
		case a.code == gobgp.BGP_ERROR_FSM_ERROR || a.code == gobgp.BGP_ERROR_CEASE:
			return "", "", false
		}
		return NotificationSent, text, true
	case notificationRecv:
		if badAS {
			return NotificationReceived, fmt.Sprintf("%s: the peer does not accept our AS number %d", text, sess.LocalASN), true
		}
		return NotificationReceived, text, true
	}
	return "", "", false
}
