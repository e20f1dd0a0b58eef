package conntrack

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/proxy/nftrules"
)

// Netlink deletes entries over netlink (NETLINK_NETFILTER), as kube-proxy does since v1.32
// (pkg/proxy/conntrack with vishvananda/netlink's filters): no conntrack tool in the image, no
// process per filter, and DeleteAll matches a whole batch of filters against one dump of the
// table, where `conntrack -D` reads the table once for each.
type Netlink struct {
	h *netlink.Handle
}

// NewNetlink opens a netfilter netlink socket in the current network namespace.
func NewNetlink() (*Netlink, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("%w: netlink socket: %w", ErrConntrack, err)
	}
	return &Netlink{h: h}, nil
}

// NewNetlinkAt opens a netfilter netlink socket in the network namespace ns (tests).
func NewNetlinkAt(ns netns.NsHandle) (*Netlink, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("%w: netlink socket: %w", ErrConntrack, err)
	}
	return &Netlink{h: h}, nil
}

// Close releases the socket.
func (n *Netlink) Close() { n.h.Close() }

// Delete deletes the entries f selects.
func (n *Netlink) Delete(ctx context.Context, f Filter) (int, error) {
	return n.DeleteAll(ctx, []Filter{f})
}

// DeleteAll deletes the entries any of fs selects, reading each family's table once, and returns
// how many it deleted.
func (n *Netlink) DeleteAll(_ context.Context, fs []Filter) (int, error) {
	byFamily := map[netlink.InetFamily][]netlink.CustomConntrackFilter{}
	var errs []error
	for _, f := range fs {
		nf, err := f.netlink()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fam := netlink.InetFamily(unix.AF_INET)
		if f.IPv6 {
			fam = unix.AF_INET6
		}
		byFamily[fam] = append(byFamily[fam], nf)
	}
	total := 0
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		if len(byFamily[fam]) == 0 {
			continue
		}
		deleted, err := n.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, byFamily[fam]...)
		total += int(deleted)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: deleting over netlink: %w", ErrConntrack, err))
		}
	}
	return total, errors.Join(errs...)
}

// markFilter is a ConntrackFilter that also wants the entry's mark (vishvananda/netlink's filter
// has no mark field; its dump parses the mark into the flow).
type markFilter struct {
	*netlink.ConntrackFilter
	mark uint32
}

func (m markFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	return flow.Mark == m.mark && m.ConntrackFilter.MatchConntrackFlow(flow)
}

// netlink converts f into vishvananda/netlink's filter.
func (f Filter) netlink() (netlink.CustomConntrackFilter, error) {
	nf := &netlink.ConntrackFilter{}
	var proto uint8
	switch f.Protocol {
	case nftrules.TCP:
		proto = unix.IPPROTO_TCP
	case nftrules.UDP:
		proto = unix.IPPROTO_UDP
	case nftrules.SCTP:
		proto = unix.IPPROTO_SCTP
	default:
		return nil, fmt.Errorf("%w %s: unknown protocol %q", ErrConntrack, f, f.Protocol)
	}
	if err := nf.AddProtocol(proto); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrConntrack, f, err)
	}
	if f.OrigDst.IsValid() {
		if err := nf.AddIP(netlink.ConntrackOrigDstIP, net.IP(f.OrigDst.AsSlice())); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrConntrack, f, err)
		}
	}
	if f.DPort != 0 {
		if err := nf.AddPort(netlink.ConntrackOrigDstPort, f.DPort); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrConntrack, f, err)
		}
	}
	if f.ReplySrc.IsValid() {
		if err := nf.AddIP(netlink.ConntrackReplySrcIP, net.IP(f.ReplySrc.AsSlice())); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrConntrack, f, err)
		}
	}
	if f.Mark != 0 {
		return markFilter{nf, f.Mark}, nil
	}
	return nf, nil
}
