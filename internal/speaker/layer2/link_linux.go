package layer2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vishvananda/netlink"
)

// linkResubscribe is how long WatchLink waits before subscribing again after its subscription
// failed (a netlink socket overrun or error).
const linkResubscribe = time.Second

// WatchLink follows the interface named name and calls fn with its state: once when it starts, then
// at every change (deleted, renamed, created again, down, up, carrier lost or back), until ctx ends;
// then it returns nil. It subscribes to the kernel's link notifications (netlink RTNLGRP_LINK) in
// the network namespace of the calling thread, and looks the link up by name after each
// subscription, so that a lost subscription (reported to log, retried after a second) never leaves
// a stale state. fn is called from WatchLink's goroutine and must not block. It returns an error only
// if the first subscription fails.
func WatchLink(ctx context.Context, name string, fn func(LinkState), log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := newLinkTracker(name)
	for first := true; ; first = false {
		err := watchOnce(ctx, t, fn)
		if ctx.Err() != nil {
			return nil
		}
		if first && err != nil {
			return fmt.Errorf("watching link %s: %w", name, err)
		}
		log.Warn("link subscription lost; subscribing again", "iface", name, "err", err, "after", linkResubscribe)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(linkResubscribe):
		}
	}
}

// watchOnce subscribes, seeds the tracker and follows notifications until ctx ends or the
// subscription fails.
func watchOnce(ctx context.Context, t *linkTracker, fn func(LinkState)) error {
	ch := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	errc := make(chan error, 1)
	opts := netlink.LinkSubscribeOptions{ErrorCallback: func(err error) {
		select {
		case errc <- err:
		default:
		}
	}}
	if err := netlink.LinkSubscribeWithOptions(ch, done, opts); err != nil {
		close(done)
		return err
	}
	defer func() {
		close(done)
		for range ch { // the subscription's goroutine closes ch once its socket is closed
		}
	}()
	// Subscribed first, looked up second: a change between the two is seen as a notification.
	l, err := netlink.LinkByName(t.name)
	var nf netlink.LinkNotFoundError
	switch {
	case err == nil:
		emit(fn)(t.seed(true, l.Attrs().Index, l.Attrs().RawFlags))
	case errors.As(err, &nf):
		emit(fn)(t.seed(false, 0, 0))
	default:
		return fmt.Errorf("looking up %s: %w", t.name, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case u, ok := <-ch:
			if !ok {
				return errors.New("subscription closed")
			}
			a := u.Link.Attrs()
			emit(fn)(t.update(u.Header.Type, a.Index, a.Name, a.RawFlags))
		}
	}
}

// emit returns a function that calls fn with a state when it changed.
func emit(fn func(LinkState)) func(LinkState, bool) {
	return func(s LinkState, changed bool) {
		if changed {
			fn(s)
		}
	}
}
