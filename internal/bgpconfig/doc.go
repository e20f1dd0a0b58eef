// Package bgpconfig computes what one node's speaker does in BGP mode: which BGP sessions it opens
// and which paths it advertises over each, from MetalLB's BGPPeer (v1beta2), BGPAdvertisement,
// BFDProfile and Community objects, the node's name and labels, and the Services' addresses with
// their endpoints. It is pure and deterministic: no GoBGP, no client-go, no I/O, no goroutines.
// The speaker converts Kubernetes objects once, calls Build on every change, and hands the State to
// the GoBGP adapter (package speaker/bgp), which makes the routers see it. The controller's
// admission webhook (through package config) runs the same Build to reject what the speakers would
// leave out, which is why the model lives outside the speaker: roles import it, it imports no role.
// A session's BFD settings are a bfdprofile.Profile, the pure type the BFD adapter (package
// speaker/bfd) runs.
//
// # Sessions
//
// A BGPPeer becomes a Session on this node when its nodeSelectors select the node (no selectors:
// every node). Its timers follow MetalLB: unset, hold 90 s and keepalive 30 s; with one of the two
// set, the other is derived (keepalive = hold / 3, hold = 3 × keepalive); hold must be 0 or at least
// 3 s, and keepalive less than hold (0 with hold 0). The AS number presented to the peer is localASN
// when set, else myASN; the session is iBGP when the peer's AS number (peerASN, or dynamicASN
// internal) equals it. password and passwordSecret are the TCP MD5 key; the Secret's content comes
// in Input.Passwords, resolved by the caller. bfdProfile becomes a bfdprofile.Profile.
//
// One node runs one BGP router: every session shares the router ID (the first explicit routerID by
// BGPPeer name, else Input.DefaultRouterID, else the first IPv4 source address) and a peer address
// may be used by one session only. A BGPPeer that contradicts an earlier one gets ErrConflict and is
// left out. BGP unnumbered (interface), VRFs, and BFD on multi-hop sessions are ErrUnsupported.
//
// # Paths
//
// A Service's addresses are advertised from this node, to each session of the same address family
// that one of its BGPAdvertisements names in peers (empty: every session), when all of these hold;
// the first that fails is the Service's Reason:
//
//  1. it has an address (NoAddress) from a known pool (UnknownPool);
//  2. an advertisement selects the pool (by name, by pool selector, or naming no pool at all) and
//     the Service (serviceSelectors) (NoAdvertisement);
//  3. one of those selects this node by its nodeSelectors (NotSelected);
//  4. the node is not NetworkUnavailable (NetworkUnavailable) nor excluded from load balancers
//     (Excluded);
//  5. with externalTrafficPolicy Local, a ready or serving endpoint is on this node
//     (NoLocalEndpoint); otherwise one is on some node (NoEndpoints);
//  6. some session is left to advertise to (NoPeer).
//
// Each address becomes the prefix of the advertisement's aggregationLength (IPv4, default 32) or
// aggregationLengthV6 (default 128). When several advertisements give the same prefix to one
// session, their communities are merged and the highest localPref wins. localPref is set on iBGP
// sessions only, as in MetalLB. Communities are standard ("65535:65282"), large ("large:1:2:3") or
// the name of a Community alias.
//
// # Errors
//
// Build never fails as a whole: an invalid object is left out, with a *ConfigError naming it, and
// everything else is still computed. Every ConfigError wraps one of the Err sentinels. A caller that
// prefers MetalLB's behaviour (keep the last good configuration while any object is invalid) keeps
// its previous State when Build reports errors; LastValid, which the speaker uses, keeps the last
// valid version of each invalid object instead.
package bgpconfig
