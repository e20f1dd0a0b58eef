package bfd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Manager. The zero value is usable.
type Config struct {
	// Log receives the manager's logs (nil: none). Keys: peer, local, state, diag.
	Log *slog.Logger
	// OnChange is called with every session state change, in order, from the goroutine that called
	// Run, never from the protocol loop: it may block, and changes queue up meanwhile.
	OnChange func(StateChange)
	// Realtime runs the protocol loop on its own OS thread with SCHED_FIFO priority and a timer
	// slack of 1 ns, so that sending and failure detection hold tight intervals while the CPUs are
	// busy. Without the privilege (EPERM) the loop runs at normal priority; Stats says which.
	Realtime bool
	// Rand supplies local discriminators and transmission jitter (nil: math/rand/v2's global
	// source). It is used from the protocol loop only.
	Rand rand.Source
}

// StateChange is a session state change of the peer Peer, reached from Local.
type StateChange struct {
	Local, Peer netip.Addr
	Event
}

// PeerStatus describes one configured peer.
type PeerStatus struct {
	Local, Peer netip.Addr
	Profile     Profile // with defaults
	SessionStatus
	// Since is when the session entered its current state (or was created).
	Since time.Time
	// Err is the last error opening or sending on the session's socket; nil once a send works.
	Err error
}

// Stats are a Manager's counters since it was built.
type Stats struct {
	Received   uint64                // packets accepted by a session
	Sent       uint64                // packets sent
	SendErrors uint64                // packets that could not be sent (including before a socket opened)
	Dropped    map[DropReason]uint64 // packets dropped, by reason
	// MaxLateness is the longest the protocol loop has run after a session's deadline (a packet due
	// or a detection time expiring): a measure of scheduling delay.
	MaxLateness time.Duration
	// Realtime reports whether the protocol loop got SCHED_FIFO priority (see Config.Realtime);
	// RealtimeErr says why not, when it was asked for.
	Realtime    bool
	RealtimeErr error
}

// ErrRunning is returned by Run when the Manager is already running.
var ErrRunning = errors.New("bfd: manager already running")

// How long a removed session keeps telling its peer it is AdminDown before it is deleted.
const lingerTime = SlowInterval

// drainLimit bounds the packets read before the timers are looked at, so a flood cannot starve them.
const drainLimit = 256

// Manager runs BFD sessions on a Conn, one per peer address. Peers are added and removed at any
// time, also before Run; the sessions run while Run does. All protocol state is owned by Run's
// protocol loop; the methods only record what is wanted and wake it.
type Manager struct {
	conn    Conn
	log     *slog.Logger
	cfg     Config
	running atomic.Bool
	notify  chan struct{} // a StateChange was queued

	mu       sync.Mutex // guards the following fields
	want     map[netip.Addr]peerSpec
	dirty    bool // want changed since the loop last looked
	status   map[netip.Addr]PeerStatus
	changes  []StateChange
	stats    Stats
	received uint64

	// Owned by the protocol loop.
	rnd      rand.Source
	sessions map[netip.Addr]*peer // by peer address
	leaving  map[netip.Addr]*peer // removed, saying AdminDown until removeAt
	byDiscr  map[uint32]*peer     // both of the above, by local discriminator
	out      []byte
}

type peerSpec struct {
	local   netip.Addr
	profile Profile
}

// peer is the protocol loop's record of one session.
type peer struct {
	local, addr netip.Addr
	profile     Profile
	s           *Session
	tx          Sender
	dialAt      time.Time // when to retry opening tx
	removeAt    time.Time // set while leaving
	since       time.Time
	err         error
	published   SessionStatus
}

// New returns a Manager sending and receiving on conn; the caller keeps conn and closes it after
// Run returns. New starts nothing.
func New(conn Conn, cfg Config) *Manager {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rnd := cfg.Rand
	if rnd == nil {
		rnd = globalSource{}
	}
	return &Manager{
		conn:     conn,
		log:      log,
		cfg:      cfg,
		notify:   make(chan struct{}, 1),
		want:     map[netip.Addr]peerSpec{},
		status:   map[netip.Addr]PeerStatus{},
		stats:    Stats{Dropped: map[DropReason]uint64{}},
		rnd:      rnd,
		sessions: map[netip.Addr]*peer{},
		leaving:  map[netip.Addr]*peer{},
		byDiscr:  map[uint32]*peer{},
	}
}

// AddPeer asks for a session with peer, sent from local (the zero Addr: the address routing
// picks), with profile p. Adding a peer again changes its profile (negotiated with the peer while
// Up) or, for another local address, replaces its session. It fails for an invalid address or
// profile; socket errors show in Peers and the log, and opening is retried every second.
func (m *Manager) AddPeer(local, peer netip.Addr, p Profile) error {
	if !peer.IsValid() || peer.IsUnspecified() || peer.IsMulticast() || peer.Zone() != "" {
		return fmt.Errorf("bfd: invalid peer address %v", peer)
	}
	peer = peer.Unmap()
	if local.IsValid() {
		local = local.Unmap()
		if local.Is4() != peer.Is4() || local.Zone() != "" || local.IsMulticast() {
			return fmt.Errorf("bfd: local address %v does not suit peer %v", local, peer)
		}
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("bfd: peer %v: %w", peer, err)
	}
	m.mu.Lock()
	m.want[peer] = peerSpec{local: local, profile: p.WithDefaults()}
	m.dirty = true
	m.mu.Unlock()
	m.conn.Wake()
	return nil
}

// RemovePeer ends the session with peer, if any: it goes AdminDown, tells the peer so (which, per
// RFC 5882 §3.2, the peer must not take for a failure), and is deleted a second later.
func (m *Manager) RemovePeer(peer netip.Addr) {
	m.mu.Lock()
	delete(m.want, peer.Unmap())
	m.dirty = true
	m.mu.Unlock()
	m.conn.Wake()
}

// Peers returns the status of every session, ordered by peer address. Sessions appear once Run has
// created them, and are gone once removed.
func (m *Manager) Peers() []PeerStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.SortedFunc(maps.Values(m.status), func(a, b PeerStatus) int { return a.Peer.Compare(b.Peer) })
}

// Stats returns a copy of the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats
	st.Received = m.received
	st.Dropped = maps.Clone(m.stats.Dropped)
	return st
}

// Run runs the sessions until ctx ends, then sends every session's peer an AdminDown packet and
// closes the senders it opened, and returns nil. It returns an error if the Conn fails to receive,
// or ErrRunning if already running. State changes go to Config.OnChange from Run's goroutine.
func (m *Manager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer m.running.Store(false)
	m.mu.Lock()
	m.dirty = true
	m.mu.Unlock()
	stop := context.AfterFunc(ctx, m.conn.Wake)
	defer stop()

	done := make(chan error, 1)
	go func() {
		if m.cfg.Realtime {
			// Never unlocked: the thread ends with this goroutine, with its scheduling policy.
			runtime.LockOSThread()
			err := setRealtime()
			m.mu.Lock()
			m.stats.Realtime, m.stats.RealtimeErr = err == nil, err
			m.mu.Unlock()
			if err != nil {
				m.log.Info("bfd loop runs without realtime priority", "err", err)
			}
		}
		done <- m.loop(ctx)
	}()
	for {
		select {
		case <-m.notify:
			m.deliver()
		case err := <-done:
			m.deliver()
			return err
		}
	}
}

func (m *Manager) deliver() {
	for {
		m.mu.Lock()
		batch := m.changes
		m.changes = nil
		m.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		if m.cfg.OnChange != nil {
			for _, c := range batch {
				m.cfg.OnChange(c)
			}
		}
	}
}

// loop is the protocol loop: it owns the sessions.
func (m *Manager) loop(ctx context.Context) error {
	buf := make([]byte, 2048)
	for {
		if ctx.Err() != nil {
			m.shutdown(time.Now())
			return nil
		}
		m.reconcile(time.Now())
		// Read what has arrived before judging anyone's silence: after a scheduling pause, packets
		// that came in meanwhile wait in the socket and must count first.
		for range drainLimit {
			d, ok, err := m.conn.Recv(buf, time.Time{})
			if err != nil {
				m.shutdown(time.Now())
				return fmt.Errorf("bfd: receiving: %w", err)
			}
			if !ok {
				break
			}
			m.handle(buf[:d.N], d, time.Now())
		}
		next := m.tick(time.Now())
		d, ok, err := m.conn.Recv(buf, next)
		if err != nil {
			m.shutdown(time.Now())
			return fmt.Errorf("bfd: receiving: %w", err)
		}
		if ok {
			m.handle(buf[:d.N], d, time.Now())
		}
	}
}

// reconcile makes the sessions match the wanted peers.
func (m *Manager) reconcile(now time.Time) {
	m.mu.Lock()
	if !m.dirty {
		m.mu.Unlock()
		return
	}
	want := maps.Clone(m.want)
	m.dirty = false
	m.mu.Unlock()

	for addr, spec := range want {
		p := m.sessions[addr]
		if p != nil && p.local != spec.local {
			m.leave(p, now)
			p = nil
		}
		if p == nil {
			if q := m.leaving[addr]; q != nil && q.local == spec.local {
				delete(m.leaving, addr)
				q.removeAt = time.Time{}
				m.sessions[addr] = q
				m.emit(q, q.s.SetAdminDown(false, now))
				p = q
			} else {
				m.create(addr, spec, now)
				continue
			}
		}
		if p.profile != spec.profile {
			if err := p.s.SetProfile(spec.profile, now); err != nil { // validated by AddPeer
				m.log.Error("bfd profile rejected", "peer", addr, "err", err)
				continue
			}
			p.profile = spec.profile
		}
	}
	for addr, p := range m.sessions {
		if _, ok := want[addr]; !ok {
			m.leave(p, now)
		}
	}
}

func (m *Manager) create(addr netip.Addr, spec peerSpec, now time.Time) {
	var discr uint32
	for discr == 0 || m.byDiscr[discr] != nil {
		discr = uint32(m.rnd.Uint64())
	}
	s, err := NewSession(discr, spec.profile, m.rnd, now)
	if err != nil { // validated by AddPeer
		m.log.Error("bfd session not created", "peer", addr, "err", err)
		return
	}
	p := &peer{local: spec.local, addr: addr, profile: spec.profile, s: s, since: now, dialAt: now}
	m.sessions[addr] = p
	m.byDiscr[discr] = p
	m.log.Info("bfd session created", "peer", addr, "local", spec.local, "discriminator", discr,
		"rx", spec.profile.ReceiveInterval, "tx", spec.profile.TransmitInterval, "mult", spec.profile.DetectMultiplier,
		"passive", spec.profile.Passive)
	m.dial(p, now)
	m.publish(p)
}

func (m *Manager) dial(p *peer, now time.Time) {
	tx, err := m.conn.Dial(p.local, p.addr)
	if err != nil {
		if p.err == nil || p.err.Error() != err.Error() {
			m.log.Warn("bfd socket not opened; retrying every second", "peer", p.addr, "local", p.local, "err", err)
		}
		p.err = err
		p.dialAt = now.Add(time.Second)
		m.publishErr(p)
		return
	}
	p.tx = tx
	p.dialAt = time.Time{}
}

// leave takes a session AdminDown and schedules its deletion.
func (m *Manager) leave(p *peer, now time.Time) {
	delete(m.sessions, p.addr)
	if q := m.leaving[p.addr]; q != nil {
		m.close(q)
	}
	m.leaving[p.addr] = p
	p.removeAt = now.Add(lingerTime)
	m.emit(p, p.s.SetAdminDown(true, now))
	m.mu.Lock()
	delete(m.status, p.addr)
	m.mu.Unlock()
}

func (m *Manager) close(p *peer) {
	if p.tx != nil {
		_ = p.tx.Close()
	}
	delete(m.byDiscr, p.s.LocalDiscriminator())
	if m.leaving[p.addr] == p {
		delete(m.leaving, p.addr)
	}
	if m.sessions[p.addr] == p {
		delete(m.sessions, p.addr)
	}
}

// shutdown sends AdminDown to every peer once and closes all sessions.
func (m *Manager) shutdown(now time.Time) {
	for _, p := range m.sessions {
		m.emit(p, p.s.SetAdminDown(true, now))
		if pkt, _ := p.s.Tick(now); pkt != nil {
			m.send(p, pkt)
		}
		m.publish(p)
		m.close(p)
	}
	for _, p := range m.leaving {
		m.close(p)
	}
}

// tick runs every session whose deadline has come and returns the next deadline.
func (m *Manager) tick(now time.Time) time.Time {
	next := now.Add(time.Minute)
	var late time.Duration
	for _, set := range []map[netip.Addr]*peer{m.sessions, m.leaving} {
		for _, p := range set {
			if p.tx == nil && !p.dialAt.IsZero() && !now.Before(p.dialAt) {
				m.dial(p, now)
			}
			if d := p.s.NextDeadline(); !d.IsZero() && !now.Before(d) {
				late = max(late, now.Sub(d))
				pkt, evs := p.s.Tick(now)
				m.emit(p, evs)
				if pkt != nil {
					m.send(p, pkt)
				}
			}
			if !p.removeAt.IsZero() && !now.Before(p.removeAt) {
				m.close(p)
				continue
			}
			for _, d := range []time.Time{p.s.NextDeadline(), p.dialAt, p.removeAt} {
				if !d.IsZero() && d.Before(next) {
					next = d
				}
			}
			if p.removeAt.IsZero() {
				m.publish(p)
			}
		}
	}
	m.mu.Lock()
	m.stats.MaxLateness = max(m.stats.MaxLateness, late)
	m.mu.Unlock()
	return next
}

func (m *Manager) handle(b []byte, d Datagram, now time.Time) {
	if d.TTL != TTL {
		m.drop(fmt.Errorf("ttl %d: %w", d.TTL, DropTTL), d)
		return
	}
	pkt, err := Parse(b)
	if err != nil {
		m.drop(err, d)
		return
	}
	src := d.Src.Unmap()
	var p *peer
	if pkt.YourDiscriminator != 0 {
		p = m.byDiscr[pkt.YourDiscriminator]
	} else if p = m.sessions[src]; p == nil {
		p = m.leaving[src]
	}
	if p == nil || p.addr != src || p.local.IsValid() && d.Dst.IsValid() && p.local != d.Dst.Unmap() {
		m.drop(fmt.Errorf("from %v to %v, your discriminator %d: %w", src, d.Dst, pkt.YourDiscriminator, DropNoSession), d)
		return
	}
	evs, err := p.s.Receive(pkt, now)
	if err != nil {
		m.drop(err, d)
		return
	}
	m.mu.Lock()
	m.received++
	m.mu.Unlock()
	m.emit(p, evs)
}

func (m *Manager) drop(err error, d Datagram) {
	var r DropReason
	if !errors.As(err, &r) {
		r = DropLength
	}
	m.mu.Lock()
	m.stats.Dropped[r]++
	m.mu.Unlock()
	m.log.Debug("bfd packet dropped", "peer", d.Src, "local", d.Dst, "reason", r.String(), "err", err)
}

func (m *Manager) send(p *peer, pkt *Packet) {
	var err error
	m.out, err = pkt.Append(m.out[:0])
	if err == nil {
		if p.tx == nil {
			err = p.err
		} else {
			err = p.tx.Send(m.out)
		}
	}
	m.mu.Lock()
	if err != nil {
		m.stats.SendErrors++
	} else {
		m.stats.Sent++
	}
	m.mu.Unlock()
	switch {
	case err != nil && (p.err == nil || p.err.Error() != err.Error()):
		m.log.Warn("bfd send failed", "peer", p.addr, "local", p.local, "err", err)
		p.err = err
		m.publishErr(p)
	case err == nil && p.err != nil:
		m.log.Info("bfd send works again", "peer", p.addr, "local", p.local)
		p.err = nil
		m.publishErr(p)
	}
}

// emit records state changes for OnChange and the log.
func (m *Manager) emit(p *peer, evs []Event) {
	if len(evs) == 0 {
		return
	}
	for _, ev := range evs {
		lvl := slog.LevelInfo
		if ev.Old == StateUp {
			lvl = slog.LevelWarn
		}
		m.log.Log(context.Background(), lvl, "bfd session state changed", "peer", p.addr, "local", p.local,
			"old", ev.Old.String(), "state", ev.New.String(), "diag", ev.Diag.String(),
			"remoteState", ev.RemoteState.String(), "remoteDiag", ev.RemoteDiag.String())
		p.since = ev.At
	}
	m.mu.Lock()
	for _, ev := range evs {
		m.changes = append(m.changes, StateChange{Local: p.local, Peer: p.addr, Event: ev})
	}
	m.mu.Unlock()
	select {
	case m.notify <- struct{}{}:
	default:
	}
	m.publish(p)
}

// publish updates the peer's status if its session changed.
func (m *Manager) publish(p *peer) {
	if st := p.s.Status(); st != p.published {
		p.published = st
		m.publishErr(p)
	}
}

func (m *Manager) publishErr(p *peer) {
	if !p.removeAt.IsZero() {
		return // removed: no longer reported
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status[p.addr] = PeerStatus{Local: p.local, Peer: p.addr, Profile: p.profile, SessionStatus: p.published,
		Since: p.since, Err: p.err}
}
