package nftapply

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// Conn is the part of *nftables.Conn the netlink writer uses. Calls buffer messages; Flush sends
// them to the kernel as one batch, which commits all or nothing.
type Conn interface {
	AddTable(*nftables.Table) *nftables.Table
	DelTable(*nftables.Table)
	AddChain(*nftables.Chain) *nftables.Chain
	FlushChain(*nftables.Chain)
	DelChain(*nftables.Chain)
	AddRule(*nftables.Rule) *nftables.Rule
	AddSet(*nftables.Set, []nftables.SetElement) error
	FlushSet(*nftables.Set)
	DelSet(*nftables.Set)
	SetAddElements(*nftables.Set, []nftables.SetElement) error
	SetDeleteElements(*nftables.Set, []nftables.SetElement) error
	Flush() error
	// ListChain asks the kernel for one chain (not batched).
	ListChain(*nftables.Table, string) (*nftables.Chain, error)
}

var _ Conn = (*nftables.Conn)(nil)

// Netlink writes a transaction's operations to one family's table over netlink, in one batch,
// without running nft. `nft -f` reads the whole table before it applies anything (to resolve the
// chains and sets the new rules name), so its cost grows with the number of Services; a netlink
// batch sends only what changes. What still grows with the table is the kernel's own check of
// the jump graph: a batch that adds a rule, or a map element that jumps to a chain, makes the
// kernel (6.18 at least) validate every chain reachable from each base chain at commit:
// tens of milliseconds at 10,000 Services, half of it for each of the two base chains that jump
// into `services` (nat-prerouting, nat-output).
//
// It handles every operation nftrules writes into its tables, full syncs included, and the whole
// DSR table nftrules.WriteDSR writes (NewNetlinkTable, Write: dsrapply's path, with no nft at
// all) (see translate.go, rules.go and typeof.go); a transaction with anything else is refused with an
// *UnsupportedError, and the Syncer runs it through nft, or fails without nft. The userdata that
// makes sets list as nft declares them (typeof) and the table's comment are written only by a
// writer for the kernel (NewNetlink: see capture); NewNetlinkConn's Conn gets everything else.
type Netlink struct {
	t    *translator
	dial func() (Conn, error)
	// kernel: the writer speaks to the kernel of namespace netns (NewNetlink), and applyBulk
	// sends its own batch; otherwise (NewNetlinkConn) applyBulk is apply.
	kernel bool
	netns  int
	// conn is the socket applyBulk keeps between batches (nil: none open), seq the sequence
	// number of its last message.
	conn *netlink.Conn
	seq  uint32
}

// NewNetlink returns a writer for the table nftrules.TableName of family in the network
// namespace netns: an open file descriptor of a namespace (such as /run/netns/NAME), or 0 for the
// namespace of the calling thread. It opens no socket until it writes. It fails if family is
// neither ip nor ip6.
func NewNetlink(family knftables.Family, netns int) (*Netlink, error) {
	return NewNetlinkTable(family, nftrules.TableName, netns)
}

// NewNetlinkTable is NewNetlink for the table named table (dsrapply writes the DSR table,
// nftrules.DSRTableName, with it: see Write).
func NewNetlinkTable(family knftables.Family, table string, netns int) (*Netlink, error) {
	t, err := newTranslator(family, table)
	if err != nil {
		return nil, err
	}
	n := &Netlink{t: t, dial: func() (Conn, error) {
		c, err := nftables.New(nftables.WithNetNSFd(netns))
		if err != nil {
			return nil, fmt.Errorf("opening nftables netlink: %w", err)
		}
		return c, nil
	}}
	n.kernel, n.netns = true, netns
	return n, nil
}

// NewNetlinkConn is NewNetlink with a Conn factory: dial is called once per batch, and the Conn
// it returns is used for that batch only (so a batch that fails half-built leaves nothing
// buffered for the next one). Tests pass fakes.
func NewNetlinkConn(family knftables.Family, dial func() (Conn, error)) (*Netlink, error) {
	t, err := newTranslator(family, nftrules.TableName)
	if err != nil {
		return nil, err
	}
	return &Netlink{t: t, dial: dial}, nil
}

// ErrOtherTable is wrapped by errors of the check that the netlink writer sees the table nft
// wrote: it does not, so the two address different network namespaces (for example nft runs
// through a wrapper that enters another namespace).
var ErrOtherTable = errors.New("netlink does not see the table nft wrote")

// verify checks that netlink sees chains nft just wrote: a few of them, spread over the list.
func (n *Netlink) verify(chains []string) error {
	c, err := n.dial()
	if err != nil {
		return err
	}
	for _, i := range []int{0, len(chains) / 2, len(chains) - 1} {
		if _, err := c.ListChain(n.t.table, chains[i]); err != nil {
			return fmt.Errorf("%w: chain %s: %w", ErrOtherTable, chains[i], err)
		}
	}
	return nil
}

// translate returns the batch for ops without sending anything, or an *UnsupportedError.
func (n *Netlink) translate(ops []op) ([]command, error) { return n.t.translate(ops) }

// apply sends cmds in one batch. If it fails, the kernel applied none of it, unless the error
// arose after the kernel committed (reading its acknowledgements): then the state is unknown.
func (n *Netlink) apply(cmds []command) error {
	if len(cmds) == 0 {
		return nil
	}
	c, err := n.dial()
	if err != nil {
		return err
	}
	if err := encode(c, cmds); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netlink batch of %d messages: %w", len(cmds), firstError(err))
	}
	return nil
}

// encode buffers cmds on c.
func encode(c Conn, cmds []command) error {
	var err error
	for i := range cmds {
		cmd := &cmds[i]
		switch cmd.kind {
		case cmdAddChain:
			c.AddChain(cmd.chain)
		case cmdFlushChain:
			c.FlushChain(cmd.chain)
		case cmdDelChain:
			c.DelChain(cmd.chain)
		case cmdAddRule:
			c.AddRule(cmd.rule)
		case cmdAddTable:
			c.AddTable(cmd.table)
		case cmdDelTable:
			c.DelTable(cmd.table)
		case cmdAddSet:
			err = c.AddSet(cmd.set, cmd.elems)
		case cmdFlushSet:
			c.FlushSet(cmd.set)
		case cmdDelSet:
			c.DelSet(cmd.set)
		case cmdAddElems:
			err = c.SetAddElements(cmd.set, cmd.elems)
		case cmdDelElems:
			err = c.SetDeleteElements(cmd.set, cmd.elems)
		}
		if err != nil {
			return fmt.Errorf("encoding netlink message %d: %w", i, err)
		}
	}
	return nil
}

// firstError shortens the error Flush returns, one (nested) joined error per refused message,
// all alike when the kernel aborts the batch, to the first one and a count.
func firstError(err error) error {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return err
	}
	var flat []error
	var walk func(errs []error)
	walk = func(errs []error) {
		for _, e := range errs {
			if j, ok := e.(interface{ Unwrap() []error }); ok {
				walk(j.Unwrap())
			} else {
				flat = append(flat, e)
			}
		}
	}
	walk(joined.Unwrap())
	switch len(flat) {
	case 0:
		return err
	case 1:
		return flat[0]
	}
	return fmt.Errorf("%w (and %d more errors)", flat[0], len(flat)-1)
}

// list returns the chains, sets and maps (anonymous sets left out) of the writer's table, none
// if the table does not exist: what knftables lists through nft, read over netlink. Only a
// writer for the kernel (NewNetlink) lists.
func (n *Netlink) list() (nftrules.Existing, error) {
	var ex nftrules.Existing
	if !n.kernel {
		return ex, errors.New("netlink writer: listing needs the kernel (NewNetlink)")
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: n.netns})
	if err != nil {
		return ex, fmt.Errorf("opening nftables netlink: %w", err)
	}
	defer c.Close()
	dump := func(typ uint16, tableAttr, nameAttr, flagsAttr uint16, each func(name string, flags uint32)) error {
		msgs, err := c.Execute(netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ), Flags: netlink.Request | netlink.Dump},
			Data:   []byte{byte(n.t.table.Family), unix.NFNETLINK_V0, 0, 0},
		})
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if len(m.Data) < 4 {
				continue
			}
			ad, err := netlink.NewAttributeDecoder(m.Data[4:])
			if err != nil {
				return err
			}
			var table, name string
			var flags uint32
			for ad.Next() {
				switch ad.Type() {
				case tableAttr:
					table = ad.String()
				case nameAttr:
					name = ad.String()
				case flagsAttr:
					ad.ByteOrder = binary.BigEndian
					flags = ad.Uint32()
				}
			}
			if err := ad.Err(); err != nil {
				return err
			}
			if table == n.t.table.Name {
				each(name, flags)
			}
		}
		return nil
	}
	if err := dump(unix.NFT_MSG_GETCHAIN, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME, 0xffff, func(name string, _ uint32) {
		ex.Chains = append(ex.Chains, name)
	}); err != nil {
		return ex, fmt.Errorf("listing %s chains over netlink: %w", n.t.family, err)
	}
	if err := dump(unix.NFT_MSG_GETSET, unix.NFTA_SET_TABLE, unix.NFTA_SET_NAME, unix.NFTA_SET_FLAGS, func(name string, flags uint32) {
		switch {
		case flags&unix.NFT_SET_ANONYMOUS != 0:
		case flags&unix.NFT_SET_MAP != 0:
			ex.Maps = append(ex.Maps, name)
		default:
			ex.Sets = append(ex.Sets, name)
		}
	}); err != nil {
		return ex, fmt.Errorf("listing %s sets over netlink: %w", n.t.family, err)
	}
	return ex, nil
}

// Transaction records the operations of one transaction (an nftrules.RuleWriter: rules arrive as
// statements) for Netlink.Write.
type Transaction struct{ rec recorder }

var _ nftrules.RuleWriter = (*Transaction)(nil)

func (tx *Transaction) Add(o knftables.Object)      { tx.rec.Add(o) }
func (tx *Transaction) AddRule(rule *nftrules.Rule) { tx.rec.AddRule(rule) }
func (tx *Transaction) Flush(o knftables.Object)    { tx.rec.Flush(o) }
func (tx *Transaction) Delete(o knftables.Object)   { tx.rec.Delete(o) }

// Write sends tx to the writer's table in one batch, which the kernel commits all or nothing.
// An operation the writer cannot encode fails it with an *UnsupportedError before anything is
// sent. This is the whole path for a table written in full each time, as the DSR table is: no
// Syncer, no nft.
func (n *Netlink) Write(tx *Transaction) error {
	cmds, err := n.translate(tx.rec.ops)
	if err != nil {
		return err
	}
	return n.applyBulk(cmds)
}

// DeleteTable deletes the writer's table; a missing table is not an error.
func (n *Netlink) DeleteTable() error { return n.deleteTable() }

// deleteTable deletes the writer's table; a missing table is not an error.
func (n *Netlink) deleteTable() error {
	err := n.applyBulk([]command{{kind: cmdDelTable, table: n.t.table}})
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
