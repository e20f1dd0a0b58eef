package bgpconfig

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/internal/adscope"
)

// advert is a validated BGPAdvertisement.
type advert struct {
	name         string
	aggV4, aggV6 int
	localPref    uint32
	communities  []Community
	large        []LargeCommunity
	scope        adscope.Scope // the pools and Services it covers (shared with layer 2 and ironlb status)
	selectsNode  bool
	peers        map[string]bool // empty: every peer
}

// parseAliases reads the Community objects into alias → value. Invalid or duplicate aliases are
// left out with an error on their Community.
func parseAliases(cs []v1beta1.Community) (map[string]CommunityValue, []*ConfigError) {
	aliases := map[string]CommunityValue{}
	var errs []*ConfigError
	for i := range cs {
		c := &cs[i]
		for j, a := range c.Spec.Communities {
			field := "spec.communities[" + itoa(j) + "]"
			v, err := ParseCommunity(a.Value)
			if err != nil {
				errs = append(errs, &ConfigError{Kind: "Community", Name: c.Name, Field: field, Err: err})
				continue
			}
			if a.Name == "" {
				errs = append(errs, &ConfigError{Kind: "Community", Name: c.Name, Field: field, Err: errf(ErrUnknownCommunity, "alias without a name")})
				continue
			}
			if _, dup := aliases[a.Name]; dup {
				errs = append(errs, &ConfigError{Kind: "Community", Name: c.Name, Field: field, Err: errf(ErrConflict, "alias %q is defined twice", a.Name)})
				continue
			}
			aliases[a.Name] = v
		}
	}
	return aliases, errs
}

// parseAdvert validates a BGPAdvertisement against the aliases and pools. Every error is a
// *ConfigError.
func parseAdvert(a *v1beta1.BGPAdvertisement, aliases map[string]CommunityValue, pools map[string]*Pool, node Node) (*advert, error) {
	bad := func(field string, err error) error {
		return &ConfigError{Kind: "BGPAdvertisement", Name: a.Name, Field: field, Err: err}
	}
	sp := &a.Spec
	ad := &advert{name: a.Name, aggV4: 32, aggV6: 128, localPref: sp.LocalPref, peers: map[string]bool{}, scope: adscope.Scope{Pools: sp.IPAddressPools}}
	if sp.AggregationLength != nil {
		ad.aggV4 = int(*sp.AggregationLength)
		if ad.aggV4 < 1 || ad.aggV4 > 32 {
			return nil, bad("spec.aggregationLength", errf(ErrInvalidAggregation, "%d is not within 1–32", ad.aggV4))
		}
	}
	if sp.AggregationLengthV6 != nil {
		ad.aggV6 = int(*sp.AggregationLengthV6)
		if ad.aggV6 < 1 || ad.aggV6 > 128 {
			return nil, bad("spec.aggregationLengthV6", errf(ErrInvalidAggregation, "%d is not within 1–128", ad.aggV6))
		}
	}
	if len(sp.ServiceSelectors) > 0 && (ad.aggV4 != 32 || ad.aggV6 != 128) {
		return nil, bad("spec.serviceSelectors", errf(ErrInvalidAggregation,
			"serviceSelectors cannot be combined with an aggregation length other than 32 and 128"))
	}
	for i, c := range sp.Communities {
		v, ok := aliases[c]
		if !ok {
			var err error
			if v, err = ParseCommunity(c); err != nil {
				if errors.Is(err, ErrUnknownCommunity) {
					err = errf(ErrUnknownCommunity, "%q is neither a community nor a Community alias", c)
				}
				return nil, bad("spec.communities["+itoa(i)+"]", err)
			}
		}
		if v.IsLarge {
			ad.large = append(ad.large, v.Large)
		} else {
			ad.communities = append(ad.communities, v.Standard)
		}
	}
	var err error
	if ad.scope.PoolSelectors, err = selectors(sp.IPAddressPoolSelectors); err != nil {
		return nil, bad("spec.ipAddressPoolSelectors", err)
	}
	nodeSels, err := selectors(sp.NodeSelectors)
	if err != nil {
		return nil, bad("spec.nodeSelectors", err)
	}
	ad.selectsNode = matchesAny(nodeSels, node.Labels)
	if ad.scope.ServiceSelectors, err = selectors(sp.ServiceSelectors); err != nil {
		return nil, bad("spec.serviceSelectors", err)
	}
	for _, p := range sp.Peers {
		ad.peers[p] = true
	}

	// An aggregate shorter than a pool's own prefixes would announce addresses outside the pool.
	// MetalLB checks each entry of spec.addresses against its shortest prefix; so do we, so that
	// every configuration MetalLB accepts is accepted.
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := pools[n]
		if !ad.selectsPool(p) {
			continue
		}
		for _, entry := range p.Entries {
			if len(entry) == 0 {
				continue
			}
			shortest := slices.MinFunc(entry, func(a, b netip.Prefix) int { return a.Bits() - b.Bits() })
			agg, field := ad.aggV4, "spec.aggregationLength"
			if shortest.Addr().Unmap().Is6() {
				agg, field = ad.aggV6, "spec.aggregationLengthV6"
			}
			if agg < shortest.Bits() {
				return nil, bad(field, errf(ErrInvalidAggregation,
					"/%d is shorter than prefix %v of pool %q", agg, shortest, p.Name))
			}
		}
	}
	return ad, nil
}

// selectsPool reports whether the advertisement applies to pool p.
func (ad *advert) selectsPool(p *Pool) bool { return ad.scope.SelectsPool(p.Name, p.Labels) }

// selectsService reports whether the advertisement's serviceSelectors let the Service through.
func (ad *advert) selectsService(svc *Service) bool { return ad.scope.SelectsService(svc.Labels) }

// prefix is the prefix addr is advertised as.
func (ad *advert) prefix(addr netip.Addr) netip.Prefix {
	bits := ad.aggV4
	if addr.Is6() {
		bits = ad.aggV6
	}
	return netip.PrefixFrom(addr, bits).Masked()
}
