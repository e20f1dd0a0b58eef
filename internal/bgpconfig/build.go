package bgpconfig

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"

	"github.com/ironlb/ironlb/internal/bfdprofile"
)

// Build computes the node's BGP State from in. Invalid objects are left out and reported, each as
// a *ConfigError, in a deterministic order; Build never fails as a whole and never panics.
func Build(in Input) (State, []*ConfigError) {
	var errs []*ConfigError
	note := func(err error) {
		if ce, ok := err.(*ConfigError); ok {
			errs = append(errs, ce)
		}
	}

	// BFD profiles and community aliases, which peers and advertisements refer to.
	profiles := map[string]bfdprofile.Profile{}
	for i := range in.BFDProfiles {
		p := &in.BFDProfiles[i]
		if _, dup := profiles[p.Name]; dup {
			note(&ConfigError{Kind: "BFDProfile", Name: p.Name, Err: errf(ErrConflict, "duplicate name")})
			continue
		}
		prof, err := parseBFDProfile(p)
		if err != nil {
			note(err)
			continue
		}
		profiles[p.Name] = prof
	}
	aliases, aerrs := parseAliases(in.Communities)
	errs = append(errs, aerrs...)

	// Peers: every BGPPeer is validated; those selecting this node become sessions, in name order.
	// The first to claim a peer address or an explicit router ID keeps it.
	peers := make([]*peer, 0, len(in.Peers))
	seen := map[string]bool{}
	for i := range in.Peers {
		p := &in.Peers[i]
		if seen[p.Name] {
			note(&ConfigError{Kind: "BGPPeer", Name: p.Name, Err: errf(ErrConflict, "duplicate name")})
			continue
		}
		seen[p.Name] = true
		pp, err := parsePeer(p, profiles, in.Passwords, in.UnusableSecrets)
		if err != nil {
			note(err)
			continue
		}
		if matchesAny(pp.selectors, in.Node.Labels) {
			peers = append(peers, pp)
		}
	}
	slices.SortFunc(peers, func(a, b *peer) int { return cmp.Compare(a.session.Name, b.session.Name) })
	var st State
	byAddr := map[netip.Addr]string{}
	var explicitID netip.Addr
	var explicitBy string
	sessions := make([]*Session, 0, len(peers))
	for _, p := range peers {
		s := p.session
		if other, dup := byAddr[s.Addr]; dup {
			note(&ConfigError{Kind: "BGPPeer", Name: s.Name, Field: "spec.peerAddress",
				Err: errf(ErrConflict, "peer address %v is already used by BGPPeer %s on this node", s.Addr, other)})
			continue
		}
		if p.routerID.IsValid() {
			if explicitID.IsValid() && p.routerID != explicitID {
				note(&ConfigError{Kind: "BGPPeer", Name: s.Name, Field: "spec.routerID",
					Err: errf(ErrConflict, "router ID %v differs from %v set by BGPPeer %s: a node has one router ID", p.routerID, explicitID, explicitBy)})
				continue
			}
			explicitID, explicitBy = p.routerID, s.Name
		}
		byAddr[s.Addr] = s.Name
		sessions = append(sessions, &s)
	}
	if len(sessions) > 0 {
		st.RouterID = explicitID
		if !st.RouterID.IsValid() && in.DefaultRouterID.Unmap().Is4() {
			st.RouterID = in.DefaultRouterID.Unmap()
		}
		for _, s := range sessions {
			if !st.RouterID.IsValid() && s.SourceAddr.Is4() {
				st.RouterID = s.SourceAddr
			}
		}
	}

	// Advertisements and pools.
	pools := map[string]*Pool{}
	for i := range in.Pools {
		pools[in.Pools[i].Name] = &in.Pools[i]
	}
	var ads []*advert
	for i := range in.Advertisements {
		ad, err := parseAdvert(&in.Advertisements[i], aliases, pools, in.Node)
		if err != nil {
			note(err)
			continue
		}
		ads = append(ads, ad)
	}

	// Services → paths per session.
	paths := make([]map[netip.Prefix]*Path, len(sessions))
	for i := range paths {
		paths[i] = map[netip.Prefix]*Path{}
	}
	svcs := make([]*Service, len(in.Services))
	for i := range in.Services {
		svcs[i] = &in.Services[i]
	}
	slices.SortStableFunc(svcs, func(a, b *Service) int { return cmp.Compare(a.Key, b.Key) })
	for _, svc := range svcs {
		ss := ServiceStatus{Key: svc.Key}
		ss.Reason, ss.Peers = advertise(svc, in.Node, pools, ads, sessions, paths)
		st.Services = append(st.Services, ss)
	}

	for i, s := range sessions {
		for _, p := range paths[i] {
			s.Paths = append(s.Paths, *p)
		}
		slices.SortFunc(s.Paths, func(a, b Path) int { return comparePrefix(a.Prefix, b.Prefix) })
		st.Sessions = append(st.Sessions, *s)
	}
	return st, errs
}

// advertise adds a Service's paths to the sessions and says why it is advertised or not.
func advertise(svc *Service, node Node, pools map[string]*Pool, ads []*advert, sessions []*Session,
	paths []map[netip.Prefix]*Path) (Reason, []string) {
	var addrs []netip.Addr
	for _, a := range svc.Addrs {
		if a = a.Unmap().WithZone(""); a.IsValid() && !a.IsUnspecified() && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return NoAddress, nil
	}
	pool := pools[svc.Pool]
	if pool == nil {
		return UnknownPool, nil
	}
	var selecting, onNode []*advert
	for _, ad := range ads {
		if ad.selectsPool(pool) && ad.selectsService(svc) {
			selecting = append(selecting, ad)
			if ad.selectsNode {
				onNode = append(onNode, ad)
			}
		}
	}
	switch {
	case len(selecting) == 0:
		return NoAdvertisement, nil
	case len(onNode) == 0:
		return NotSelected, nil
	case node.NetworkUnavailable:
		return NetworkUnavailable, nil
	case node.Excluded:
		return Excluded, nil
	}
	local, serving := false, false
	for _, e := range svc.Endpoints {
		if e.Ready || e.Serving {
			serving = true
			local = local || e.Node == node.Name
		}
	}
	switch {
	case svc.Local && !local:
		return NoLocalEndpoint, nil
	case !serving:
		return NoEndpoints, nil
	}

	var to []string
	for i, s := range sessions {
		for _, ad := range onNode {
			if len(ad.peers) > 0 && !ad.peers[s.Name] {
				continue
			}
			for _, a := range addrs {
				if a.Is4() != s.Addr.Is4() {
					continue
				}
				pfx := ad.prefix(a)
				p := paths[i][pfx]
				if p == nil {
					p = &Path{Prefix: pfx}
					paths[i][pfx] = p
				}
				p.Communities = mergeSorted(p.Communities, ad.communities, cmp.Compare[Community])
				p.LargeCommunities = mergeSorted(p.LargeCommunities, ad.large, LargeCommunity.compare)
				if s.IBGP {
					p.LocalPref = max(p.LocalPref, ad.localPref)
				}
				if !slices.Contains(to, s.Name) {
					to = append(to, s.Name)
				}
			}
		}
	}
	if len(to) == 0 {
		return NoPeer, nil
	}
	slices.Sort(to)
	return Announced, to
}

// mergeSorted returns the sorted union of have (sorted, unique) and add.
func mergeSorted[T any](have, add []T, compare func(a, b T) int) []T {
	for _, v := range add {
		i, found := slices.BinarySearchFunc(have, v, compare)
		if !found {
			have = slices.Insert(have, i, v)
		}
	}
	return have
}

// comparePrefix orders prefixes by address, then length.
func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

func itoa(i int) string { return strconv.Itoa(i) }
