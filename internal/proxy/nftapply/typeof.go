package nftapply

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/userdata"
	"github.com/ironlb/ironlb/internal/proxy/nftrules"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// This file writes the set userdata nft writes, byte for byte, so that a set or map created over
// netlink lists as the same declaration (`type`, `typeof`, comment) as one created by nft: nft
// reads its declarations back from this userdata, not from the kernel's key types. The layout
// is libnftnl's (NFTNL_UDATA_SET_*), the values those of nft 1.0.x (checked against sets nft
// created: see TestNetlinkFullMatchesNFT):
//
//	type ipv4_addr                      keybyteorder 2 (big endian)
//	type ipv4_addr . ipv4_addr          keybyteorder 0, key typeof {concat, no fields}
//	type A . inet_proto . inet_service : verdict
//	                                    keybyteorder 0, databyteorder 0, key typeof {concat},
//	                                    data interval 0
//	typeof numgen random mod N : verdict
//	                                    keybyteorder 1 (host), databyteorder 0,
//	                                    key typeof {numgen random mod N}, data typeof {verdict},
//	                                    data interval 0
//	typeof numgen random mod N : ip daddr . tcp dport
//	                                    as above, data typeof {concat {payload ip daddr},
//	                                    {payload tcp dport}}
//	typeof numgen random mod N : meta mark
//	                                    keybyteorder 1, databyteorder 1 (host), key typeof {numgen
//	                                    ...}, data typeof {meta {key mark}}, data interval 0
//	typeof meta mark : meta mark        keybyteorder 1, databyteorder 1, key and data typeof
//	                                    {meta {key mark}}, data interval 0 (DSR table)
//	type ether_addr                     keybyteorder 2 (DSR table)
//	an anonymous set of ip saddr        keybyteorder 2, [merge elements 1 if interval],
//	                                    key typeof {payload ip saddr}
//
// followed by the comment, if any.

// Byte orders of NFTNL_UDATA_SET_KEYBYTEORDER (nft's enum byteorder).
const (
	byteorderInvalid = 0
	byteorderHost    = 1
	byteorderBig     = 2
)

// nft's expression types (enum expr_types) and protocol descriptions (enum proto_desc_id) as
// typeof userdata names them.
const (
	exprTypeVerdict = 1
	exprTypePayload = 7
	exprTypeMeta    = 9
	exprTypeConcat  = 13
	exprTypeNumgen  = 23

	protoDescUDP  = 6
	protoDescTCP  = 8
	protoDescSCTP = 10
	protoDescIP   = 12
	protoDescIP6  = 13

	// Header fields: ip saddr and daddr, ip6 saddr and daddr, and the dport of tcp, udp and sctp.
	fieldIPSaddr  = 11
	fieldIPDaddr  = 12
	fieldIP6Saddr = 8
	fieldIP6Daddr = 9
	fieldDport    = 2
)

var protoDescs = map[string]uint32{"tcp": protoDescTCP, "udp": protoDescUDP, "sctp": protoDescSCTP}

// typeofUdata is one expression of a typeof: {0: its type, 1: {its attributes}}.
func typeofUdata(exprType uint32, attrs []byte) []byte {
	b := userdata.AppendUint32(nil, 0, exprType)
	return userdata.Append(b, 1, attrs)
}

// metaMarkTypeof is the typeof of `meta mark`: {meta, {key: NFT_META_MARK}}.
var metaMarkTypeof = typeofUdata(exprTypeMeta, userdata.AppendUint32(nil, 0, unix.NFT_META_MARK))

// concatTypeofUdata is the key typeof nft writes for a concatenation declared by type.
var concatTypeofUdata = typeofUdata(exprTypeConcat, nil)

func payloadTypeof(desc, field uint32) []byte {
	return typeofUdata(exprTypePayload, userdata.AppendUint32(userdata.AppendUint32(nil, 0, desc), 1, field))
}

// addrTypeof is the typeof of the family's saddr or daddr.
func (t ruleTranslator) addrTypeof(f nftrules.Field) []byte {
	switch {
	case !t.v6 && f == nftrules.FieldSaddr:
		return payloadTypeof(protoDescIP, fieldIPSaddr)
	case !t.v6:
		return payloadTypeof(protoDescIP, fieldIPDaddr)
	case f == nftrules.FieldSaddr:
		return payloadTypeof(protoDescIP6, fieldIP6Saddr)
	}
	return payloadTypeof(protoDescIP6, fieldIP6Daddr)
}

// mapType fills in set's key and data types from m's declaration, and returns its userdata
// (without the comment). It knows the declarations nftrules writes: verdict maps keyed by an
// address, protocol and port (or protocol and port), declared by type, and maps keyed by numgen,
// declared by typeof, whose values are verdicts or an address and port.
func (t *translator) mapType(set *nftables.Set, m *knftables.Map) ([]byte, error) {
	dataOrder := uint32(byteorderInvalid)
	ud := func(keyOrder uint32, keyTypeof, dataTypeof []byte) []byte {
		b := userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_KEYBYTEORDER, keyOrder)
		b = userdata.AppendUint32(b, userdata.NFTNL_UDATA_SET_DATABYTEORDER, dataOrder)
		b = userdata.Append(b, userdata.NFTNL_UDATA_SET_KEY_TYPEOF, keyTypeof)
		if dataTypeof != nil {
			b = userdata.Append(b, userdata.NFTNL_UDATA_SET_DATA_TYPEOF, dataTypeof)
		}
		return userdata.AppendUint32(b, userdata.NFTNL_UDATA_SET_DATA_INTERVAL, 0)
	}
	switch {
	case m.TypeOf == "" && !set.Interval:
		var err error
		switch m.Type {
		case t.addrType.Name + " . inet_proto . inet_service : verdict":
			set.KeyType, err = nftables.ConcatSetType(t.addrType, nftables.TypeInetProto, nftables.TypeInetService)
		case "inet_proto . inet_service : verdict":
			set.KeyType, err = nftables.ConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
		default:
			return nil, fmt.Errorf("type %q", m.Type)
		}
		if err != nil {
			return nil, err
		}
		set.DataType = nftables.TypeVerdict
		return ud(byteorderInvalid, concatTypeofUdata, nil), nil
	case m.Type == "" && m.TypeOf == "meta mark : meta mark" && !set.Interval:
		// The DSR table's owner -> slot mark map.
		set.KeyType, set.KeyByteOrder, set.DataType = nftables.TypeMark, binaryutil.NativeEndian, nftables.TypeMark
		dataOrder = byteorderHost
		return ud(byteorderHost, metaMarkTypeof, metaMarkTypeof), nil
	case m.Type == "":
		// numgen random mod N : verdict, or : ipX daddr . PROTO dport, or : meta mark
		f := strings.Fields(m.TypeOf)
		if len(f) < 6 || f[0] != "numgen" || f[1] != "random" || f[2] != "mod" || f[4] != ":" {
			break
		}
		mod, err := strconv.ParseUint(f[3], 10, 32)
		if err != nil || mod == 0 {
			break
		}
		numgen := userdata.AppendUint32(nil, 0, unix.NFT_NG_RANDOM)
		numgen = userdata.AppendUint32(numgen, 1, uint32(mod))
		numgen = userdata.AppendUint32(numgen, 2, 0) // offset
		key := typeofUdata(exprTypeNumgen, numgen)
		set.KeyType, set.KeyByteOrder = nftables.TypeInteger, binaryutil.NativeEndian
		switch data := f[5:]; {
		case len(data) == 1 && data[0] == "verdict" && !set.Interval:
			set.DataType = nftables.TypeVerdict
			return ud(byteorderHost, key, typeofUdata(exprTypeVerdict, nil)), nil
		case len(data) == 2 && data[0] == "meta" && data[1] == "mark" && !set.Interval:
			set.DataType = nftables.TypeMark
			dataOrder = byteorderHost
			return ud(byteorderHost, key, metaMarkTypeof), nil
		case len(data) == 5 && data[0] == t.rules.ipX && data[1] == "daddr" && data[2] == "." && protoDescs[data[3]] != 0 && data[4] == "dport":
			dt, err := nftables.ConcatSetType(t.addrType, nftables.TypeInetService)
			if err != nil {
				return nil, err
			}
			set.DataType = dt
			fields := userdata.Append(nil, 0, t.rules.addrTypeof(nftrules.FieldDaddr))
			fields = userdata.Append(fields, 1, payloadTypeof(protoDescs[data[3]], fieldDport))
			return ud(byteorderHost, key, typeofUdata(exprTypeConcat, fields)), nil
		}
	}
	return nil, fmt.Errorf("declaration type %q typeof %q flags %q", m.Type, m.TypeOf, m.Flags)
}

// interval is a range of addresses, last included.
type interval struct{ first, last netip.Addr }

// intervalElements returns the elements nft writes for an anonymous set of prefixes and
// addresses: the ranges merged where they overlap or touch, each a start element and an
// interval-end element at the address after its last, and an interval end at the zero address
// unless a range starts there. A range that reaches the family's last address has no end
// element: nft marks its start as open in the element's userdata, and open is that start's key
// (nil if none).
func intervalElements(ivs []interval) (elems []nftables.SetElement, open []byte) {
	slices.SortFunc(ivs, func(a, b interval) int { return a.first.Compare(b.first) })
	var merged []interval
	for _, iv := range ivs {
		if n := len(merged); n > 0 {
			prev := &merged[n-1]
			next := prev.last.Next()
			if !next.IsValid() || iv.first.Compare(next) <= 0 {
				if iv.last.Compare(prev.last) > 0 {
					prev.last = iv.last
				}
				continue
			}
		}
		merged = append(merged, iv)
	}
	for _, iv := range merged {
		elems = append(elems, nftables.SetElement{Key: iv.first.AsSlice()})
		if end := iv.last.Next(); end.IsValid() {
			elems = append(elems, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		} else {
			open = iv.first.AsSlice()
		}
	}
	if len(merged) > 0 && !merged[0].first.IsUnspecified() {
		elems = append(elems, nftables.SetElement{Key: make([]byte, merged[0].first.BitLen()/8), IntervalEnd: true})
	}
	return elems, open
}

// openElemUdata is the userdata of the start of an interval without end (NFTNL_UDATA_SET_ELEM_FLAGS:
// NFTNL_SET_ELEM_F_INTERVAL_OPEN).
var openElemUdata = userdata.AppendUint32(nil, userdata.NFTNL_UDATA_SET_ELEM_FLAGS, 1)

// prefixInterval returns the addresses of p.
func prefixInterval(p netip.Prefix) interval {
	p = p.Masked()
	a := p.Addr().AsSlice()
	n := new(big.Int).SetBytes(a)
	host := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits())), big.NewInt(1))
	n.Or(n, host)
	last := n.FillBytes(make([]byte, len(a)))
	l, _ := netip.AddrFromSlice(last)
	return interval{p.Addr(), l}
}
