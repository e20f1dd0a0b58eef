package speaker

import (
	"context"
	"sync"
	"time"
)

// latestWriter writes the latest of the values it is given, from one goroutine (Run), so that the
// run loop, which must not wait on the API, only records what it wants. Update records a value and
// never blocks; changes made while a write runs coalesce into one more write.
type latestWriter[T any] struct {
	kick chan struct{} // one slot: a change not yet written

	mu sync.Mutex // guards v
	v  T
}

// writeLoop is how a latestWriter's Run writes.
type writeLoop struct {
	// backoff is how long a failed write waits to be tried again.
	backoff time.Duration
	// resync is how often the value is written again without a change (0: never).
	resync time.Duration
	// gap is the least time between two writes (0: none).
	gap time.Duration
	// report is told each write's outcome, nil when it succeeded; not once ctx has ended.
	report func(err error)
}

func newLatestWriter[T any](v T) *latestWriter[T] {
	return &latestWriter[T]{kick: make(chan struct{}, 1), v: v}
}

// Update replaces the value with what f makes of the current one (under the lock: f must not keep
// or change the old value, which a write may be reading) and asks for a write.
func (l *latestWriter[T]) Update(f func(old T) T) {
	l.mu.Lock()
	l.v = f(l.v)
	l.mu.Unlock()
	l.Poke()
}

// Latest is the value last recorded.
func (l *latestWriter[T]) Latest() T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v
}

// Poke asks for a write of the value as it is; it never blocks.
func (l *latestWriter[T]) Poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Run writes the latest value with write after each Update or Poke, after a failure once
// loop.backoff has passed, and every loop.resync, until ctx ends.
func (l *latestWriter[T]) Run(ctx context.Context, loop writeLoop, write func(ctx context.Context, v T) error) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	if loop.resync > 0 {
		timer.Reset(loop.resync)
	}
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-timer.C:
		}
		err := write(ctx, l.Latest())
		if ctx.Err() == nil {
			loop.report(err)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			timer.Reset(loop.backoff)
		case loop.resync > 0:
			timer.Reset(loop.resync)
		}
		if loop.gap > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(loop.gap):
			}
		}
	}
}
