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
	// Run, never from the protocol loop: it may block, and changes queue up meanwhile (without
	// limit). State changes are logged from there too.
	OnChange func(StateChange)
	// Realtime runs the protocol loop on its own OS thread with SCHED_FIFO priority and a timer
	// slack of 1 ns, waking at least every 5 ms, so that sending and failure detection hold tight
	// intervals while the CPUs are busy. Without the privilege (CAP_SYS_NICE; EPERM) the loop runs
	// at normal priority; Stats says which. See also SetProcessNice.
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
	// LateOver1ms, LateOver5ms and LateOver20ms count the deadlines handled that late.
	LateOver1ms, LateOver5ms, LateOver20ms uint64
	// Realtime reports whether the protocol loop got SCHED_FIFO priority (see Config.Realtime);
	// RealtimeErr says why not, when it was asked for.
	Realtime    bool
	RealtimeErr error
}

// ErrRunning is returned by Run when the Manager is already running.
var ErrRunning = errors.New("bfd: manager already running")

// How long a removed session keeps telling its peer it is AdminDown before it is deleted.
const lingerTime = SlowInterval

// realtimeMaxWait bounds each wait of a realtime loop. Go's runtime takes the processor (P) away
// from a goroutine blocked in a system call for more than 10 ms; getting one back afterwards may
// wait for threads of normal priority, which a busy machine delays by tens of milliseconds. Waking
// more often keeps the P.
const realtimeMaxWait = 5 * time.Millisecond

// drainLimit bounds the packets read before the timers are looked at, so a flood cannot starve them.
const drainLimit = 256

// Manager runs BFD sessions on a Conn, one per peer address. Peers are added and removed at any
// time, also before Run; the sessions run while Run does. All protocol state is owned by Run's
// protocol loop; the methods only record what is wanted and wake it.
//
// The loop never waits for a lock that a goroutine of normal priority holds (which a busy machine
// may leave unscheduled for tens of milliseconds): it reads the wanted peers and publishes statuses
// through atomic pointers, counts with atomics, and queues state changes on a channel that Run
// drains.
type Manager struct {
	conn    Conn
	log     *slog.Logger
	cfg     Config
	running atomic.Bool
	changes chan StateChange // loop → Run

	mu    sync.Mutex                              // serializes AddPeer and RemovePeer; never taken by the loop
	want  atomic.Pointer[map[netip.Addr]peerSpec] // copy on write, under mu
	dirty atomic.Bool                             // want changed since the loop last looked

	status   atomic.Pointer[map[netip.Addr]PeerStatus] // replaced by the loop; read-only
	counters counters
	rt       atomic.Pointer[error] // the result of setRealtime, once tried

	// Owned by the protocol loop.
	rnd         rand.Source
	sessions    map[netip.Addr]*peer // by peer address
	leaving     map[netip.Addr]*peer // removed, saying AdminDown until removeAt
	byDiscr     map[uint32]*peer     // both of the above, by local discriminator
	statuses    map[netip.Addr]PeerStatus
	statusDirty bool
	overflow    []StateChange // changes the channel had no room for, oldest first
	out         []byte
}

// counters back Stats.
type counters struct {
	received, sent, sendErrors atomic.Uint64
	dropped                    [len(dropNames)]atomic.Uint64
	maxLateness                atomic.Int64
	late1, late5, late20       atomic.Uint64
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
	m := &Manager{
		conn:     conn,
		log:      log,
		cfg:      cfg,
		changes:  make(chan StateChange, 256),
		rnd:      rnd,
		sessions: map[netip.Addr]*peer{},
		leaving:  map[netip.Addr]*peer{},
		byDiscr:  map[uint32]*peer{},
		statuses: map[netip.Addr]PeerStatus{},
	}
	m.want.Store(&map[netip.Addr]peerSpec{})
	m.status.Store(&map[netip.Addr]PeerStatus{})
	return m
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
	want := maps.Clone(*m.want.Load())
	want[peer] = peerSpec{local: local, profile: p.WithDefaults()}
	m.want.Store(&want)
	m.mu.Unlock()
	m.dirty.Store(true)
	m.conn.Wake()
	return nil
}

// RemovePeer ends the session with peer, if any: it goes AdminDown, tells the peer so (which, per
// RFC 5882 §3.2, the peer must not take for a failure), and is deleted a second later.
func (m *Manager) RemovePeer(peer netip.Addr) {
	m.mu.Lock()
	want := maps.Clone(*m.want.Load())
	delete(want, peer.Unmap())
	m.want.Store(&want)
	m.mu.Unlock()
	m.dirty.Store(true)
	m.conn.Wake()
}

// Peers returns the status of every session, ordered by peer address. Sessions appear once Run has
// created them, and are gone once removed.
func (m *Manager) Peers() []PeerStatus {
	return slices.SortedFunc(maps.Values(*m.status.Load()), func(a, b PeerStatus) int { return a.Peer.Compare(b.Peer) })
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	c := &m.counters
	st := Stats{
		Received:     c.received.Load(),
		Sent:         c.sent.Load(),
		SendErrors:   c.sendErrors.Load(),
		Dropped:      map[DropReason]uint64{},
		MaxLateness:  time.Duration(c.maxLateness.Load()),
		LateOver1ms:  c.late1.Load(),
		LateOver5ms:  c.late5.Load(),
		LateOver20ms: c.late20.Load(),
	}
	for r := range c.dropped {
		if n := c.dropped[r].Load(); n > 0 {
			st.Dropped[DropReason(r)] = n
		}
	}
	if err := m.rt.Load(); err != nil {
		st.Realtime, st.RealtimeErr = *err == nil, *err
	}
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
	m.dirty.Store(true)
	stop := context.AfterFunc(ctx, m.conn.Wake)
	defer stop()

	done := make(chan error, 1)
	go func() {
		if m.cfg.Realtime {
			// Never unlocked: the thread ends with this goroutine, with its scheduling policy.
			runtime.LockOSThread()
			err := setRealtime()
			m.rt.Store(&err)
			if err != nil {
				m.log.Info("bfd loop runs without realtime priority", "err", err)
			}
		}
		done <- m.loop(ctx)
	}()
	for {
		select {
		case c := <-m.changes:
			m.deliver(c)
		case err := <-done:
			for { // the loop has queued its last change
				select {
				case c := <-m.changes:
					m.deliver(c)
				default:
					return err
				}
			}
		}
	}
}

// deliver logs a state change and hands it to OnChange.
func (m *Manager) deliver(c StateChange) {
	lvl := slog.LevelInfo
	if c.Old == StateUp {
		lvl = slog.LevelWarn
	}
	m.log.Log(context.Background(), lvl, "bfd session state changed", "peer", c.Peer, "local", c.Local,
		"old", c.Old.String(), "state", c.New.String(), "diag", c.Diag.String(),
		"remoteState", c.RemoteState.String(), "remoteDiag", c.RemoteDiag.String())
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(c)
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
		m.flush(false)
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
		now := time.Now()
		next := m.tick(now)
		m.flush(false)
		if cap := now.Add(realtimeMaxWait); m.cfg.Realtime && next.After(cap) {
			next = cap
		}
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
	if !m.dirty.Swap(false) {
		return
	}
	want := *m.want.Load()

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
	delete(m.statuses, p.addr)
	m.statusDirty = true
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
	m.flush(true)
}

// flush publishes the statuses if they changed, and queues the state changes the channel had no
// room for; with wait, it waits for room (Run is reading), else it keeps what does not fit.
func (m *Manager) flush(wait bool) {
	if m.statusDirty {
		st := maps.Clone(m.statuses)
		m.status.Store(&st)
		m.statusDirty = false
	}
	for len(m.overflow) > 0 {
		if wait {
			m.changes <- m.overflow[0]
		} else {
			select {
			case m.changes <- m.overflow[0]:
			default:
				return
			}
		}
		m.overflow = m.overflow[1:]
	}
	m.overflow = nil
}

// tick runs every session whose deadline has come and returns the next deadline.
func (m *Manager) tick(now time.Time) time.Time {
	next := now.Add(time.Minute)
	var late time.Duration
	var lates [3]uint64
	for _, set := range []map[netip.Addr]*peer{m.sessions, m.leaving} {
		for _, p := range set {
			if p.tx == nil && !p.dialAt.IsZero() && !now.Before(p.dialAt) {
				m.dial(p, now)
			}
			if d := p.s.NextDeadline(); !d.IsZero() && !now.Before(d) {
				l := now.Sub(d)
				late = max(late, l)
				lates[0] += b2u(l > time.Millisecond)
				lates[1] += b2u(l > 5*time.Millisecond)
				lates[2] += b2u(l > 20*time.Millisecond)
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
	c := &m.counters
	if int64(late) > c.maxLateness.Load() {
		c.maxLateness.Store(int64(late)) // only the loop writes it
	}
	c.late1.Add(lates[0])
	c.late5.Add(lates[1])
	c.late20.Add(lates[2])
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
	m.counters.received.Add(1)
	m.emit(p, evs)
}

func (m *Manager) drop(err error, d Datagram) {
	var r DropReason
	if !errors.As(err, &r) {
		r = DropLength
	}
	if int(r) < len(m.counters.dropped) {
		m.counters.dropped[r].Add(1)
	}
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
	if err != nil {
		m.counters.sendErrors.Add(1)
	} else {
		m.counters.sent.Add(1)
	}
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

// emit queues state changes for Run, in order.
func (m *Manager) emit(p *peer, evs []Event) {
	if len(evs) == 0 {
		return
	}
	for _, ev := range evs {
		p.since = ev.At
		c := StateChange{Local: p.local, Peer: p.addr, Event: ev}
		if len(m.overflow) == 0 {
			select {
			case m.changes <- c:
				continue
			default:
			}
		}
		m.overflow = append(m.overflow, c)
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
	m.statuses[p.addr] = PeerStatus{Local: p.local, Peer: p.addr, Profile: p.profile, SessionStatus: p.published,
		Since: p.since, Err: p.err}
	m.statusDirty = true
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
