package bgpconfig

import (
	"net/netip"
	"time"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bfdprofile"
	"github.com/ironlb/ironlb/internal/election"
)

// Input is everything Build looks at. Objects are read, never modified.
type Input struct {
	// Node is the node this speaker runs on.
	Node Node
	// DefaultRouterID is the router ID when no selected BGPPeer sets routerID: normally the node's
	// IPv4 InternalIP. The zero Addr falls back to the first IPv4 source address of a session.
	DefaultRouterID netip.Addr

	Peers          []v1beta2.BGPPeer
	Advertisements []v1beta1.BGPAdvertisement
	BFDProfiles    []v1beta1.BFDProfile
	Communities    []v1beta1.Community
	Pools          []Pool
	// Passwords maps the name of a Secret a BGPPeer's passwordSecret names to its password (the
	// "password" key of a kubernetes.io/basic-auth Secret in the configuration namespace, as MetalLB
	// reads it). A missing entry makes the BGPPeer invalid: ErrUnusableSecret when UnusableSecrets
	// names the Secret, else ErrSecretNotFound.
	Passwords map[string]string
	// UnusableSecrets maps the name of each Secret of the configuration namespace that holds no
	// password MetalLB would read to why, naming it ("Secret \"x\" has type Opaque, want
	// kubernetes.io/basic-auth"): a BGPPeer naming it is told so rather than that it is missing.
	UnusableSecrets map[string]string

	// Services are the LoadBalancer Services with addresses, in any order.
	Services []Service
}

// Node is this speaker's node.
type Node struct {
	Name   string
	Labels map[string]string
	// Excluded is true when the node carries election.ExcludeLabel and the label is honoured: its
	// sessions stay up, but it advertises nothing.
	Excluded bool
	// NetworkUnavailable is true when the node's NetworkUnavailable condition is True; it then
	// advertises nothing.
	NetworkUnavailable bool
}

// Pool is an IPAddressPool, as far as advertisements care.
type Pool struct {
	Name   string
	Labels map[string]string
	// Entries are the pool's spec.addresses, each as CIDRs (a range split into prefixes). When set,
	// an advertisement whose aggregation length is shorter than the shortest prefix of an entry is
	// invalid (ErrInvalidAggregation), as in MetalLB (validateBGPAdvPerPool: a range passes when one
	// of its prefixes is as long as the aggregate).
	Entries [][]netip.Prefix
}

// Service is a LoadBalancer Service with its addresses.
type Service struct {
	// Key names the Service ("namespace/name").
	Key string
	// Labels are matched against the advertisements' serviceSelectors.
	Labels map[string]string
	// Pool is the IPAddressPool its addresses come from.
	Pool string
	// Addrs are its load-balancer addresses. IPv4-mapped IPv6 addresses are unmapped.
	Addrs []netip.Addr
	// Local is true for externalTrafficPolicy: Local.
	Local bool
	// Endpoints are the Service's endpoints, from its EndpointSlices.
	Endpoints []election.Endpoint
}

// State is what the node does in BGP mode.
type State struct {
	// RouterID is the BGP identifier of the node's router, shared by all sessions; the zero Addr
	// when there are no sessions.
	RouterID netip.Addr
	// Sessions are the BGP sessions to open, ordered by Name.
	Sessions []Session
	// Services says, for every input Service, whether and to which peers it is advertised, ordered
	// by Key.
	Services []ServiceStatus
}

// Session is one BGP session to open, from one BGPPeer.
type Session struct {
	// Name is the BGPPeer's name.
	Name string
	// Addr and Port are the peer's address and port (default 179).
	Addr netip.Addr
	Port uint16
	// SourceAddr is the local address to connect from; the zero Addr lets routing pick.
	SourceAddr netip.Addr
	// LocalASN is the AS number presented to the peer: the BGPPeer's localASN, else its myASN.
	LocalASN uint32
	// PeerASN is the AS number the peer must present; 0 with DynamicASN external, which accepts any
	// AS number other than LocalASN.
	PeerASN uint32
	// DynamicASN is the BGPPeer's dynamicASN ("" when peerASN is set). For internal, PeerASN is
	// LocalASN.
	DynamicASN v1beta2.DynamicASNMode
	// IBGP is true when the peer is in LocalASN's AS.
	IBGP bool
	// HoldTime and KeepaliveTime are the timers to propose, after MetalLB's defaulting (90 s and
	// 30 s when unset). HoldTime 0 means no keepalives.
	HoldTime, KeepaliveTime time.Duration
	// ConnectTime is the time between connection attempts; 0 leaves it to the adapter.
	ConnectTime time.Duration
	// EBGPMultiHop allows a peer more than one hop away.
	EBGPMultiHop bool
	// Password is the TCP MD5 key (RFC 2385); empty for none.
	Password string
	// BFDProfile is the name of the BFD profile; "" for no BFD. BFD is then its settings.
	BFDProfile string
	BFD        bfdprofile.Profile
	// GracefulRestart is the BGPPeer's enableGracefulRestart.
	GracefulRestart bool
	// Paths are the paths to advertise over the session, ordered by prefix. They all have the
	// family of Addr.
	Paths []Path
}

// Path is one prefix advertised over one session, with its attributes.
type Path struct {
	Prefix netip.Prefix
	// Communities and LargeCommunities are sorted and without duplicates.
	Communities      []Community
	LargeCommunities []LargeCommunity
	// LocalPref is the LOCAL_PREF attribute; 0 leaves it to the BGP implementation's default (100).
	// Always 0 on eBGP sessions.
	LocalPref uint32
}

// ServiceStatus says whether a Service's addresses are advertised from this node.
type ServiceStatus struct {
	Key string
	// Reason is Announced, or why the Service is not advertised from this node.
	Reason Reason
	// Peers are the BGPPeers the Service's addresses are advertised to from this node, sorted: the
	// peers of MetalLB's ServiceBGPStatus.
	Peers []string
}

// Reason says why a Service's addresses are or are not advertised from this node. Reasons are
// CamelCase strings fit for Kubernetes event reasons and metric labels.
type Reason string

// The reasons, in the order Build checks them.
const (
	// Announced: the addresses are advertised to ServiceStatus.Peers.
	Announced Reason = "Announced"
	// NoAddress: the Service has no valid address.
	NoAddress Reason = "NoAddress"
	// UnknownPool: the Service's pool is not among Input.Pools.
	UnknownPool Reason = "UnknownPool"
	// NoAdvertisement: no valid BGPAdvertisement selects the Service's pool and the Service.
	NoAdvertisement Reason = "NoAdvertisement"
	// NotSelected: no BGPAdvertisement selecting the Service selects this node.
	NotSelected Reason = "NotSelected"
	// NetworkUnavailable: the node's NetworkUnavailable condition is True.
	NetworkUnavailable Reason = "NetworkUnavailable"
	// Excluded: the node carries the exclude-from-external-load-balancers label.
	Excluded Reason = "Excluded"
	// NoLocalEndpoint: externalTrafficPolicy Local, and no ready or serving endpoint is on this node.
	NoLocalEndpoint Reason = "NoLocalEndpoint"
	// NoEndpoints: no ready or serving endpoint on any node.
	NoEndpoints Reason = "NoEndpoints"
	// NoPeer: no session of this node, of the addresses' family, is named by the advertisements.
	NoPeer Reason = "NoPeer"
)
