package nftapply

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"sigs.k8s.io/knftables"
)

// FallbackReason says why an incremental sync could not be written over netlink and ran through
// nft instead. The values are metric labels.
type FallbackReason string

const (
	// FallbackRule: a rule with a statement the encoder does not know (for example the
	// anonymous set of a loadBalancerSourceRanges rule).
	FallbackRule FallbackReason = "rule"
	// FallbackMap: a per-Service verdict map is created; its `typeof` key needs set userdata
	// that google/nftables cannot write.
	FallbackMap FallbackReason = "map"
	// FallbackObject: an operation on an object the writer does not handle (table, base chain,
	// set of another shape, insert or replace of a rule, ...).
	FallbackObject FallbackReason = "object"
	// FallbackElement: a set or map element whose key or value it cannot encode (intervals).
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
)

// command is one call on an nftables.Conn.
type command struct {
	kind  cmdKind
	chain *nftables.Chain
	rule  *nftables.Rule
	set   *nftables.Set
	elems []nftables.SetElement
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

func newTranslator(family knftables.Family) (*translator, error) {
	t := &translator{family: family, rules: newRuleTranslator(family)}
	switch family {
	case knftables.IPv4Family:
		t.table = &nftables.Table{Name: nftrules.TableName, Family: nftables.TableFamilyIPv4}
		t.addrType = nftables.TypeIPAddr
	case knftables.IPv6Family:
		t.table = &nftables.Table{Name: nftrules.TableName, Family: nftables.TableFamilyIPv6}
		t.addrType = nftables.TypeIP6Addr
	default:
		return nil, fmt.Errorf("netlink writer: family %q is neither ip nor ip6", family)
	}
	return t, nil
}

// translate returns the commands for ops, or an *UnsupportedError for the first operation it
// cannot translate.
func (t *translator) translate(ops []op) ([]command, error) {
	cmds := make([]command, 0, len(ops))
	for _, o := range ops {
		c, err := t.op(o)
		if err != nil {
			return nil, err
		}
		// Consecutive element operations on one set become one message, of at most
		// maxElemsPerMessage elements.
		if n := len(cmds); n > 0 && (c.kind == cmdAddElems || c.kind == cmdDelElems) &&
			cmds[n-1].kind == c.kind && cmds[n-1].set.Name == c.set.Name &&
			len(cmds[n-1].elems)+len(c.elems) <= maxElemsPerMessage {
			cmds[n-1].elems = append(cmds[n-1].elems, c.elems...)
			continue
		}
		cmds = append(cmds, c)
	}
	return cmds, nil
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
		return o.verb.String() + " element " + obj.Set + obj.Map + " { " + strings.Join(obj.Key, " . ") + " }"
	}
	return fmt.Sprintf("%s %T", o.verb, o.obj)
}

// ours reports whether an object's family and table, if given, are the translator's.
func (t *translator) ours(family knftables.Family, table string) bool {
	return (family == "" || family == t.family) && (table == "" || table == nftrules.TableName)
}

func (t *translator) op(o op) (command, error) {
	switch obj := o.obj.(type) {
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
	return command{}, t.unsupported(FallbackObject, o, "only chains, rules as statements, sets, maps and elements are written over netlink")
}

func (t *translator) chainOp(o op, c *knftables.Chain) (command, error) {
	if !t.ours(c.Family, c.Table) || c.Name == "" || c.Type != nil || c.Hook != nil || c.Priority != nil ||
		c.Policy != nil || c.Device != nil || c.Comment != nil || c.Handle != nil {
		return command{}, t.unsupported(FallbackObject, o, "only named regular chains without comments")
	}
	ch := &nftables.Chain{Name: c.Name, Table: t.table}
	switch o.verb {
	case verbAdd:
		return command{kind: cmdAddChain, chain: ch}, nil
	case verbFlush:
		return command{kind: cmdFlushChain, chain: ch}, nil
	default:
		return command{kind: cmdDelChain, chain: ch}, nil
	}
}

func (t *translator) ruleOp(o op, r *nftrules.Rule) (command, error) {
	if o.verb != verbAdd || r.Chain == "" {
		return command{}, t.unsupported(FallbackObject, o, "only appending rules")
	}
	exprs, ud, err := t.rules.encode(r)
	if err != nil {
		return command{}, err
	}
	return command{kind: cmdAddRule, rule: &nftables.Rule{
		Table:    t.table,
		Chain:    &nftables.Chain{Name: r.Chain, Table: t.table},
		Exprs:    exprs,
		UserData: ud,
	}}, nil
}

// setOp handles the per-endpoint affinity sets: `type ipvX_addr ; flags dynamic,timeout ;
// timeout T`.
func (t *translator) setOp(o op, s *knftables.Set) (command, error) {
	if !t.ours(s.Family, s.Table) || s.Name == "" || s.Handle != nil {
		return command{}, t.unsupported(FallbackObject, o, "set of another table")
	}
	set := &nftables.Set{Table: t.table, Name: s.Name}
	if c, ok := flushOrDelete(o, set); ok {
		return c, nil
	}
	if s.Type != t.addrType.Name || s.TypeOf != "" || s.GCInterval != nil || s.Size != nil || s.Policy != nil ||
		s.AutoMerge != nil || s.Comment != nil {
		return command{}, t.unsupported(FallbackObject, o, "only address sets without size, policy or comment")
	}
	set.KeyType = t.addrType
	set.KeyByteOrder = binaryutil.BigEndian // nft's set userdata for addresses
	for _, f := range s.Flags {
		switch f {
		case knftables.DynamicFlag:
			set.Dynamic = true
		case knftables.TimeoutFlag:
			set.HasTimeout = true
		default:
			return command{}, t.unsupported(FallbackObject, o, "set flag %q", f)
		}
	}
	if s.Timeout != nil {
		if !set.HasTimeout || *s.Timeout <= 0 || *s.Timeout%time.Millisecond != 0 {
			return command{}, t.unsupported(FallbackObject, o, "timeout %v", *s.Timeout)
		}
		set.Timeout = *s.Timeout
	}
	return command{kind: cmdAddSet, set: set}, nil
}

// mapOp handles flushing and deleting maps. Creating one is left to nft: the per-Service maps
// are declared with `typeof`, which nft records in set userdata that google/nftables v0.3.0
// cannot write (its Set has no field for it), and a map without it lists differently.
func (t *translator) mapOp(o op, m *knftables.Map) (command, error) {
	if !t.ours(m.Family, m.Table) || m.Name == "" || m.Handle != nil {
		return command{}, t.unsupported(FallbackObject, o, "map of another table")
	}
	set := &nftables.Set{Table: t.table, Name: m.Name, IsMap: true}
	if c, ok := flushOrDelete(o, set); ok {
		return c, nil
	}
	return command{}, t.unsupported(FallbackMap, o, "creating a map (typeof userdata)")
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

// elementOp encodes the elements nftrules writes in incremental syncs: addresses in cluster-ips,
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
