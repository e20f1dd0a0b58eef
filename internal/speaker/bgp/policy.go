package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// How paths reach peers with their own attributes.
//
// GoBGP keeps one global RIB: a locally added path goes to every peer. Each session has its own
// prefixes and attributes (advertisements name peers; localPref is for iBGP), so the global RIB
// holds one bare path per prefix (origin IGP, unspecified next hop, which GoBGP replaces by the
// session's local address) and one global export policy gives each peer its view: one statement
// per session and attribute set, matching the peer (neighbor set) and the prefixes (prefix set),
// adding the communities and LOCAL_PREF and accepting. The default export action is reject, so a
// peer gets nothing no statement accepts for it. The import policy, which GoBGP also applies to
// locally added paths, accepts those and rejects the rest: the speaker accepts no routes.

// The global policies' names.
const (
	exportPolicyName = "ironlb-export"
	importPolicyName = "ironlb-import"
)

// importPolicy accepts the speaker's own paths only.
func importPolicy() *api.Policy {
	return &api.Policy{Name: importPolicyName, Statements: []*api.Statement{{
		Name:       "ironlb-local",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}
}

// exportPolicy is the policy for a set of sessions, and what each peer is to receive.
type exportPolicy struct {
	req *api.SetPoliciesRequest
	// key identifies the policy's content: equal keys, equal policies.
	key string
	// perPeer maps each peer to its prefixes and their attribute keys.
	perPeer map[netip.Addr]map[netip.Prefix]string
	// prefixes is the union of all sessions' prefixes: the global RIB's content.
	prefixes map[netip.Prefix]bool
}

// attrKey identifies a path's attributes.
func attrKey(p bgpconfig.Path) string {
	var b strings.Builder
	for _, c := range p.Communities {
		b.WriteString(c.String())
		b.WriteByte(',')
	}
	b.WriteByte(';')
	for _, c := range p.LargeCommunities {
		b.WriteString(c.String())
		b.WriteByte(',')
	}
	b.WriteByte(';')
	if p.LocalPref != 0 {
		b.WriteString(strconv.FormatUint(uint64(p.LocalPref), 10))
	}
	return b.String()
}

// buildExportPolicy builds the policies (import and export: GoBGP replaces them together) of sessions (ordered by name, each with a distinct
// address, as bgpconfig.Build returns them).
func buildExportPolicy(sessions []bgpconfig.Session) exportPolicy {
	ep := exportPolicy{
		req:      &api.SetPoliciesRequest{},
		perPeer:  map[netip.Addr]map[netip.Prefix]string{},
		prefixes: map[netip.Prefix]bool{},
	}
	pol := &api.Policy{Name: exportPolicyName}
	var key strings.Builder
	for i, s := range sessions {
		view := map[netip.Prefix]string{}
		ep.perPeer[s.Addr] = view
		if len(s.Paths) == 0 {
			continue
		}
		// Group the session's prefixes by attributes, in a stable order.
		groups := map[string][]bgpconfig.Path{}
		for _, p := range s.Paths {
			k := attrKey(p)
			groups[k] = append(groups[k], p)
			view[p.Prefix] = k
			ep.prefixes[p.Prefix] = true
		}
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		slices.Sort(keys)

		nset := fmt.Sprintf("ironlb-n%d", i)
		ep.req.DefinedSets = append(ep.req.DefinedSets, &api.DefinedSet{
			DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: nset,
			List: []string{netip.PrefixFrom(s.Addr, s.Addr.BitLen()).String()},
		})
		fmt.Fprintf(&key, "peer %v\n", s.Addr)
		for j, k := range keys {
			paths := groups[k]
			pset := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: fmt.Sprintf("ironlb-p%d-%d", i, j)}
			fmt.Fprintf(&key, " attrs %s:", k)
			for _, p := range paths {
				bits := uint32(p.Prefix.Bits())
				pset.Prefixes = append(pset.Prefixes, &api.Prefix{IpPrefix: p.Prefix.String(), MaskLengthMin: bits, MaskLengthMax: bits})
				fmt.Fprintf(&key, " %v", p.Prefix)
			}
			key.WriteByte('\n')
			ep.req.DefinedSets = append(ep.req.DefinedSets, pset)

			p := paths[0]
			actions := &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT}
			if len(p.Communities) > 0 {
				cs := make([]string, len(p.Communities))
				for n, c := range p.Communities {
					cs[n] = c.String()
				}
				actions.Community = &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: cs}
			}
			if len(p.LargeCommunities) > 0 {
				cs := make([]string, len(p.LargeCommunities))
				for n, c := range p.LargeCommunities {
					cs[n] = c.String()
				}
				actions.LargeCommunity = &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: cs}
			}
			if p.LocalPref != 0 {
				actions.LocalPref = &api.LocalPrefAction{Value: p.LocalPref}
			}
			pol.Statements = append(pol.Statements, &api.Statement{
				Name: fmt.Sprintf("ironlb-s%d-%d", i, j),
				Conditions: &api.Conditions{
					NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: nset},
					PrefixSet:   &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: pset.Name},
				},
				Actions: actions,
			})
		}
	}
	ep.req.Policies = []*api.Policy{importPolicy(), pol}
	ep.key = key.String()
	return ep
}

// needsSoftReset reports whether a peer that kept its session must be sent its paths again
// because the policy changed what it gets for a prefix that stays in the global RIB. Prefixes added
// to or removed from the global RIB reach the peer by themselves.
func needsSoftReset(before, after map[netip.Prefix]string, added, removed map[netip.Prefix]bool) bool {
	for p, k := range before {
		if removed[p] {
			continue
		}
		if k2, ok := after[p]; !ok || k2 != k {
			return true
		}
	}
	for p := range after {
		if added[p] {
			continue
		}
		if _, ok := before[p]; !ok {
			return true
		}
	}
	return false
}
