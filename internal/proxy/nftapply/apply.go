// Package nftapply applies nftrules' transactions to the kernel, keeping what incremental syncs
// need between calls: the model last applied and the stale chains waiting to be deleted.
//
// Every transaction goes over netlink in one batch (google/nftables encodes the messages; see
// [Netlink]), which the kernel commits all or nothing: full syncs (the table, its base chains,
// fixed sets and maps, and every Service, replacing the Services a table held atomically),
// incremental syncs, and the deletion of stale chains. The proxy therefore needs no nft binary,
// and does not pay for one: `nft -f` reads the whole table before it applies even one rule
// (hundreds of milliseconds at 10,000 Services) and takes seconds to parse and resolve a full
// sync of 10,000 Services, while a netlink batch sends only what it writes.
//
// The rules' statements nftrules writes are the single source of truth: the netlink writer
// encodes the statements themselves into the expressions nft would send for their text (it reads
// no rule text), and declares sets and maps with the userdata nft writes, so that the table lists
// the same either way (the netns tests compare both, expression by expression). The DSR table
// (nftrules.WriteDSR, applied by dsrapply) goes through the same writer, a whole table per batch,
// without a Syncer (Netlink.Write; TestNetlinkDSRMatchesNFT). nft, when there
// is one, is kept as the fallback for anything the writer does not know ([Stats.Fallbacks]);
// without nft such a transaction fails with an error naming it. With nft the Syncer first checks
// that netlink sees the table nft writes (nft may run in another network namespace, as tests do
// through a wrapper): netlink must list the chains nft lists, or, in a new table, see the fixed
// objects the first full sync writes through nft (NetlinkState).
package nftapply

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"sigs.k8s.io/knftables"
)

// StaleChainDelay is how long a flushed chain waits before it is deleted: on kernels before 6.2
// a chain stays referenced for a moment after the map element pointing to it is deleted.
const StaleChainDelay = time.Second

// Syncer writes one family's rules. It is not safe for concurrent use: one goroutine (the
// proxy's sync loop) owns it.
type Syncer struct {
	nft knftables.Interface // nil: no nft; everything goes over netlink
	nl  *Netlink            // nil: every transaction runs through nft
	b   *nftrules.Builder
	now func() time.Time

	bulkNew bool // write a new table's Services over netlink (WithBulkNewTable)
	nlFull  bool // write full syncs over netlink (WithNetlinkFull)

	applied *nftrules.Model      // last model applied successfully; nil forces a full sync
	state   nftrules.State       // the Builder's State of the table (windows of dnat-endpoints)
	stale   map[string]time.Time // flushed chains and when they went stale
	stats   Stats
}

// NetlinkState says whether a Syncer writes incremental syncs over netlink.
type NetlinkState uint8

const (
	// NetlinkNone: no netlink writer is configured; every transaction runs through nft.
	NetlinkNone NetlinkState = iota
	// NetlinkUnverified: a writer is configured, but no transaction run through nft has yet
	// added a chain the writer could look for, to show that both see the same table. Until one
	// does, everything runs through nft.
	NetlinkUnverified
	// NetlinkOn: incremental syncs and stale-chain deletions go over netlink, and full syncs too
	// with WithNetlinkFull or without nft.
	NetlinkOn
	// NetlinkOff: the writer did not see the chains nft wrote (another network namespace, or no
	// permission; Stats.NetlinkOff says why); every transaction runs through nft.
	NetlinkOff
)

func (s NetlinkState) String() string {
	switch s {
	case NetlinkNone:
		return "none"
	case NetlinkUnverified:
		return "unverified"
	case NetlinkOn:
		return "on"
	case NetlinkOff:
		return "off"
	}
	return "NetlinkState(" + strconv.Itoa(int(s)) + ")"
}

// Stats counts how a Syncer's transactions reached the kernel.
type Stats struct {
	// Netlink counts transactions written over netlink: full and incremental syncs and
	// deletions of stale chains.
	Netlink int
	// Exec counts transactions run through nft: the first full sync's fixed objects (while
	// netlink is unverified), every transaction without a netlink writer, and fallbacks.
	Exec int
	// Fallbacks counts transactions that ran through nft although a netlink writer is
	// configured, by reason (including FallbackUnverified and FallbackOff). Nil if none.
	Fallbacks map[FallbackReason]int
	// NetlinkErrors counts netlink batches the kernel refused (or whose outcome is unknown); the
	// sync returned an error and the next one is full.
	NetlinkErrors int
	// NetlinkState says whether netlink is in use, and NetlinkOff why not when it is
	// NetlinkOff (it wraps ErrOtherTable).
	NetlinkState NetlinkState
	NetlinkOff   error
	// NFT is why there is no nft to fall back on (NewKernel found none, or one too old); nil if
	// there is one, or the Syncer was not made by NewKernel.
	NFT error
}

// Option configures a Syncer.
type Option func(*Syncer)

// WithNetlink writes incremental syncs and stale-chain deletions over netlink with nl; nil runs
// every transaction through nft. nl must be for the Builder's family. Netlink is used once a
// transaction run through nft has added chains and nl sees them (NetlinkState).
func WithNetlink(nl *Netlink) Option {
	return func(s *Syncer) {
		s.nl = nl
		s.stats.NetlinkState = NetlinkNone
		if nl != nil {
			s.stats.NetlinkState = NetlinkUnverified
		}
	}
}

// WithBulkNewTable makes full syncs into a table without Service chains (the first sync after
// boot, or after the table was deleted) that do not go over netlink whole (WithNetlinkFull) write
// the table's fixed objects through nft and the Services in one netlink batch (see fullNew); this
// is also how the first full sync verifies netlink. Other full syncs replace the Services in one
// nft transaction. NewKernel turns it on. Without a netlink writer it does nothing.
func WithBulkNewTable(on bool) Option {
	return func(s *Syncer) { s.bulkNew = on }
}

// WithNetlinkFull writes full syncs over netlink too, once netlink is on, in one batch (the
// table, its fixed objects and every Service), listing the table over netlink first; only what
// the writer cannot encode goes through nft. With nft, netlink is first verified (nft may run in
// another network namespace, and writing the other one would be wrong): if nft lists a table,
// netlink must list the same chains; if not, the first full sync writes the fixed objects
// through nft and netlink must see them. Without nft (New with a nil Interface) netlink is on
// from the start. NewKernel turns it on. It needs a writer for the kernel (NewNetlink); without
// one it does nothing.
func WithNetlinkFull(on bool) Option {
	return func(s *Syncer) { s.nlFull = on }
}

// New returns a Syncer that applies b's rules through nft, an Interface for b's family and table
// nftrules.TableName (knftables.New, or knftables.NewFake in tests), or nil if there is no nft:
// then everything goes over netlink (WithNetlink is needed, with a writer for the kernel), and
// what the writer cannot encode fails. now is the clock (nil: time.Now). Without options every
// transaction runs through nft.
func New(nft knftables.Interface, b *nftrules.Builder, now func() time.Time, opts ...Option) *Syncer {
	if now == nil {
		now = time.Now
	}
	s := &Syncer{nft: nft, b: b, now: now, stale: map[string]time.Time{}}
	for _, o := range opts {
		o(s)
	}
	if s.nl != nil && nft == nil {
		// Netlink writes alone: there is nothing nft wrote to check it against.
		s.stats.NetlinkState = NetlinkOn
	}
	return s
}

// fullOverNetlink reports whether full syncs (and listing the table) go over netlink.
func (s *Syncer) fullOverNetlink() bool {
	return s.nl != nil && s.stats.NetlinkState == NetlinkOn && (s.nft == nil || s.nlFull && s.nl.kernel)
}

// NewKernel returns a Syncer for the kernel's table of cfg.Family in the caller's network
// namespace: every sync over netlink (WithNetlinkFull), with the nft binary, if there is one (1.0.1
// or later), as the fallback for what the netlink writer cannot encode. opts may change that:
// WithNetlink(nil) runs everything through nft (which must then be there),
// WithNetlink(NewNetlink(family, fd)) points netlink at another namespace, WithNetlinkFull(false)
// runs full syncs through nft. It fails if cfg is invalid, or if it needs nft and there is none.
// Stats.NFT says why nft is not used, if it is not.
func NewKernel(cfg nftrules.Config, opts ...Option) (*Syncer, error) {
	b, err := nftrules.New(cfg)
	if err != nil {
		return nil, err
	}
	var nft knftables.Interface
	nftErr := error(nil)
	if k, err := knftables.New(cfg.Family, nftrules.TableName); err != nil {
		nftErr = fmt.Errorf("nftables for %s: %w", cfg.Family, err)
	} else {
		nft = k
	}
	nl, err := NewNetlink(cfg.Family, 0)
	if err != nil {
		return nil, err
	}
	s := New(nft, b, nil, append([]Option{WithNetlink(nl), WithBulkNewTable(true), WithNetlinkFull(true)}, opts...)...)
	if nft == nil && (s.nl == nil || !s.nl.kernel) {
		return nil, nftErr
	}
	s.stats.NFT = nftErr
	return s, nil
}

// Sync makes the table match m: incrementally from the last model applied, or in full (after
// listing the table to clean up leftovers) the first time, after a failure, or when full is
// true. It also deletes chains that went stale at least StaleChainDelay ago. m must not be
// modified afterwards (Incremental compares Services by pointer). On error the next Sync is a
// full one; the transaction was not applied (nft and netlink batches are atomic), unless a
// netlink batch failed only while its acknowledgements were read.
func (s *Syncer) Sync(ctx context.Context, m *nftrules.Model, full bool) (nftrules.Plan, error) {
	s.deleteStale(ctx)

	var plan nftrules.Plan
	var err error
	if s.applied == nil || full {
		var existing nftrules.Existing
		if existing, err = s.list(ctx); err != nil {
			s.applied = nil
			return plan, err
		}
		if s.stats.NetlinkState == NetlinkUnverified && s.nlFull && s.nl.kernel && len(existing.Chains) > 0 {
			// A table nft listed (a restart): netlink is on if it lists the same chains, and
			// this full sync goes over netlink rather than through nft (seconds at 10,000
			// Services).
			s.verifyListing(existing)
		}
		switch {
		case s.fullOverNetlink():
			// One netlink batch: it replaces Services that carry traffic, atomically.
			rec := &recorder{}
			plan = s.b.Full(rec, m, existing, &s.state)
			err = s.write(ctx, rec, true)
		case s.bulkNew && s.nl != nil && s.stats.NetlinkState != NetlinkOff && !slices.ContainsFunc(existing.Chains, nftrules.IsServiceChain):
			plan, err = s.fullNew(ctx, m, existing)
		default:
			// Straight into one transaction: it replaces Services that carry traffic, atomically.
			tx := s.nft.NewTransaction()
			plan = s.b.Full(tx, m, existing, &s.state)
			err = s.exec(ctx, tx)
		}
	} else {
		rec := &recorder{}
		plan = s.b.Incremental(rec, s.applied, m, &s.state)
		err = s.write(ctx, rec, !plan.Full)
	}
	if err != nil {
		s.applied = nil
		return plan, fmt.Errorf("applying %s rules (%d operations): %w", s.b.Config().Family, plan.Ops, err)
	}
	s.applied = m
	if s.stats.NetlinkState == NetlinkUnverified && len(plan.AddedChains) > 0 {
		// This transaction ran through nft: check that netlink sees what it wrote.
		s.verifyNetlink(plan.AddedChains)
	}
	now := s.now()
	for _, c := range plan.AddedChains {
		delete(s.stale, c)
	}
	for _, c := range plan.StaleChains {
		s.stale[c] = now
	}
	return plan, nil
}

// fullNew writes a full sync into a table that has no Service chains (a new table, or one whose
// Services never reached it): the table and its fixed objects through nft, then the Services in
// one netlink batch, which costs a fraction of what nft takes to parse and resolve them (seconds
// at 10,000 Services). The two steps are not one transaction, which does not matter here: no
// Service had rules before. If netlink is unverified, the first step shows whether it sees the
// table nft wrote; if it does not, or the writer cannot translate an operation, the Services go
// through nft as well.
func (s *Syncer) fullNew(ctx context.Context, m *nftrules.Model, existing nftrules.Existing) (nftrules.Plan, error) {
	base, svcs := &recorder{}, &recorder{}
	plan := s.b.FullSplit(base, svcs, m, existing, &s.state)
	tx := s.nft.NewTransaction()
	base.replay(tx)
	if err := s.exec(ctx, tx); err != nil {
		return plan, err
	}
	if s.stats.NetlinkState == NetlinkUnverified {
		var chains []string
		for _, o := range base.ops {
			if c, ok := o.obj.(*knftables.Chain); ok && o.verb == verbAdd {
				chains = append(chains, c.Name)
			}
		}
		s.verifyNetlink(chains)
	}
	// Netlink is now on or off: the Services go over it if it is on and can translate them.
	return plan, s.write(ctx, svcs, true)
}

// verifyListing turns netlink on if it lists the same chains as nft did (existing), which is not
// empty; otherwise it leaves netlink unverified, for verifyNetlink to settle.
func (s *Syncer) verifyListing(existing nftrules.Existing) {
	ex, err := s.nl.list()
	if err != nil || len(ex.Chains) != len(existing.Chains) {
		return
	}
	a, b := slices.Sorted(slices.Values(ex.Chains)), slices.Sorted(slices.Values(existing.Chains))
	if slices.Equal(a, b) {
		s.stats.NetlinkState = NetlinkOn
	}
}

// verifyNetlink turns netlink on if it sees chains, which a transaction run through nft added, and
// off (saying why) if it does not.
func (s *Syncer) verifyNetlink(chains []string) {
	if err := s.nl.verify(chains); err != nil {
		s.stats.NetlinkState, s.stats.NetlinkOff = NetlinkOff, err
	} else {
		s.stats.NetlinkState = NetlinkOn
	}
}

// write applies recorded operations: over netlink in one batch if viaNetlink (incremental syncs,
// deletions of stale chains, the Services of a new table), a netlink writer is configured, netlink
// is on and it can translate them all; else through nft, counting the fallback when a writer is
// configured.
func (s *Syncer) write(ctx context.Context, rec *recorder, viaNetlink bool) error {
	if len(rec.ops) == 0 {
		return nil
	}
	if viaNetlink && s.nl != nil {
		reason := FallbackOff
		switch s.stats.NetlinkState {
		case NetlinkUnverified:
			reason = FallbackUnverified
		case NetlinkOn:
			cmds, err := s.nl.translate(rec.ops)
			if err == nil {
				if err := s.nl.applyBulk(cmds); err != nil {
					s.stats.NetlinkErrors++
					return err
				}
				s.stats.Netlink++
				return nil
			}
			var u *UnsupportedError
			if !errors.As(err, &u) {
				return err
			}
			if s.nft == nil {
				return fmt.Errorf("no nft to fall back on: %w", err)
			}
			reason = u.Reason
		}
		if s.stats.Fallbacks == nil {
			s.stats.Fallbacks = map[FallbackReason]int{}
		}
		s.stats.Fallbacks[reason]++
	}
	if s.nft == nil {
		return errors.New("no nft, and netlink is not on")
	}
	tx := s.nft.NewTransaction()
	rec.replay(tx)
	return s.exec(ctx, tx)
}

// exec runs tx through nft.
func (s *Syncer) exec(ctx context.Context, tx *knftables.Transaction) error {
	if tx.NumOperations() == 0 {
		return nil
	}
	if s.nft == nil {
		return errors.New("no nft, and netlink is not on")
	}
	s.stats.Exec++
	return s.nft.Run(ctx, tx)
}

// Close releases the netlink socket the Syncer keeps between syncs, if any. The Syncer can still
// be used; the next netlink batch opens another.
func (s *Syncer) Close() error {
	if s.nl == nil {
		return nil
	}
	return s.nl.Close()
}

// Stats returns how the Syncer's transactions have reached the kernel so far.
func (s *Syncer) Stats() Stats {
	st := s.stats
	st.Fallbacks = maps.Clone(st.Fallbacks)
	return st
}

// Pending returns the number of stale chains waiting to be deleted.
func (s *Syncer) Pending() int { return len(s.stale) }

func (s *Syncer) deleteStale(ctx context.Context) {
	cutoff := s.now().Add(-StaleChainDelay)
	var chains []string
	for c, t := range s.stale {
		if !t.After(cutoff) {
			chains = append(chains, c)
		}
	}
	if len(chains) == 0 {
		return
	}
	rec := &recorder{}
	nftrules.DeleteChains(rec, chains)
	for _, c := range chains {
		delete(s.stale, c)
	}
	if err := s.write(ctx, rec, true); err != nil {
		// Some chain is still referenced or already gone: let a full sync list and clean up.
		s.applied = nil
	}
}

// list returns the chains, sets and maps the table holds; none if it does not exist. It reads
// them over netlink when full syncs go over netlink, else through nft.
func (s *Syncer) list(ctx context.Context) (nftrules.Existing, error) {
	var ex nftrules.Existing
	if s.fullOverNetlink() {
		return s.nl.list()
	}
	if s.nft == nil {
		return ex, errors.New("no nft, and netlink is not on")
	}
	chains, err := s.nft.List(ctx, "chains")
	if err != nil {
		if knftables.IsNotFound(err) {
			return ex, nil
		}
		return ex, fmt.Errorf("listing %s chains: %w", s.b.Config().Family, err)
	}
	sets, err := s.nft.List(ctx, "sets")
	if err != nil && !knftables.IsNotFound(err) {
		return ex, fmt.Errorf("listing %s sets: %w", s.b.Config().Family, err)
	}
	maps, err := s.nft.List(ctx, "maps")
	if err != nil && !knftables.IsNotFound(err) {
		return ex, fmt.Errorf("listing %s maps: %w", s.b.Config().Family, err)
	}
	ex.Chains, ex.Sets, ex.Maps = chains, sets, maps
	return ex, nil
}

// CleanupKernel deletes family's table in the caller's network namespace over netlink (on
// shutdown with --cleanup, or when switching back to kube-proxy): no nft needed. A missing table
// is not an error.
func CleanupKernel(family knftables.Family) error {
	nl, err := NewNetlink(family, 0)
	if err != nil {
		return err
	}
	defer nl.Close()
	if err := nl.deleteTable(); err != nil {
		return fmt.Errorf("deleting table %s %s: %w", family, nftrules.TableName, err)
	}
	return nil
}

// Cleanup deletes the table through nft. A missing table is not an error.
func Cleanup(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting table %s: %w", nftrules.TableName, err)
	}
	return nil
}
