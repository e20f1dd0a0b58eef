// Package nftapply applies nftrules' transactions to the kernel through knftables (which runs
// `nft -f -`), keeping what incremental syncs need between calls: the model last applied and the
// stale chains waiting to be deleted.
package nftapply

import (
	"context"
	"fmt"
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
	nft knftables.Interface
	b   *nftrules.Builder
	now func() time.Time

	applied *nftrules.Model      // last model applied successfully; nil forces a full sync
	stale   map[string]time.Time // flushed chains and when they went stale
}

// New returns a Syncer that applies b's rules through nft, an Interface for b's family and table
// nftrules.TableName (knftables.New, or knftables.NewFake in tests). now is the clock (nil:
// time.Now).
func New(nft knftables.Interface, b *nftrules.Builder, now func() time.Time) *Syncer {
	if now == nil {
		now = time.Now
	}
	return &Syncer{nft: nft, b: b, now: now, stale: map[string]time.Time{}}
}

// NewKernel returns a Syncer for the kernel's table of cfg.Family, via the nft binary. It fails if
// cfg is invalid or nft is missing or older than 1.0.1.
func NewKernel(cfg nftrules.Config) (*Syncer, error) {
	b, err := nftrules.New(cfg)
	if err != nil {
		return nil, err
	}
	nft, err := knftables.New(cfg.Family, nftrules.TableName)
	if err != nil {
		return nil, fmt.Errorf("nftables for %s: %w", cfg.Family, err)
	}
	return New(nft, b, nil), nil
}

// Sync makes the table match m: incrementally from the last model applied, or in full (after
// listing the table to clean up leftovers) the first time, after a failure, or when full is
// true. It also deletes chains that went stale at least StaleChainDelay ago. m must not be
// modified afterwards (Incremental compares Services by pointer). On error nothing of the
// transaction was applied, and the next Sync is a full one.
func (s *Syncer) Sync(ctx context.Context, m *nftrules.Model, full bool) (nftrules.Plan, error) {
	s.deleteStale(ctx)

	tx := s.nft.NewTransaction()
	var plan nftrules.Plan
	if s.applied == nil || full {
		existing, err := s.list(ctx)
		if err != nil {
			s.applied = nil
			return plan, err
		}
		plan = s.b.Full(tx, m, existing)
	} else {
		plan = s.b.Incremental(tx, s.applied, m)
	}
	if tx.NumOperations() > 0 {
		if err := s.nft.Run(ctx, tx); err != nil {
			s.applied = nil
			return plan, fmt.Errorf("applying %s rules (%d operations): %w", s.b.Config().Family, tx.NumOperations(), err)
		}
	}
	s.applied = m
	now := s.now()
	for _, c := range plan.AddedChains {
		delete(s.stale, c)
	}
	for _, c := range plan.StaleChains {
		s.stale[c] = now
	}
	return plan, nil
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
	tx := s.nft.NewTransaction()
	nftrules.DeleteChains(tx, chains)
	for _, c := range chains {
		delete(s.stale, c)
	}
	if err := s.nft.Run(ctx, tx); err != nil {
		// Some chain is still referenced or already gone: let a full sync list and clean up.
		s.applied = nil
	}
}

// list returns the chains, sets and maps the table holds; none if it does not exist.
func (s *Syncer) list(ctx context.Context) (nftrules.Existing, error) {
	var ex nftrules.Existing
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

// Cleanup deletes the table (on shutdown with --cleanup, or when switching back to kube-proxy).
// A missing table is not an error.
func Cleanup(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting table %s: %w", nftrules.TableName, err)
	}
	return nil
}
