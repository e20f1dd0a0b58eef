package nftapply

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"sigs.k8s.io/knftables"
)

// Conn is the part of *nftables.Conn the netlink writer uses. Calls buffer messages; Flush sends
// them to the kernel as one batch, which commits all or nothing.
type Conn interface {
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
// It handles the operations incremental syncs write (see translate.go and rules.go); a
// transaction with anything else is refused with an *UnsupportedError, and the Syncer runs it
// through nft. Writers must not write concurrently, not even two of them: google/nftables numbers
// new sets with a package-level counter.
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
	n, err := NewNetlinkConn(family, func() (Conn, error) {
		c, err := nftables.New(nftables.WithNetNSFd(netns))
		if err != nil {
			return nil, fmt.Errorf("opening nftables netlink: %w", err)
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	n.kernel, n.netns = true, netns
	return n, nil
}

// NewNetlinkConn is NewNetlink with a Conn factory: dial is called once per batch, and the Conn
// it returns is used for that batch only (so a batch that fails half-built leaves nothing
// buffered for the next one). Tests pass fakes.
func NewNetlinkConn(family knftables.Family, dial func() (Conn, error)) (*Netlink, error) {
	t, err := newTranslator(family)
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
		case cmdAddSet:
			err = c.AddSet(cmd.set, nil)
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
