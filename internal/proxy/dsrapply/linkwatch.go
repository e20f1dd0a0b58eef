package dsrapply

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// routeLinks are the links the DSR routes go out of (Applier.RouteLinks). The applier is owned by
// the sync loop; the link watcher reads these from its own goroutine.
type routeLinks struct {
	mu  sync.Mutex
	idx map[int]bool
}

func (r *routeLinks) add(i int) {
	if i <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idx == nil {
		r.idx = map[int]bool{}
	}
	r.idx[i] = true
}

// RouteLinks returns the indexes of the links any DSR route was written through (the links that
// reach the peer nodes, and the vxlan device), sorted. Safe to call from another goroutine.
func (a *Applier) RouteLinks() []int {
	a.links.mu.Lock()
	defer a.links.mu.Unlock()
	out := make([]int, 0, len(a.links.idx))
	for i := range a.links.idx {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// WatchLinks calls up each time a link among links() comes up (administratively up and running
// after it was not, or first seen so), until ctx ends; ns is the network namespace to watch (nil:
// the calling thread's).
//
// Why: a link set down takes the routes through it with it, the DSR tables' routes to the peers
// among them (the kernel deletes them; a carrier loss alone does not). The sync that runs meanwhile
// fails to write them again ("network is unreachable") and is retried with a back-off of up to
// seconds, during which forwarded flows have no route (the chaos soak's responder-iface fault: 2 s
// after the link came back). A link that comes back without any sync in between (a short flap)
// would keep its routes missing until the next sync, up to the full resync period. The proxy
// syncs at once on up instead.
func WatchLinks(ctx context.Context, ns *netns.NsHandle, links func() []int, up func()) error {
	ch := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	errs := make(chan error, 1)
	opts := netlink.LinkSubscribeOptions{Namespace: ns, ErrorCallback: func(err error) {
		select {
		case errs <- err:
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
	running := map[int]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case u, ok := <-ch:
			if !ok {
				return errors.New("link updates ended")
			}
			i := int(u.Index)
			now := u.Flags&unix.IFF_UP != 0 && u.Flags&unix.IFF_RUNNING != 0
			if now && !running[i] && slices.Contains(links(), i) {
				up()
			}
			running[i] = now
		}
	}
}
