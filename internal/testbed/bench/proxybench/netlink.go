package proxybench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The node's nftables state is read over netlink, not with nft(8): an nft process costs tens of
// milliseconds to start on the lab's busy cores, too coarse against a 20 ms goal, and `nft list`
// reads whole tables whose size grows with the Services.

const ipProtoTCP = 6

// ServiceKey is the key of a service-ips map element `ADDR . tcp . PORT` as the kernel stores it:
// each field of the concatenation padded to 4 bytes, the port in network byte order (the layout
// nft, kube-proxy and ironlb's nftapply write).
func ServiceKey(a netip.Addr, port uint16) []byte {
	k := a.AsSlice()
	k = append(k, ipProtoTCP, 0, 0, 0)
	return append(k, byte(port>>8), byte(port), 0, 0)
}

// elementRequest is the payload of an NFT_MSG_GETSETELEM request for one key of set in table
// (what `nft get element` sends): nfgenmsg, then the table, the set and one element's key.
func elementRequest(family uint8, table, set string, key []byte) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, table)
	ae.String(unix.NFTA_SET_ELEM_LIST_SET, set)
	ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(e *netlink.AttributeEncoder) error {
		e.Nested(unix.NFTA_LIST_ELEM, func(e *netlink.AttributeEncoder) error {
			e.Nested(unix.NFTA_SET_ELEM_KEY, func(e *netlink.AttributeEncoder) error {
				e.Bytes(unix.NFTA_DATA_VALUE, key)
				return nil
			})
			return nil
		})
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append([]byte{family, unix.NFNETLINK_V0, 0, 0}, attrs...), nil
}

// dialNetfilter opens a netfilter netlink socket in the named network namespace (a path such as
// /run/netns/NODE).
func dialNetfilter(netnsPath string) (*netlink.Conn, error) {
	f, err := os.Open(netnsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		return nil, fmt.Errorf("netfilter netlink in %s: %w", netnsPath, err)
	}
	return c, nil
}

// ElementProbe asks the kernel whether one element is in an IPv4 set or map: one request and one
// answer, whatever the size of the table.
type ElementProbe struct {
	conn *netlink.Conn
	req  netlink.Message
}

// NewElementProbe opens a probe for key in set of the IPv4 table in the network namespace at
// netnsPath.
func NewElementProbe(netnsPath, table, set string, key []byte) (*ElementProbe, error) {
	data, err := elementRequest(unix.NFPROTO_IPV4, table, set, key)
	if err != nil {
		return nil, err
	}
	c, err := dialNetfilter(netnsPath)
	if err != nil {
		return nil, err
	}
	// No NLM_F_ACK: the kernel answers a get with the element or with an error, never both, so
	// no acknowledgement is left behind for the next request to trip over.
	return &ElementProbe{conn: c, req: netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSETELEM), Flags: netlink.Request},
		Data:   data,
	}}, nil
}

// Present reports whether the element is there. A missing table or set counts as absent
// (ENOENT), and so does an answer the kernel asks to retry (EINTR, EAGAIN, EBUSY): the next
// probe asks again.
func (p *ElementProbe) Present() (bool, error) {
	_, err := p.conn.Execute(p.req)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY):
		return false, nil
	}
	return false, fmt.Errorf("getting a set element: %w", err)
}

// Close closes the probe's socket.
func (p *ElementProbe) Close() error { return p.conn.Close() }

// ChainOf returns the table and chain named by an nftables NEWCHAIN or NEWRULE notification; ok is
// false for any other message.
func ChainOf(m netlink.Message) (table, chain string, ok bool) {
	if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
		return "", "", false
	}
	var tableAttr, chainAttr uint16
	switch m.Header.Type & 0xff {
	case unix.NFT_MSG_NEWCHAIN:
		tableAttr, chainAttr = unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME
	case unix.NFT_MSG_NEWRULE:
		tableAttr, chainAttr = unix.NFTA_RULE_TABLE, unix.NFTA_RULE_CHAIN
	default:
		return "", "", false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return "", "", false
	}
	for ad.Next() {
		switch ad.Type() {
		case tableAttr:
			table = ad.String()
		case chainAttr:
			chain = ad.String()
		}
	}
	if ad.Err() != nil || chain == "" {
		return "", "", false
	}
	return table, chain, true
}

// ChainEvent is a chain created, or a rule added to a chain, as the kernel announced it.
type ChainEvent struct {
	At           time.Time // when the notification was read
	Table, Chain string
}

// ChainWatcher follows the nftables notifications of one network namespace (what `nft monitor`
// shows) and keeps the chains that new chains and rules name. The kernel sends them while it
// commits a transaction, so the first event naming a chain is when the ruleset has it.
type ChainWatcher struct {
	conn   *netlink.Conn
	closed atomic.Bool
	done   chan struct{}

	needles [][]byte // addresses looked for in rules and set elements (AddrEvent)

	mu       sync.Mutex // guards the following fields
	events   []ChainEvent
	overruns int   // ENOBUFS: notifications lost
	err      error // why reading stopped
}

// maxChainEvents bounds what a watcher keeps; the oldest half goes when it is reached.
const maxChainEvents = 1 << 16

// WatchChains starts a watcher in the network namespace at netnsPath. Close stops it. Besides
// chains, it records an event named AddrEvent(a) for every rule or set element added that holds
// one of addrs: kube-proxy 1.37 writes an endpoint into an anonymous map of its Service chain's
// rule rather than into a chain of its own.
func WatchChains(netnsPath string, addrs ...netip.Addr) (*ChainWatcher, error) {
	c, err := dialNetfilter(netnsPath)
	if err != nil {
		return nil, err
	}
	if err := c.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		c.Close()
		return nil, fmt.Errorf("joining the nftables notification group in %s: %w", netnsPath, err)
	}
	_ = c.SetReadBuffer(8 << 20) // fewer overruns during a big sync; the default works too
	w := &ChainWatcher{conn: c, done: make(chan struct{})}
	for _, a := range addrs {
		w.needles = append(w.needles, a.AsSlice())
	}
	go w.run()
	return w, nil
}

func (w *ChainWatcher) run() {
	defer close(w.done)
	for {
		msgs, err := w.conn.Receive()
		at := time.Now()
		if err != nil {
			if w.closed.Load() {
				return
			}
			w.mu.Lock()
			if errors.Is(err, unix.ENOBUFS) {
				w.overruns++
				w.mu.Unlock()
				continue
			}
			w.err = err
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		for _, m := range msgs {
			if t, c, ok := ChainOf(m); ok {
				w.addLocked(ChainEvent{At: at, Table: t, Chain: c})
			}
			if len(w.needles) > 0 {
				if t, ok := addedContent(m); ok {
					for _, n := range w.needles {
						if bytes.Contains(m.Data, n) {
							a, _ := netip.AddrFromSlice(n)
							w.addLocked(ChainEvent{At: at, Table: t, Chain: AddrEvent(a)})
						}
					}
				}
			}
		}
		w.mu.Unlock()
	}
}

func (w *ChainWatcher) addLocked(e ChainEvent) {
	if len(w.events) >= maxChainEvents {
		w.events = append(w.events[:0], w.events[len(w.events)/2:]...)
	}
	w.events = append(w.events, e)
}

// AddrEvent is the chain name of the events a ChainWatcher records for rules and set elements
// that hold address a.
func AddrEvent(a netip.Addr) string { return "(rule or element with " + a.String() + ")" }

// addedContent returns the table of a NEWRULE or NEWSETELEM notification; ok is false for any
// other message.
func addedContent(m netlink.Message) (table string, ok bool) {
	if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
		return "", false
	}
	switch m.Header.Type & 0xff {
	case unix.NFT_MSG_NEWRULE, unix.NFT_MSG_NEWSETELEM:
	default:
		return "", false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return "", false
	}
	for ad.Next() {
		if ad.Type() == 1 { // NFTA_RULE_TABLE, NFTA_SET_ELEM_LIST_TABLE
			return ad.String(), true
		}
	}
	return "", false
}

// First returns the first event at or after since in table whose chain contains marker.
func (w *ChainWatcher) First(table, marker string, since time.Time) (ChainEvent, bool) {
	return w.firstOf(table, []string{marker}, since)
}

func (w *ChainWatcher) firstOf(table string, markers []string, since time.Time) (ChainEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if !e.At.Before(since) && e.Table == table && slices.ContainsFunc(markers, func(m string) bool { return strings.Contains(e.Chain, m) }) {
			return e, true
		}
	}
	return ChainEvent{}, false
}

// WaitFor waits up to timeout for an event at or after since in table whose chain contains
// marker and returns when it was read. The wait polls what the reader recorded; the time is the
// reader's.
func (w *ChainWatcher) WaitFor(ctx context.Context, table, marker string, since time.Time, timeout time.Duration) (time.Time, error) {
	return w.WaitForAny(ctx, table, []string{marker}, since, timeout)
}

// WaitForAny is WaitFor for the first event matching any of markers.
func (w *ChainWatcher) WaitForAny(ctx context.Context, table string, markers []string, since time.Time, timeout time.Duration) (time.Time, error) {
	marker := strings.Join(markers, " or ")
	deadline := time.Now().Add(timeout)
	for {
		if e, ok := w.firstOf(table, markers, since); ok {
			return e.At, nil
		}
		w.mu.Lock()
		err, overruns := w.err, w.overruns
		w.mu.Unlock()
		if err != nil {
			return time.Time{}, fmt.Errorf("nftables notifications: %w", err)
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no chain %q in table %s after %s (%d notification overruns)", marker, table, timeout, overruns)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// Close stops the watcher.
func (w *ChainWatcher) Close() error {
	w.closed.Store(true)
	err := w.conn.Close()
	<-w.done
	return err
}

// deleteTables deletes the IPv4 and IPv6 tables called name in the network namespace at
// netnsPath, if they exist: what a proxy leaves behind when it stops.
func deleteTables(netnsPath, name string) error {
	f, err := os.Open(netnsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return err
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		ts, err := c.ListTablesOfFamily(fam)
		if err != nil {
			return fmt.Errorf("listing tables in %s: %w", netnsPath, err)
		}
		for _, t := range ts {
			if t.Name == name {
				c.DelTable(t)
				if err := c.Flush(); err != nil {
					return fmt.Errorf("deleting table %s in %s: %w", name, netnsPath, err)
				}
			}
		}
	}
	return nil
}
