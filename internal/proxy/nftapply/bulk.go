package nftapply

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// applyBulk sends cmds in one batch like apply, but cheaply enough for a whole table of
// Services (hundreds of thousands of messages at 30,000 Services). google/nftables asks the
// kernel to acknowledge every message, and to echo every rule back, and reads each answer with
// its own recvmsg: seconds at that size. applyBulk lets google/nftables encode the messages (into
// a capturing connection), clears those flags, asks for the acknowledgement of the last message
// only, and sends the batch in one sendmsg on a socket whose buffers fit it, as nft does. The
// kernel processes a batch within sendmsg and reports every refused message, then the last
// message's acknowledgement: the batch committed if no error came before it. Incremental syncs
// use it too: a handful of messages, but one recvmsg instead of one per message and rule echo.
//
// The socket stays open for the next batch (Close closes it): closing a netfilter socket right
// after a commit waits for the kernel to release what the commit replaced, an RCU grace period
// (4-5 ms, as much as the commit of an endpoint change). A batch that fails closes it.
func (n *Netlink) applyBulk(cmds []command) (err error) {
	if !n.kernel {
		return n.apply(cmds)
	}
	if len(cmds) == 0 {
		return nil
	}
	msgs, err := capture(cmds)
	if err != nil {
		return err
	}
	if len(msgs) < 3 { // batch begin, at least one message, batch end
		return fmt.Errorf("netlink batch: %d messages encoded for %d commands", len(msgs), len(cmds))
	}
	// One buffer, sized up front: mdlayher/netlink's SendMessages grows its buffer message by
	// message, which cost more than the rest of the encoding at 10,000 Services.
	size := 0
	for i := range msgs {
		size += nlmsgAlign(unix.NLMSG_HDRLEN + len(msgs[i].Data))
	}
	buf := make([]byte, 0, size)
	lastSeq := uint32(0)
	for i := range msgs {
		m := &msgs[i]
		flags := m.Header.Flags &^ (netlink.Acknowledge | unix.NLM_F_ECHO)
		if i == len(msgs)-2 { // the last message before batch end
			flags |= netlink.Acknowledge
			lastSeq = uint32(i + 1)
		}
		l := unix.NLMSG_HDRLEN + len(m.Data)
		buf = binary.NativeEndian.AppendUint32(buf, uint32(l))
		buf = binary.NativeEndian.AppendUint16(buf, uint16(m.Header.Type))
		buf = binary.NativeEndian.AppendUint16(buf, uint16(flags))
		buf = binary.NativeEndian.AppendUint32(buf, n.seq+uint32(i+1)) // sequence
		buf = binary.NativeEndian.AppendUint32(buf, 0)                 // port ID: the kernel knows the socket's
		buf = append(buf, m.Data...)
		buf = append(buf, make([]byte, nlmsgAlign(l)-l)...)
	}

	if n.conn == nil {
		if n.conn, err = netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: n.netns}); err != nil {
			return fmt.Errorf("opening nftables netlink: %w", err)
		}
	}
	c := n.conn
	defer func() {
		if err != nil { // unread answers may be left: start afresh
			n.Close()
		}
	}()
	// Room for the batch (SO_SNDBUFFORCE: the batch is one datagram, over net.core.wmem_max),
	// and for error messages, which quote the refused message.
	if err := forceBuffers(c, size+(64<<10), min(size, 64<<20)+(1<<20)); err != nil {
		return err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return true
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("netlink batch of %d messages (%d bytes): %w", len(msgs)-2, size, serr)
	}
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	lastSeq += n.seq // sequence numbers go on from batch to batch on one socket
	defer func() { n.seq += uint32(len(msgs)) }()
	var refused []error
	for {
		replies, err := c.Receive()
		if err != nil {
			return fmt.Errorf("netlink batch of %d messages: %w", len(msgs)-2, errors.Join(append(refused, err)...))
		}
		for _, r := range replies {
			if r.Header.Type != netlink.Error || len(r.Data) < 4 {
				continue
			}
			if errno := int32(binary.NativeEndian.Uint32(r.Data[:4])); errno != 0 {
				refused = append(refused, fmt.Errorf("message %d: %w", r.Header.Sequence, syscall.Errno(-errno)))
			}
			// The batch itself refused (its begin message): nothing else comes.
			if r.Header.Sequence == lastSeq || r.Header.Sequence == n.seq+1 && len(refused) > 0 {
				if len(refused) > 0 {
					return fmt.Errorf("netlink batch of %d messages: %w", len(msgs)-2, firstError(errors.Join(refused...)))
				}
				return nil
			}
		}
	}
}

// capture returns the messages google/nftables encodes for cmds, batch begin and end included,
// without sending them, with the userdata of tables and sets as nft writes it (command.udata).
func capture(cmds []command) ([]netlink.Message, error) {
	var out []netlink.Message
	ack := netlink.Message{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4+unix.NLMSG_HDRLEN)}
	c, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		if req == nil { // a read: every message's acknowledgement, one at a time
			return []netlink.Message{ack}, nil
		}
		out = append(out, req...)
		return nil, nil
	}))
	if err != nil {
		return nil, err
	}
	if err := encode(c, cmds); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("encoding a netlink batch: %w", err)
	}
	if err := setUserdata(out, cmds); err != nil {
		return nil, err
	}
	return out, nil
}

// setUserdata writes the userdata of cmds' tables and sets (by set ID) into their messages,
// replacing what google/nftables wrote (it knows set comments and key byte orders, not typeof,
// and no table userdata).
func setUserdata(msgs []netlink.Message, cmds []command) error {
	var table []byte
	sets, open := map[uint32][]byte{}, map[uint32][]byte{}
	chains := map[string][]byte{}
	for i := range cmds {
		switch c := &cmds[i]; {
		case c.kind == cmdAddTable && c.udata != nil:
			table = c.udata
		case c.kind == cmdAddChain && c.udata != nil:
			chains[c.chain.Name] = c.udata
		case c.kind == cmdAddSet && c.udata != nil:
			sets[c.set.ID] = c.udata
			if c.open != nil {
				open[c.set.ID] = c.open
			}
		}
	}
	if table == nil && len(sets) == 0 && len(chains) == 0 {
		return nil
	}
	const (
		newChain   = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWCHAIN
		newTable   = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWTABLE
		newSet     = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSET
		newSetElem = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM
	)
	for i := range msgs {
		m := &msgs[i]
		var ud []byte
		var udType uint16
		switch m.Header.Type {
		case newTable:
			ud, udType = table, nftaTableUserdata
		case newSet:
			udType = unix.NFTA_SET_USERDATA
		case newChain:
			if len(chains) == 0 {
				continue
			}
			udType = nftaChainUserdata
		case newSetElem:
			if len(open) > 0 {
				if err := markOpen(m, open); err != nil {
					return fmt.Errorf("netlink message %d: %w", i, err)
				}
			}
			continue
		default:
			continue
		}
		if len(m.Data) < 4 {
			return fmt.Errorf("netlink message %d: %d bytes", i, len(m.Data))
		}
		attrs, err := netlink.UnmarshalAttributes(m.Data[4:])
		if err != nil {
			return fmt.Errorf("netlink message %d: %w", i, err)
		}
		switch m.Header.Type {
		case newSet:
			for _, a := range attrs {
				if a.Type == unix.NFTA_SET_ID && len(a.Data) == 4 {
					ud = sets[binary.BigEndian.Uint32(a.Data)]
				}
			}
		case newChain:
			for _, a := range attrs {
				if a.Type == unix.NFTA_CHAIN_NAME {
					ud = chains[strings.TrimSuffix(string(a.Data), "\x00")]
				}
			}
		}
		if ud == nil {
			continue
		}
		attrs = slices.DeleteFunc(attrs, func(a netlink.Attribute) bool { return a.Type == udType })
		attrs = append(attrs, netlink.Attribute{Type: udType, Data: ud})
		b, err := netlink.MarshalAttributes(attrs)
		if err != nil {
			return fmt.Errorf("netlink message %d: %w", i, err)
		}
		m.Data = append(m.Data[:4:4], b...)
	}
	return nil
}

// markOpen gives the element of a NEWSETELEM message that starts an interval without end (open,
// by set ID) the userdata nft gives it.
func markOpen(m *netlink.Message, open map[uint32][]byte) error {
	const nested = unix.NLA_F_NESTED
	attrs, err := netlink.UnmarshalAttributes(m.Data[4:])
	if err != nil {
		return err
	}
	var key []byte
	for _, a := range attrs {
		if a.Type&^nested == unix.NFTA_SET_ELEM_LIST_SET_ID && len(a.Data) == 4 {
			key = open[binary.BigEndian.Uint32(a.Data)]
		}
	}
	if key == nil {
		return nil
	}
	for i := range attrs {
		if attrs[i].Type&^nested != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			continue
		}
		list, err := netlink.UnmarshalAttributes(attrs[i].Data)
		if err != nil {
			return err
		}
		for j := range list {
			item, err := netlink.UnmarshalAttributes(list[j].Data)
			if err != nil {
				return err
			}
			match, end := false, false
			for _, a := range item {
				switch a.Type &^ nested {
				case unix.NFTA_SET_ELEM_KEY:
					k, err := netlink.UnmarshalAttributes(a.Data)
					if err != nil {
						return err
					}
					match = len(k) == 1 && slices.Equal(k[0].Data, key)
				case unix.NFTA_SET_ELEM_FLAGS:
					end = len(a.Data) == 4 && binary.BigEndian.Uint32(a.Data)&unix.NFT_SET_ELEM_INTERVAL_END != 0
				}
			}
			if !match || end {
				continue
			}
			item = append(item, netlink.Attribute{Type: unix.NFTA_SET_ELEM_USERDATA, Data: openElemUdata})
			// Length 0: MarshalAttributes keeps an attribute's length unless it is 0.
			if list[j].Data, err = netlink.MarshalAttributes(item); err != nil {
				return err
			}
			list[j].Length = 0
		}
		if attrs[i].Data, err = netlink.MarshalAttributes(list); err != nil {
			return err
		}
		attrs[i].Length = 0
	}
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return err
	}
	m.Data = append(m.Data[:4:4], b...)
	return nil
}

// NFTA_TABLE_USERDATA and NFTA_CHAIN_USERDATA (x/sys/unix does not name them).
const (
	nftaTableUserdata = 6
	nftaChainUserdata = 12
)

func nlmsgAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// forceBuffers sets a socket's send and receive buffers beyond the system's maximums (root, or
// CAP_NET_ADMIN).
func forceBuffers(c *netlink.Conn, snd, rcv int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, snd); serr != nil {
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcv)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("netlink socket buffers: %w", serr)
	}
	return nil
}

// Close closes the netlink socket kept between batches, if any; the next batch opens another.
func (n *Netlink) Close() error {
	if n.conn == nil {
		return nil
	}
	err := n.conn.Close()
	n.conn, n.seq = nil, 0
	return err
}
