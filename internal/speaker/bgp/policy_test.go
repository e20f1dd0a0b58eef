package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	api "github.com/osrg/gobgp/v4/api"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/ironlb/ironlb/internal/bgpconfig"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func TestBuildExportPolicy(t *testing.T) {
	sessions := []bgpconfig.Session{
		{Name: "a", Addr: addr("192.0.2.1"), IBGP: true, Paths: []bgpconfig.Path{
			{Prefix: pfx("198.51.100.1/32"), Communities: []bgpconfig.Community{65535<<16 | 65282}, LocalPref: 150},
			{Prefix: pfx("198.51.100.2/32"), Communities: []bgpconfig.Community{65535<<16 | 65282}, LocalPref: 150},
			{Prefix: pfx("198.51.100.3/32"), LargeCommunities: []bgpconfig.LargeCommunity{{GlobalAdmin: 1, LocalData1: 2, LocalData2: 3}}},
		}},
		{Name: "b", Addr: addr("2001:db8::1")},
		{Name: "c", Addr: addr("2001:db8::2"), Paths: []bgpconfig.Path{{Prefix: pfx("2001:db8:100::/64")}}},
	}
	ep := buildExportPolicy(sessions)
	accept := api.RouteAction_ROUTE_ACTION_ACCEPT
	want := &api.SetPoliciesRequest{
		DefinedSets: []*api.DefinedSet{
			{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: "ironlb-n0", List: []string{"192.0.2.1/32"}},
			{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: "ironlb-p0-0", Prefixes: []*api.Prefix{
				{IpPrefix: "198.51.100.1/32", MaskLengthMin: 32, MaskLengthMax: 32},
				{IpPrefix: "198.51.100.2/32", MaskLengthMin: 32, MaskLengthMax: 32}}},
			{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: "ironlb-p0-1", Prefixes: []*api.Prefix{
				{IpPrefix: "198.51.100.3/32", MaskLengthMin: 32, MaskLengthMax: 32}}},
			{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: "ironlb-n2", List: []string{"2001:db8::2/128"}},
			{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: "ironlb-p2-0", Prefixes: []*api.Prefix{
				{IpPrefix: "2001:db8:100::/64", MaskLengthMin: 64, MaskLengthMax: 64}}},
		},
		Policies: []*api.Policy{importPolicy(), {Name: exportPolicyName, Statements: []*api.Statement{
			{Name: "ironlb-s0-0", Conditions: cond("ironlb-n0", "ironlb-p0-0"), Actions: &api.Actions{RouteAction: accept,
				Community: &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: []string{"65535:65282"}},
				LocalPref: &api.LocalPrefAction{Value: 150}}},
			{Name: "ironlb-s0-1", Conditions: cond("ironlb-n0", "ironlb-p0-1"), Actions: &api.Actions{RouteAction: accept,
				LargeCommunity: &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: []string{"1:2:3"}}}},
			{Name: "ironlb-s2-0", Conditions: cond("ironlb-n2", "ironlb-p2-0"), Actions: &api.Actions{RouteAction: accept}},
		}}},
	}
	if diff := cmp.Diff(want, ep.req, protocmp.Transform()); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
	if len(ep.prefixes) != 4 || len(ep.perPeer) != 3 || len(ep.perPeer[addr("2001:db8::1")]) != 0 {
		t.Errorf("prefixes %v, per peer %v", ep.prefixes, ep.perPeer)
	}
	if again := buildExportPolicy(sessions); again.key != ep.key {
		t.Errorf("key not stable: %q vs %q", ep.key, again.key)
	}
	sessions[0].Paths[2].LargeCommunities = nil
	if changed := buildExportPolicy(sessions); changed.key == ep.key {
		t.Errorf("key did not change with the attributes")
	}

	// The policy is one GoBGP accepts.
	g, err := startServer(addr("10.0.0.1"), 64512, &gobgpLog{}, func(context.Context, event) {})
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	if err := g.setPolicy(ep); err != nil {
		t.Fatal(err)
	}
	var got []*api.PolicyAssignment
	err = g.s.ListPolicyAssignment(context.Background(), &api.ListPolicyAssignmentRequest{Name: "global"},
		func(a *api.PolicyAssignment) { got = append(got, a) })
	if err != nil || len(got) != 2 {
		t.Fatalf("assignments %v, %v", got, err)
	}
	for _, a := range got {
		if a.DefaultAction != api.RouteAction_ROUTE_ACTION_REJECT {
			t.Errorf("assignment %v: default action not reject", a)
		}
		if a.Direction == api.PolicyDirection_POLICY_DIRECTION_EXPORT && (len(a.Policies) != 1 || len(a.Policies[0].Statements) != 3) {
			t.Errorf("export assignment %v", a)
		}
		if a.Direction == api.PolicyDirection_POLICY_DIRECTION_IMPORT && (len(a.Policies) != 1 || a.Policies[0].Name != importPolicyName) {
			t.Errorf("import assignment %v", a)
		}
	}
}

func cond(nset, pset string) *api.Conditions {
	return &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: nset},
		PrefixSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: pset}}
}

func TestNeedsSoftReset(t *testing.T) {
	p1, p2, p3 := pfx("198.51.100.1/32"), pfx("198.51.100.2/32"), pfx("198.51.100.3/32")
	m := func(kv ...any) map[netip.Prefix]string {
		out := map[netip.Prefix]string{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(netip.Prefix)] = kv[i+1].(string)
		}
		return out
	}
	set := func(ps ...netip.Prefix) map[netip.Prefix]bool {
		out := map[netip.Prefix]bool{}
		for _, p := range ps {
			out[p] = true
		}
		return out
	}
	tests := []struct {
		name           string
		before, after  map[netip.Prefix]string
		added, removed map[netip.Prefix]bool
		want           bool
	}{
		{"unchanged", m(p1, "x"), m(p1, "x"), nil, nil, false},
		{"new prefix in the RIB", m(p1, "x"), m(p1, "x", p2, "y"), set(p2), nil, false},
		{"prefix gone from the RIB", m(p1, "x", p2, "y"), m(p1, "x"), nil, set(p2), false},
		{"attributes changed", m(p1, "x"), m(p1, "z"), nil, nil, true},
		{"now sent to this peer too", m(p1, "x"), m(p1, "x", p3, "x"), nil, nil, true},
		{"no longer sent to this peer", m(p1, "x", p3, "x"), m(p1, "x"), nil, nil, true},
		{"new peer view", nil, m(p3, "x"), nil, nil, true},
	}
	for _, tt := range tests {
		if got := needsSoftReset(tt.before, tt.after, tt.added, tt.removed); got != tt.want {
			t.Errorf("%s: needsSoftReset = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestGoBGPLog: records pass through from the configured level, and GoBGP's records of failed
// attempts become attempts of their peer, which attemptReason explains.
func TestGoBGPLog(t *testing.T) {
	var got []string
	var lines int
	sess := &bgpconfig.Session{PeerASN: 64513, LocalASN: 64512, Password: "x"}
	h := &gobgpLog{level: slog.LevelWarn, next: countHandler{&lines},
		onAttempt: func(peer netip.Addr, a attempt) {
			reason, msg, ok := attemptReason(sess, a)
			got = append(got, fmt.Sprintf("%v %v %s: %s", peer, ok, reason, msg))
		}}
	log := slog.New(h).With(slog.String("Topic", "Peer"), slog.String("Key", "192.0.2.1"))
	log.Debug("failed to connect", slog.String("Error", "dial tcp 192.0.2.1:179: i/o timeout"))
	log.Debug("try to connect")
	log.Info("sent notification", slog.Int("Code", 2), slog.Int("Subcode", 2), slog.String("Data", ""))
	log.Info("received notification", slog.Int("Code", 2), slog.Int("Subcode", 2), slog.Any("Data", []byte{}))
	log.Info("sent notification", slog.Int("Code", 5), slog.Int("Subcode", 1))
	log.Warn("something odd")
	slog.New(h).Info("received notification", slog.String("Key", "2001:db8::1"), slog.Int("Code", 6), slog.Int("Subcode", 2))
	want := []string{
		"192.0.2.1 true ConnectFailed: dial tcp 192.0.2.1:179: i/o timeout (TCP MD5 is on: a password mismatch also shows as a timeout)",
		"192.0.2.1 true BadPeerAS: code 2(open) subcode 2(bad peer as): the peer's AS number is not 64513",
		"192.0.2.1 true NotificationReceived: code 2(open) subcode 2(bad peer as): the peer does not accept our AS number 64512",
		"192.0.2.1 false : ",
		"2001:db8::1 true NotificationReceived: code 6(cease) subcode 2(administrative shutdown)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	if lines != 1 {
		t.Errorf("%d records passed, want the warning only", lines)
	}
}

type countHandler struct{ n *int }

func (h countHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (h countHandler) Handle(context.Context, slog.Record) error { *h.n++; return nil }
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h countHandler) WithGroup(string) slog.Handler             { return h }
