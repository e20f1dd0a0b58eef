package liveness

import (
	"context"
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

// Monitor runs a Detector on a UDP socket. The zero value is not usable; use NewMonitor.
type Monitor struct {
	self   func() Heartbeat
	conn   net.PacketConn
	log    *slog.Logger
	change func() // called (from the monitor's goroutines) when a peer comes alive or dies

	// OnDeath, if set before Run, is called once per peer declared dead.
	OnDeath func()

	mu    sync.Mutex // guards the following fields
	det   *Detector
	peers []Peer
	seq   uint64
}

// NewMonitor wraps a bound socket. self is called for each heartbeat sent; change is called on any
// liveness change and must not block.
func NewMonitor(conn net.PacketConn, det *Detector, self func() Heartbeat, change func(), log *slog.Logger) *Monitor {
	return &Monitor{conn: conn, det: det, self: self, change: change, log: log}
}

// SetPeers replaces the peer list (from the Node objects).
func (m *Monitor) SetPeers(peers []Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peers = peers
	known := map[string]bool{}
	for _, p := range peers {
		known[p.Node] = true
	}
	for name := range m.det.peers {
		if !known[name] {
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
	m.seq++
	hb := m.self()
	hb.Seq = m.seq
	peers := m.peers
	m.mu.Unlock()
	b := hb.Marshal()
	for _, p := range peers {
		_, _ = m.conn.WriteTo(b, net.UDPAddrFromAddrPort(p.Addr))
	}
}

func (m *Monitor) receive(ctx context.Context) {
	buf := make([]byte, 2048)
	for {
		n, _, err := m.conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		hb, err := Parse(buf[:n])
		if err != nil {
			continue
		}
		now := time.Now()
		m.mu.Lock()
		prev, had := m.det.Info(hb.Node)
		came := m.det.Heard(hb, now)
		m.mu.Unlock()
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
