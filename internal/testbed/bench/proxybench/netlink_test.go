package proxybench

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func TestServiceKey(t *testing.T) {
	// 10.201.0.10 . tcp . 80 as nft stores it: address, protocol and port each in a 4-byte field.
	want := []byte{10, 201, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0}
	if got := ServiceKey(netip.MustParseAddr("10.201.0.10"), 80); !bytes.Equal(got, want) {
		t.Errorf("ServiceKey = %v, want %v", got, want)
	}
	if got := ServiceKey(netip.MustParseAddr("10.96.0.1"), 8443); !bytes.Equal(got[8:10], []byte{0x20, 0xfb}) {
		t.Errorf("port 8443 in network byte order: %v", got[8:10])
	}
}

// attr is a decoded netlink attribute tree, for comparing requests.
type attr struct {
	Type   uint16
	Nested bool
	Data   []byte
	Kids   []attr
}

func decodeAttrs(t *testing.T, b []byte, nested map[uint16]bool) []attr {
	t.Helper()
	as, err := netlink.UnmarshalAttributes(b)
	if err != nil {
		t.Fatal(err)
	}
	var out []attr
	for _, a := range as {
		x := attr{Type: a.Type &^ (netlink.Nested | netlink.NetByteOrder), Nested: a.Type&netlink.Nested != 0}
		if nested[x.Type] && x.Nested {
			x.Kids = decodeAttrs(t, a.Data, nested)
		} else {
			x.Data = a.Data
		}
		out = append(out, x)
	}
	return out
}

func TestElementRequest(t *testing.T) {
	key := ServiceKey(netip.MustParseAddr("10.201.0.10"), 80)
	b, err := elementRequest(unix.NFPROTO_IPV4, "kube-proxy", "service-ips", key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:4], []byte{unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0}) {
		t.Errorf("nfgenmsg = %v", b[:4])
	}
	// NFTA_SET_ELEM_LIST_ELEMENTS (3) > NFTA_LIST_ELEM (1) > NFTA_SET_ELEM_KEY (1) > NFTA_DATA_VALUE (1):
	// the kernel parses the three levels with nla_parse_nested, which wants NLA_F_NESTED.
	got := decodeAttrs(t, b[4:], map[uint16]bool{unix.NFTA_SET_ELEM_LIST_ELEMENTS: true, unix.NFTA_LIST_ELEM: true})
	want := []attr{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: []byte("kube-proxy\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: []byte("service-ips\x00")},
		{Type: unix.NFTA_SET_ELEM_LIST_ELEMENTS, Nested: true, Kids: []attr{
			{Type: unix.NFTA_LIST_ELEM, Nested: true, Kids: []attr{
				{Type: unix.NFTA_SET_ELEM_KEY, Nested: true, Kids: []attr{{Type: unix.NFTA_DATA_VALUE, Data: key}}},
			}},
		}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("request (-want +got):\n%s", d)
	}
}

func nftMsg(t *testing.T, msgType uint16, attrs ...netlink.Attribute) netlink.Message {
	t.Helper()
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		t.Fatal(err)
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msgType)},
		Data:   append([]byte{unix.NFPROTO_IPV4, 0, 0, 0}, b...),
	}
}

func TestChainOf(t *testing.T) {
	str := func(typ uint16, s string) netlink.Attribute {
		return netlink.Attribute{Type: typ, Data: []byte(s + "\x00")}
	}
	epChain := "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
	for _, tc := range []struct {
		name         string
		msg          netlink.Message
		table, chain string
		ok           bool
	}{
		{"new chain", nftMsg(t, unix.NFT_MSG_NEWCHAIN, str(unix.NFTA_CHAIN_TABLE, "kube-proxy"),
			netlink.Attribute{Type: unix.NFTA_CHAIN_HANDLE, Data: make([]byte, 8)}, str(unix.NFTA_CHAIN_NAME, epChain)),
			"kube-proxy", epChain, true},
		{"new rule", nftMsg(t, unix.NFT_MSG_NEWRULE, str(unix.NFTA_RULE_TABLE, "ironlb"), str(unix.NFTA_RULE_CHAIN, epChain)),
			"ironlb", epChain, true},
		{"new set element", nftMsg(t, unix.NFT_MSG_NEWSETELEM, str(unix.NFTA_SET_ELEM_LIST_TABLE, "ironlb")), "", "", false},
		{"generation", nftMsg(t, unix.NFT_MSG_NEWGEN), "", "", false},
		{"another subsystem", netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(1<<8 | unix.NFT_MSG_NEWCHAIN)},
			Data: nftMsg(t, unix.NFT_MSG_NEWCHAIN, str(unix.NFTA_CHAIN_NAME, "x")).Data}, "", "", false},
		{"truncated", netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWCHAIN)}, Data: []byte{2, 0}},
			"", "", false},
		{"garbage attributes", netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWCHAIN)},
			Data: []byte{2, 0, 0, 0, 200, 0, 3, 0}}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, chain, ok := ChainOf(tc.msg)
			if table != tc.table || chain != tc.chain || ok != tc.ok {
				t.Errorf("ChainOf = %q, %q, %v; want %q, %q, %v", table, chain, ok, tc.table, tc.chain, tc.ok)
			}
		})
	}
}
