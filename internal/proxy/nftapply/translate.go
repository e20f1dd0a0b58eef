package nftapply

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/userdata"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"sigs.k8s.io/knftables"
)

// FallbackReason says why a transaction could not be written over netlink and ran through nft
// instead. The values are metric labels.
type FallbackReason string

const (
	// FallbackRule: a rule with a statement the encoder does not know (nftrules writes none).
	FallbackRule FallbackReason = "rule"
	// FallbackMap: a map declared in a way the writer does not know (nftrules declares none).
	FallbackMap FallbackReason = "map"
	// FallbackObject: an operation on an object the writer does not handle (a table of another
	// name, a chain with a policy, a set of another shape, insert or replace of a rule, ...).
	FallbackObject FallbackReason = "object"
	// FallbackElement: a set or map element whose key, value or comment it cannot encode (a
	// comment of 128 bytes or more, which nft's kernel side refuses too).
	FallbackElement FallbackReason = "element"
	// FallbackUnverified: netlink is not in use yet (NetlinkUnverified).
	FallbackUnverified FallbackReason = "unverified"
	// FallbackOff: netlink does not see the table nft writes (NetlinkOff).
	FallbackOff FallbackReason = "off"
)

// UnsupportedError is returned for an operation the netlink writer cannot translate. Op is the
// operation in nft syntax (without the family and table).
type UnsupportedError struct {
	Reason FallbackReason
	Op     string
	Detail string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("netlink writer does not support %s (%s): %s", e.Op, e.Reason, e.Detail)
}

// verb is what an operation does to its object, as in knftables.Transaction.
type verb uint8

const (
	verbAdd verb = iota
	verbFlush
	verbDelete
)

func (v verb) String() string {
	switch v {
	case verbAdd:
		return "add"
	case verbFlush:
		return "flush"
	case verbDelete:
		return "delete"
	}
	return "verb(" + strconv.Itoa(int(v)) + ")"
}

// op is one operation a Builder wrote. obj is a knftables.Object, or an *nftrules.Rule (added
// as statements).
type op struct {
	verb verb
	obj  any
}

// recorder is an nftrules.RuleWriter that keeps the operations, so that one build can be
// applied over netlink (rules encoded from their statements) or replayed into a knftables
// transaction (rules as their rendered text).
type recorder struct{ ops []op }

var _ nftrules.RuleWriter = (*recorder)(nil)

func (r *recorder) Add(o knftables.Object)      { r.ops = append(r.ops, op{verbAdd, o}) }
func (r *recorder) AddRule(rule *nftrules.Rule) { r.ops = append(r.ops, op{verbAdd, rule}) }
func (r *recorder) Flush(o knftables.Object)    { r.ops = append(r.ops, op{verbFlush, o}) }
func (r *recorder) Delete(o knftables.Object)   { r.ops = append(r.ops, op{verbDelete, o}) }

// replay writes the recorded operations into tx.
func (r *recorder) replay(tx nftrules.Writer) {
	for _, o := range r.ops {
		obj, ok := o.obj.(knftables.Object)
		if rule, isRule := o.obj.(*nftrules.Rule); isRule {
			obj, ok = rule.Object(), true
		}
		if !ok {
			continue
		}
		switch o.verb {
		case verbAdd:
			tx.Add(obj)
		case verbFlush:
			tx.Flush(obj)
		case verbDelete:
			tx.Delete(obj)
		}
	}
}

// cmdKind is a netlink message of the batch.
type cmdKind uint8

const (
	cmdAddChain cmdKind = iota
	cmdFlushChain
	cmdDelChain
	cmdAddRule
	cmdAddSet
	cmdFlushSet
	cmdDelSet
	cmdAddElems
	cmdDelElems
	cmdAddTable
	cmdDelTable
)

// command is one call on an nftables.Conn.
type command struct {
	kind  cmdKind
	table *nftables.Table
	chain *nftables.Chain
	rule  *nftables.Rule
	set   *nftables.Set
	elems []nftables.SetElement // cmdAddSet: an anonymous set's elements
	// udata is the table's or set's userdata as nft writes it (comments, byte orders, typeof),
	// which google/nftables cannot express in full: the kernel path writes it into the message
	// (see capture). nil: none.
	udata []byte
	// open is the key of an anonymous set's element that starts an interval without end, which
	// nft marks in the element's userdata (written the same way). nil: none.
	open []byte
}

// maxElemsPerMessage bounds the elements of one netlink message: they are nested in one
// attribute, whose length is 16 bits (64 KiB). An element of the largest kind (an IPv6 address
// pair, or a DNAT map element) takes under 80 bytes.
const maxElemsPerMessage = 512

// translator turns recorded operations into google/nftables calls for one family's table. It is
// pure: no sockets.
type translator struct {
	family knftables.Family
	table  *nftables.Table
	rules  ruleTranslator
	// addrType is the family's address type, for single-address sets and map keys.
	addrType nftables.SetDatatype
}

func newTranslator(family knftables.Family, table string) (*translator, error) {
	t := &translator{family: family, rules: newRuleTranslator(family)}
	if table == "" {
		return nil, fmt.Errorf("netlink writer: no table name")
	}
	switch family {
	case knftables.IPv4Family:
		t.table = &nftables.Table{Name: table, Family: nftables.TableFamilyIPv4}
		t.addrType = nftables.TypeIPAddr
	case knftables.IPv6Family:
		t.table = &nftables.Table{Name: table, Family: nftables.TableFamilyIPv6}
		t.addrType = nftables.TypeIP6Addr
	default:
		return nil, fmt.Errorf("netlink writer: family %q is neither ip nor ip6", family)
	}
	return t, nil
}

// translate returns the commands for ops, or an *UnsupportedError for the first operation it
// cannot translate.
func (t *translator) translate(ops []op) ([]command, error) {
	bt := &batch{cmds: make([]command, 0, len(ops)), nextID: firstSetID, maps: map[string]*nftables.Set{}}
	if err := t.translateInto(bt, ops); err != nil {
		return nil, err
	}
	return bt.cmds, nil
}

// firstSetID is the first set ID the translator gives the sets it creates in a batch (rules
// refer to anonymous sets by ID; google/nftables numbers sets without an ID from 1 up).
const firstSetID = 1 << 24

// batch is the state of one translation: its commands, the next set ID, and the sets and maps it
// declares (by name: elements of the DSR table's are encoded by their declared types).
type batch struct {
	cmds   []command
	nextID uint32
	maps   map[string]*nftables.Set
}

func (bt *batch) id() uint32 { bt.nextID++; return bt.nextID }

func (t *translator) translateInto(bt *batch, ops []op) error {
	for _, o := range ops {
		if r, ok := o.obj.(*nftrules.Rule); ok && o.verb == verbAdd {
			// Rules with anonymous sets: the sets first.
			if err := t.ruleInto(bt, o, r); err != nil {
				return err
			}
			continue
		}
		if e, ok := o.obj.(*knftables.Element); ok && o.verb == verbAdd && e.Set != "" && len(e.Key) == 1 && strings.Contains(e.Key[0], "/") {
			if err := t.prefixElement(bt, o, e); err != nil {
				return err
			}
			continue
		}
		if e, ok := o.obj.(*knftables.Element); ok && o.verb == verbAdd && e.Set != "" && bt.maps[e.Set] != nil &&
			bt.maps[e.Set].KeyType.GetNFTMagic() == nftables.TypeEtherAddr.GetNFTMagic() {
			c, err := t.etherElement(o, e)
			if err != nil {
				return err
			}
			bt.add(c)
			continue
		}
		if e, ok := o.obj.(*knftables.Element); ok && e.Map != "" && bt.maps[e.Map] != nil && !nftrules.IsDNATMap(e.Map) {
			c, err := t.declaredElement(o, e, bt.maps[e.Map])
			if err != nil {
				return err
			}
			bt.add(c)
			continue
		}
		c, err := t.op(o)
		if err != nil {
			return err
		}
		if c.kind == cmdAddSet && bt.maps != nil {
			bt.maps[c.set.Name] = c.set
		}
		bt.add(c)
	}
	return nil
}

// add appends c, merging consecutive element operations on one set into one message.
func (bt *batch) add(c command) {
	if c.kind == cmdAddSet && c.set.ID == 0 {
		c.set.ID = bt.id() // setUserdata finds the set's message by its ID
	}
	// At most maxElemsPerMessage elements in one message.
	cmds := bt.cmds
	if n := len(cmds); n > 0 && (c.kind == cmdAddElems || c.kind == cmdDelElems) &&
		cmds[n-1].kind == c.kind && cmds[n-1].set.Name == c.set.Name && cmds[n-1].set.ID == c.set.ID &&
		len(cmds[n-1].elems)+len(c.elems) <= maxElemsPerMessage {
		cmds[n-1].elems = append(cmds[n-1].elems, c.elems...)
		return
	}
	bt.cmds = append(cmds, c)
}

func (t *translator) unsupported(reason FallbackReason, o op, format string, args ...any) error {
	return &UnsupportedError{Reason: reason, Op: describe(o), Detail: fmt.Sprintf(format, args...)}
}

// describe names an operation for errors: "add rule CHAIN TEXT", "delete chain NAME", ...
func describe(o op) string {
	switch obj := o.obj.(type) {
	case *knftables.Table:
		return o.verb.String() + " table"
	case *knftables.Chain:
		return o.verb.String() + " chain " + obj.Name
	case *knftables.Rule:
		return o.verb.String() + " rule " + obj.Chain + " " + obj.Rule
	case *nftrules.Rule:
		return o.verb.String() + " rule " + obj.Chain + " " + obj.String()
	case *knftables.Set:
		return o.verb.String() + " set " + obj.Name
	case *knftables.Map:
		return o.verb.String() + " map " + obj.Name
	case *knftables.Element:
		d := o.verb.String() + " element " + obj.Set + obj.Map + " { " + strings.Join(obj.Key, " . ") + " }"
		if obj.Comment != nil {
			d += fmt.Sprintf(" comment %q", *obj.Comment)
		}
		return d
	}
	return fmt.Sprintf("%s %T", o.verb, o.obj)
}

// ours reports whether an object's family and table, if given, are the translator's.
func (t *translator) ours(family knftables.Family, table string) bool {
	return (family == "" || family == t.family) && (table == "" || table == t.table.Name)
}

func (t *translator) op(o op) (command, error) {
	switch obj := o.obj.(type) {
	case *knftables.Table:
		return t.tableOp(o, obj)
	case *knftables.Chain:
		return t.chainOp(o, obj)
	case *nftrules.Rule:
		return t.ruleOp(o, obj)
	case *knftables.Set:
		return t.setOp(o, obj)
	case *knftables.Map:
		return t.mapOp(o, obj)
	case *knftables.Element:
		return t.elementOp(o, obj)
	}
	return command{}, t.unsupported(FallbackObject, o, "only tables, chains, rules as statements, sets, maps and elements are written over netlink")
}

// tableOp adds (with its comment) or deletes the table. nft's `add table` does not change an
// existing table's comment, and neither does this: the kernel keeps the first one.
func (t *translator) tableOp(o op, tb *knftables.Table) (command, error) {
	if !t.ours(tb.Family, tb.Name) || tb.Flags != nil || tb.Handle != nil {
		return command{}, t.unsupported(FallbackObject, o, "table of another family or name, or with flags")
	}
	switch o.verb {
	case verbAdd:
		c := command{kind: cmdAddTable, table: t.table}
		if tb.Comment != nil {
			if len(*tb.Comment) >= 128 {
				return command{}, t.unsupported(FallbackObject, o, "comment too long")
			}
			c.udata = userdata.AppendString(nil, userdata.TypeComment, *tb.Comment)
		}
		return c, nil
	case verbDelete:
		return command{kind: cmdDelTable, table: t.table}, nil
	}
	return command{}, t.unsupported(FallbackObject, o, "flushing the table")
}

var (
	chainTypes = map[knftables.BaseChainType]nftables.ChainType{
		knftables.FilterType: nftables.ChainTypeFilter, knftables.NATType: nftables.ChainTypeNAT,
	}
	chainHooks = map[knftables.BaseChainHook]*nftables.ChainHook{
		knftables.PreroutingHook: nftables.ChainHookPrerouting, knftables.InputHook: nftables.ChainHookInput,
		knftables.ForwardHook: nftables.ChainHookForward, knftables.OutputHook: nftables.ChainHookOutput,
		knftables.PostroutingHook: nftables.ChainHookPostrouting,
	}
)

// chainOp handles regular chains, and base chains of a type, hook and numeric priority (added
// with them; flushed and deleted by name).
func (t *translator) chainOp(o op, c *knftables.Chain) (command, error) {
	if !t.ours(c.Family, c.Table) || c.Name == "" || c.Policy != nil || c.Device != nil || c.Handle != nil {
		return command{}, t.unsupported(FallbackObject, o, "only named chains without policy or device")
	}
	ch := &nftables.Chain{Name: c.Name, Table: t.table}
	base := c.Type != nil || c.Hook != nil || c.Priority != nil
	var ud []byte // the comment, as nft writes it (see capture)
	if c.Comment != nil {
		if o.verb != verbAdd || len(*c.Comment) >= 128 {
			return command{}, t.unsupported(FallbackObject, o, "comment too long, or not on an add")
		}
		ud = userdata.AppendString(nil, userdata.TypeComment, *c.Comment)
	}
	switch {
	case o.verb == verbAdd && base:
		if c.Type == nil || c.Hook == nil || c.Priority == nil {
			return command{}, t.unsupported(FallbackObject, o, "a base chain needs a type, a hook and a priority")
		}
		typ, ok1 := chainTypes[*c.Type]
		hook, ok2 := chainHooks[*c.Hook]
		prio, err := knftables.ParsePriority(t.family, string(*c.Priority)) // a number, or a name (raw, mangle, ...)
		if !ok1 || !ok2 || err != nil {
			return command{}, t.unsupported(FallbackObject, o, "type %q, hook %q, priority %q", *c.Type, *c.Hook, *c.Priority)
		}
		p := nftables.ChainPriority(prio)
		ch.Type, ch.Hooknum, ch.Priority = typ, hook, &p
		return command{kind: cmdAddChain, chain: ch, udata: ud}, nil
	case o.verb == verbAdd:
		return command{kind: cmdAddChain, chain: ch, udata: ud}, nil
	case base:
		return command{}, t.unsupported(FallbackObject, o, "%s of a chain with a type, hook or priority", o.verb)
	case o.verb == verbFlush:
		return command{kind: cmdFlushChain, chain: ch}, nil
	default:
		return command{kind: cmdDelChain, chain: ch}, nil
	}
}

func (t *translator) ruleOp(o op, r *nftrules.Rule) (command, error) {
	bt := &batch{nextID: firstSetID}
	if err := t.ruleInto(bt, o, r); err != nil {
		return command{}, err
	}
	if len(bt.cmds) != 1 {
		return command{}, t.unsupported(FallbackRule, o, "a rule with anonymous sets")
	}
	return bt.cmds[0], nil
}

// ruleInto adds a rule, after the anonymous sets its statements compare with.
func (t *translator) ruleInto(bt *batch, o op, r *nftrules.Rule) error {
	if o.verb != verbAdd || r.Chain == "" {
		return t.unsupported(FallbackObject, o, "only appending rules")
	}
	exprs, ud, anon, err := t.rules.encode(r)
	if err != nil {
		return err
	}
	for _, a := range anon {
		set := &nftables.Set{Table: t.table, Name: "__set%d", ID: bt.id(), Anonymous: true, Constant: true,
			Interval: a.interval, KeyType: t.addrType, KeyByteOrder: binaryutil.BigEndian}
		a.lookup.SetName, a.lookup.SetID = set.Name, set.ID
		// The elements in messages of at most maxElemsPerMessage, after the set (which the
		// kernel finds by its ID: anonymous sets are named when created).
		first := a.elems[:min(len(a.elems), maxElemsPerMessage)]
		if len(first) < len(a.elems) {
			set.Size = uint32(len(a.elems)) // a constant set holds no more than it was declared with
		}
		bt.add(command{kind: cmdAddSet, set: set, elems: first, udata: a.udata, open: a.open})
		more := *set
		more.Anonymous = false // google/nftables refuses to add to an anonymous set; the message is the same
		for rest := a.elems[len(first):]; len(rest) > 0; rest = rest[min(len(rest), maxElemsPerMessage):] {
			bt.add(command{kind: cmdAddElems, set: &more, elems: rest[:min(len(rest), maxElemsPerMessage)]})
		}
	}
	bt.add(command{kind: cmdAddRule, rule: &nftables.Rule{
		Table:    t.table,
		Chain:    &nftables.Chain{Name: r.Chain, Table: t.table},
		Exprs:    exprs,
		UserData: ud,
	}})
	return nil
}

// setOp creates the sets nftrules declares: addresses of the family (plain, interval, or
// dynamic with a timeout for affinity), and pairs of addresses (hairpin-endpoints), with their
// comments; and flushes or deletes any set of the table.
func (t *translator) setOp(o op, s *knftables.Set) (command, error) {
	if !t.ours(s.Family, s.Table) || s.Name == "" || s.Handle != nil {
		return command{}, t.unsupported(FallbackObject, o, "set of another table")
	}
	set := &nftables.Set{Table: t.table, Name: s.Name}
	if c, ok := flushOrDelete(o, set); ok {
		return c, nil
	}
	if s.TypeOf != "" || s.GCInterval != nil || s.Size != nil || s.Policy != nil || s.AutoMerge != nil {
		return command{}, t.unsupported(FallbackObject, o, "only sets declared by type, without size, policy or auto-merge")
	}
	var ud []byte
	switch s.Type {
	case t.addrType.Name:
		set.KeyType = t.addrType
		ud = userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, byteorderBig)
	case t.addrType.Name + " . " + t.addrType.Name:
		set.KeyType, _ = nftables.ConcatSetType(t.addrType, t.addrType)
		ud = userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, byteorderInvalid)
		ud = userdata.Append(ud, userdata.NFTNL_UDATA_SET_KEY_TYPEOF, concatTypeofUdata)
	case nftables.TypeEtherAddr.Name: // the DSR table's peer-macs
		set.KeyType = nftables.TypeEtherAddr
		ud = userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, byteorderBig)
	default:
		return command{}, t.unsupported(FallbackObject, o, "type %q", s.Type)
	}
	set.KeyByteOrder = binaryutil.BigEndian
	for _, f := range s.Flags {
		switch f {
		case knftables.DynamicFlag:
			set.Dynamic = true
		case knftables.TimeoutFlag:
			set.HasTimeout = true
		case knftables.IntervalFlag:
			set.Interval = true
		default:
			return command{}, t.unsupported(FallbackObject, o, "set flag %q", f)
		}
	}
	if set.Interval && (set.Dynamic || set.HasTimeout || s.Type != t.addrType.Name) {
		return command{}, t.unsupported(FallbackObject, o, "interval set of flags %q, type %q", s.Flags, s.Type)
	}
	if s.Timeout != nil {
		if !set.HasTimeout || *s.Timeout <= 0 || *s.Timeout%time.Millisecond != 0 {
			return command{}, t.unsupported(FallbackObject, o, "timeout %v", *s.Timeout)
		}
		set.Timeout = *s.Timeout
	}
	if s.Comment != nil {
		if len(*s.Comment) >= 128 {
			return command{}, t.unsupported(FallbackObject, o, "comment too long")
		}
		ud = userdata.AppendString(ud, userdata.NFTNL_UDATA_SET_COMMENT, *s.Comment)
	}
	return command{kind: cmdAddSet, set: set, udata: ud}, nil
}

// mapOp creates the maps nftrules declares (see typeof.go for their userdata) and flushes or
// deletes any map of the table.
func (t *translator) mapOp(o op, m *knftables.Map) (command, error) {
	if !t.ours(m.Family, m.Table) || m.Name == "" || m.Handle != nil {
		return command{}, t.unsupported(FallbackObject, o, "map of another table")
	}
	set := &nftables.Set{Table: t.table, Name: m.Name, IsMap: true}
	if c, ok := flushOrDelete(o, set); ok {
		return c, nil
	}
	if m.Timeout != nil || m.GCInterval != nil || m.Size != nil || m.Policy != nil {
		return command{}, t.unsupported(FallbackMap, o, "only maps without timeout, size or policy")
	}
	for _, f := range m.Flags {
		if f != knftables.IntervalFlag {
			return command{}, t.unsupported(FallbackMap, o, "map flag %q", f)
		}
		set.Interval = true
	}
	ud, err := t.mapType(set, m)
	if err != nil {
		return command{}, t.unsupported(FallbackMap, o, "%v", err)
	}
	if m.Comment != nil {
		if len(*m.Comment) >= 128 {
			return command{}, t.unsupported(FallbackMap, o, "comment too long")
		}
		ud = userdata.AppendString(ud, userdata.NFTNL_UDATA_SET_COMMENT, *m.Comment)
	}
	return command{kind: cmdAddSet, set: set, udata: ud}, nil
}

// flushOrDelete returns the command for o on set (or map) if o flushes or deletes it; ok is false
// for an add.
func flushOrDelete(o op, set *nftables.Set) (c command, ok bool) {
	switch o.verb {
	case verbFlush:
		return command{kind: cmdFlushSet, set: set}, true
	case verbDelete:
		return command{kind: cmdDelSet, set: set}, true
	}
	return command{}, false
}

// elementOp encodes the elements nftrules writes (prefixes: prefixElement): addresses in cluster-ips,
// `address . protocol . port` and `protocol . port` keys of the Service maps, and integer keys of
// per-Service maps; values are verdicts.
func (t *translator) elementOp(o op, e *knftables.Element) (command, error) {
	if o.verb == verbFlush || !t.ours(e.Family, e.Table) || (e.Set == "") == (e.Map == "") {
		return command{}, t.unsupported(FallbackObject, o, "element without exactly one of set and map")
	}
	name := e.Set
	if e.Map != "" {
		name = e.Map
	}
	if nftrules.IsDNATMap(e.Map) {
		return t.dnatElement(o, e)
	}
	key, err := t.elementKey(e)
	if err != nil {
		return command{}, t.unsupported(FallbackElement, o, "%v", err)
	}
	el := nftables.SetElement{Key: key}
	set := &nftables.Set{Table: t.table, Name: name, IsMap: e.Map != ""}
	if o.verb == verbDelete {
		// The kernel finds the element by its key; value and comment are not needed.
		return command{kind: cmdDelElems, set: set, elems: []nftables.SetElement{el}}, nil
	}
	if e.Map != "" {
		if len(e.Value) != 1 {
			return command{}, t.unsupported(FallbackElement, o, "value %q is not one verdict", e.Value)
		}
		v, err := nftrules.ParseVerdict(e.Value[0])
		k, ok := verdicts[v.Kind]
		if err != nil || !ok {
			return command{}, t.unsupported(FallbackElement, o, "verdict %q", e.Value[0])
		}
		el.VerdictData = verdictExpr(v, k)
	} else if len(e.Value) != 0 {
		return command{}, t.unsupported(FallbackElement, o, "set element with a value")
	}
	if e.Comment != nil {
		if len(*e.Comment) >= 128 {
			return command{}, t.unsupported(FallbackElement, o, "comment too long")
		}
		el.Comment = *e.Comment
	}
	return command{kind: cmdAddElems, set: set, elems: []nftables.SetElement{el}}, nil
}

// elementKey encodes a key as nft does: each field of a concatenation padded to 4 bytes, integer
// keys (per-Service maps, indexed by numgen or jhash) in host byte order.
func (t *translator) elementKey(e *knftables.Element) ([]byte, error) {
	k := e.Key
	switch {
	case e.Set != "" && len(k) == 1:
		return t.rules.addrText(k[0])
	case e.Set == nftrules.HairpinSet && len(k) == 2:
		a, err := t.rules.addrText(k[0])
		if err != nil {
			return nil, err
		}
		b, err := t.rules.addrText(k[1])
		if err != nil {
			return nil, err
		}
		return append(a, b...), nil
	case e.Map != "" && len(k) == 1 && nftrules.IsServiceMap(e.Map):
		v, err := strconv.ParseUint(k[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("integer key %q", k[0])
		}
		return hostU32(uint32(v)), nil
	case e.Map != "" && len(k) == 3:
		a, err := t.rules.addrText(k[0])
		if err != nil {
			return nil, err
		}
		pp, err := protoPort(k[1], k[2])
		if err != nil {
			return nil, err
		}
		return append(a, pp...), nil
	case e.Map != "" && len(k) == 2:
		return protoPort(k[0], k[1])
	}
	return nil, fmt.Errorf("key %q", k)
}

// dnatElement encodes an element of the shared DNAT map, an interval of integer keys mapping to
// `address . port`, as nft does: a start element (key in network byte order, as the rule's
// byteorder expression makes it) with the value, and an interval-end element at the last key + 1.
// Deleting it deletes both. (nft also adds an interval-end element at key 0 when it first writes
// into a map that was in the kernel before its transaction; lookups do not need it, no interval
// starts at 0, and it is left out here.)
func (t *translator) dnatElement(o op, e *knftables.Element) (command, error) {
	if len(e.Key) != 1 || e.Comment != nil {
		return command{}, t.unsupported(FallbackElement, o, "key %q", e.Key)
	}
	lo, hi, ok := strings.Cut(e.Key[0], "-")
	l, err1 := strconv.ParseUint(lo, 10, 32)
	h, err2 := strconv.ParseUint(hi, 10, 32)
	if !ok || err1 != nil || err2 != nil || l > h || h == 1<<32-1 {
		return command{}, t.unsupported(FallbackElement, o, "key %q is not an interval", e.Key[0])
	}
	set := &nftables.Set{Table: t.table, Name: e.Map, IsMap: true, Interval: true}
	start := nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, uint32(l))}
	end := nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, uint32(h+1)), IntervalEnd: true}
	if o.verb == verbDelete {
		return command{kind: cmdDelElems, set: set, elems: []nftables.SetElement{start, end}}, nil
	}
	v := strings.Join(e.Value, " . ")
	addr, port, ok := strings.Cut(v, " . ")
	if !ok {
		return command{}, t.unsupported(FallbackElement, o, "value %q is not an address and a port", v)
	}
	a, err := t.rules.addrText(addr)
	if err != nil {
		return command{}, t.unsupported(FallbackElement, o, "%v", err)
	}
	pt, err := parsePort(port)
	if err != nil {
		return command{}, t.unsupported(FallbackElement, o, "%v", err)
	}
	start.Val = append(append(a, pt...), 0, 0)
	return command{kind: cmdAddElems, set: set, elems: []nftables.SetElement{start, end}}, nil
}

// protoPort encodes `inet_proto . inet_service` as two 4-byte fields.
func protoPort(proto, port string) ([]byte, error) {
	p, ok := protocols[proto]
	if !ok {
		return nil, fmt.Errorf("protocol %q", proto)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q", port)
	}
	out := []byte{p, 0, 0, 0}
	out = binary.BigEndian.AppendUint16(out, uint16(n))
	return append(out, 0, 0), nil
}

// addrText parses an element's address of the family.
func (t ruleTranslator) addrText(s string) ([]byte, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return nil, fmt.Errorf("not an %s address: %q", t.ipX, s)
	}
	return t.addr(a)
}

func parsePort(s string) ([]byte, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port %q", s)
	}
	return binary.BigEndian.AppendUint16(nil, uint16(n)), nil
}

// prefixElement adds a prefix to an interval set (cluster-cidrs): its start element and an
// interval end after its last address, as nft does. (Unlike for an anonymous set, nft adds no
// interval end at the zero address to a named set it declares and flushes in the transaction.)
func (t *translator) prefixElement(bt *batch, o op, e *knftables.Element) error {
	if !t.ours(e.Family, e.Table) || e.Comment != nil || len(e.Value) != 0 {
		return t.unsupported(FallbackElement, o, "prefix element with a value or comment")
	}
	p, err := netip.ParsePrefix(e.Key[0])
	if err != nil || p.Addr().Zone() != "" || p.Addr().Is4() == t.rules.v6 || p.Addr().Is4In6() || p.Masked() != p {
		return t.unsupported(FallbackElement, o, "not a masked %s prefix: %q", t.rules.ipX, e.Key[0])
	}
	iv := prefixInterval(p)
	end := iv.last.Next()
	if !end.IsValid() {
		return t.unsupported(FallbackElement, o, "interval up to the last address")
	}
	elems := []nftables.SetElement{{Key: iv.first.AsSlice()}, {Key: end.AsSlice(), IntervalEnd: true}}
	bt.add(command{kind: cmdAddElems, set: &nftables.Set{Table: t.table, Name: e.Set, Interval: true}, elems: elems})
	return nil
}

// declaredElement encodes an element of a map declared in the same batch by its declared types:
// integer and mark keys (numgen or jhash buckets, conntrack marks) in host byte order, decimal or
// 0x-hex; values that are verdicts, marks, or `address . port` (a concatenation of the family's
// address and inet_service). Other keys go as elementKey encodes them.
func (t *translator) declaredElement(o op, e *knftables.Element, m *nftables.Set) (command, error) {
	if o.verb == verbFlush || !t.ours(e.Family, e.Table) || e.Set != "" {
		return command{}, t.unsupported(FallbackObject, o, "element of a map")
	}
	var key []byte
	var err error
	if m.KeyType.GetNFTMagic() == nftables.TypeInteger.GetNFTMagic() || m.KeyType.GetNFTMagic() == nftables.TypeMark.GetNFTMagic() {
		if len(e.Key) != 1 {
			return command{}, t.unsupported(FallbackElement, o, "key %q is not one number", e.Key)
		}
		key, err = hostNumber(e.Key[0])
	} else {
		key, err = t.elementKey(e)
	}
	if err != nil {
		return command{}, t.unsupported(FallbackElement, o, "%v", err)
	}
	set := &nftables.Set{Table: t.table, Name: e.Map, IsMap: true}
	el := nftables.SetElement{Key: key}
	if o.verb == verbDelete {
		return command{kind: cmdDelElems, set: set, elems: []nftables.SetElement{el}}, nil
	}
	v := strings.Join(e.Value, " . ")
	switch m.DataType.GetNFTMagic() {
	case nftables.TypeVerdict.GetNFTMagic():
		vd, err := nftrules.ParseVerdict(v)
		k, ok := verdicts[vd.Kind]
		if err != nil || !ok {
			return command{}, t.unsupported(FallbackElement, o, "verdict %q", v)
		}
		el.VerdictData = verdictExpr(vd, k)
	case nftables.TypeMark.GetNFTMagic():
		if el.Val, err = hostNumber(v); err != nil {
			return command{}, t.unsupported(FallbackElement, o, "%v", err)
		}
	default:
		addr, port, ok := strings.Cut(v, " . ")
		if !ok || m.DataType.Name != t.addrType.Name+" . "+nftables.TypeInetService.Name {
			return command{}, t.unsupported(FallbackElement, o, "value %q is not an address and a port", v)
		}
		a, err := t.rules.addrText(addr)
		if err != nil {
			return command{}, t.unsupported(FallbackElement, o, "%v", err)
		}
		pt, err := parsePort(port)
		if err != nil {
			return command{}, t.unsupported(FallbackElement, o, "%v", err)
		}
		el.Val = append(append(a, pt...), 0, 0)
	}
	if e.Comment != nil {
		if len(*e.Comment) >= 128 {
			return command{}, t.unsupported(FallbackElement, o, "comment too long")
		}
		el.Comment = *e.Comment
	}
	return command{kind: cmdAddElems, set: set, elems: []nftables.SetElement{el}}, nil
}

// etherElement adds an Ethernet address to a set of them (the DSR table's peer-macs).
func (t *translator) etherElement(o op, e *knftables.Element) (command, error) {
	if !t.ours(e.Family, e.Table) || len(e.Key) != 1 || len(e.Value) != 0 || e.Comment != nil {
		return command{}, t.unsupported(FallbackElement, o, "an element of a set of Ethernet addresses is one address")
	}
	hw, err := net.ParseMAC(e.Key[0])
	if err != nil || len(hw) != 6 {
		return command{}, t.unsupported(FallbackElement, o, "not an Ethernet address: %q", e.Key[0])
	}
	return command{kind: cmdAddElems, set: &nftables.Set{Table: t.table, Name: e.Set}, elems: []nftables.SetElement{{Key: hw}}}, nil
}

// hostNumber parses a 32-bit number, decimal or 0x-hex, into host byte order (how the kernel
// keeps integers and marks).
func hostNumber(s string) ([]byte, error) {
	base, digits := 10, s
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		base, digits = 16, h
	}
	n, err := strconv.ParseUint(digits, base, 32)
	if err != nil {
		return nil, fmt.Errorf("not a 32-bit number: %q", s)
	}
	return hostU32(uint32(n)), nil
}
