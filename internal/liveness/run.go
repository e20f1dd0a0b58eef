package liveness

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Peer is another speaker to send heartbeats to.
type Peer struct {
	Node string
	Addr netip.AddrPort
}

// Monitor runs a Detector on a UDP socket, behind a Signer and a Verifier (auth.go): it sends and
// believes only heartbeats signed with the cluster key, from known nodes at their addresses, fresh.
// Until SetKeys gives it a key it neither sends nor accepts any. The zero value is not usable; use
// NewMonitor.
type Monitor struct {
	self   func() Heartbeat
	conn   net.PacketConn
	log    *slog.Logger
	change func() // called (from the monitor's goroutines) when a peer comes alive or dies

	// OnDeath, if set before Run, is called once per peer declared dead.
	OnDeath func()
	// OnReject, if set before Run, is called for every packet rejected, with the reason (from the
	// receiving goroutine; it must not block).
	OnReject func(Reason)

	sendMu sync.Mutex // serialises sends (so that sequence numbers leave in order); guards signer
	signer *Signer

	mu       sync.Mutex // guards the following fields
	det      *Detector
	ver      *Verifier
	peers    []Peer
	rejected rejectLog
}

// NewMonitor wraps a bound socket. self is called for each heartbeat sent; change is called on any
// liveness change and must not block. window is how far a heartbeat's timestamp may be from this
// node's clock (0: DefaultWindow). The boot nonce is drawn here, so a new Monitor is a new boot.
func NewMonitor(conn net.PacketConn, det *Detector, window time.Duration, self func() Heartbeat, change func(), log *slog.Logger) *Monitor {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Monitor{conn: conn, det: det, ver: NewVerifier(window), signer: NewSigner(binary.BigEndian.Uint64(b[:])),
		self: self, change: change, log: log}
}

// SetKeys replaces the heartbeat keys: heartbeats are signed with primary, and a received one may
// verify with either. Keys shorter than KeyMinLen count as none. It reports whether a key is set.
func (m *Monitor) SetKeys(primary, secondary []byte) bool {
	m.sendMu.Lock()
	m.signer.SetKey(primary)
	m.sendMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ver.SetKeys(primary, secondary)
	return m.ver.HasKey()
}

// HasKey reports whether the monitor has a key to sign with.
func (m *Monitor) HasKey() bool {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	return m.signer.HasKey()
}

// SetPeers replaces the peer list (from the Node objects).
func (m *Monitor) SetPeers(peers []Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peers = peers
	m.ver.SetPeers(peers)
	for name := range m.det.peers {
		if !m.ver.Known(name) {
			m.det.Forget(name)
		}
	}
}

// Alive reports a peer's liveness.
func (m *Monitor) Alive(node string) (bool, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.det.Alive(node)
}

// Info returns a peer's last heartbeat.
func (m *Monitor) Info(node string) (Heartbeat, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.det.Info(node)
}

// SendNow sends a heartbeat to every peer at once (to spread news such as Leaving without waiting for
// the next interval).
func (m *Monitor) SendNow() { m.send() }

// Run sends, receives and checks until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	go func() { <-ctx.Done(); m.conn.Close() }()
	go m.receive(ctx)
	t := time.NewTicker(m.det.Interval)
	defer t.Stop()
	checkEvery := m.det.Interval / 2
	check := time.NewTicker(checkEvery)
	defer check.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			m.send()
		case now := <-check.C:
			// Never judge peers on stale news: if this process was starved (the check runs late) or
			// heartbeats wait unread in the socket, the silence may be ours, not theirs.
			late := now.Sub(last) > 2*checkEvery
			last = now
			if late || m.pending() > 0 {
				continue
			}
			m.mu.Lock()
			died := m.det.Check(now)
			m.mu.Unlock()
			if len(died) > 0 {
				m.log.Warn("speaker peers declared dead", "node", died, "silentFor", m.det.Timeout())
				for range died {
					if m.OnDeath != nil {
						m.OnDeath()
					}
				}
				m.change()
			}
		}
	}
}

// pending returns the bytes waiting unread in the socket's receive queue (SIOCINQ).
func (m *Monitor) pending() int {
	sc, ok := m.conn.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	})
	return n
}

func (m *Monitor) send() {
	m.mu.Lock()
	peers := m.peers
	m.mu.Unlock()
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	hb := m.self()
	b := m.signer.Sign(hb, time.Now())
	if b == nil {
		return // no key: say nothing (Run's owner reports it)
	}
	for _, p := range peers {
		_, _ = m.conn.WriteTo(b, net.UDPAddrFromAddrPort(p.Addr))
	}
}

func (m *Monitor) receive(ctx context.Context) {
	buf := make([]byte, 2048)
	for {
		n, from, err := m.conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var src netip.Addr
		if u, ok := from.(*net.UDPAddr); ok {
			src, _ = netip.AddrFromSlice(u.IP)
		}
		now := time.Now()
		m.mu.Lock()
		hb, why := m.ver.Verify(buf[:n], src, now)
		var prev Heartbeat
		var had, came bool
		if why == Accepted {
			prev, had = m.det.Info(hb.Node)
			came = m.det.Heard(hb, now)
		} else if m.rejected.due(why, now) {
			m.logRejectLocked(why, buf[:n], src, now)
		}
		m.mu.Unlock()
		if why != Accepted {
			if m.OnReject != nil {
				m.OnReject(why)
			}
			continue
		}
		switch {
		case came:
			m.log.Info("speaker peer alive", "node", hb.Node)
			m.change()
		case had && Changed(prev, hb):
			// A peer that turns ready, or says it leaves (SIGTERM: hand its addresses over now), changes
			// the elections as much as one that comes or goes.
			m.log.Info("speaker peer changed state", "node", hb.Node, "ready", hb.Ready, "leaving", hb.Leaving)
			m.change()
		}
	}
}

// rejectLogEvery is how often at most a rejection is logged, per reason.
const rejectLogEvery = 5 * time.Second

// rejectLog rate-limits the rejections' log lines: one per reason per rejectLogEvery, saying how
// many were left out since the last.
type rejectLog struct {
	last    [numReasons]time.Time
	dropped [numReasons]int
}

// due reports whether a rejection for why is to be logged now, and counts it if not.
func (r *rejectLog) due(why Reason, now time.Time) bool {
	if why >= numReasons {
		return false
	}
	if !r.last[why].IsZero() && now.Sub(r.last[why]) < rejectLogEvery {
		r.dropped[why]++
		return false
	}
	r.last[why] = now
	return true
}

func (m *Monitor) logRejectLocked(why Reason, pkt []byte, src netip.Addr, now time.Time) {
	node, sent, _ := Claimed(pkt)
	args := []any{"reason", why.String(), "claimedNode", node, "source", src, "alsoRejectedSinceLast", m.rejected.dropped[why]}
	m.rejected.dropped[why] = 0
	switch why {
	case NoKey:
		m.log.Warn("heartbeat ignored: no heartbeat key yet (the Secret is missing or invalid)", args...)
	case Stale:
		m.log.Warn("heartbeat rejected: its timestamp is outside the window; are the nodes' clocks in sync (NTP)?",
			append(args, "skew", now.Sub(sent), "window", m.ver.Window)...)
	default:
		m.log.Warn("heartbeat rejected", args...)
	}
}
