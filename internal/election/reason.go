package election

// Reason says why a node announces or does not announce an address. Reasons are CamelCase strings fit
// for Kubernetes event reasons and metric labels.
//
// Decision.Reason is Announced or one of the address-level reasons (NoAddress, NoAdvertisement,
// NoEndpoints, NoLocalEndpoint, NoEligibleNode). Decision.PerNode holds node-level reasons; a node that
// passes every node-level rule of an address nobody may announce gets the address-level reason.
type Reason string

// Address-level reasons.
const (
	// Announced: Decision.Node announces the addresses.
	Announced Reason = "Announced"
	// NoAddress: no Service of the input has a valid address.
	NoAddress Reason = "NoAddress"
	// NoAdvertisement: no L2Advertisement selects the addresses.
	NoAdvertisement Reason = "NoAdvertisement"
	// NoEndpoints: no Service holding the addresses has an endpoint that can serve, on any node
	// (MetalLB's activeEndpointExists).
	NoEndpoints Reason = "NoEndpoints"
	// NoEligibleNode: no node passes every rule; PerNode says why for each.
	NoEligibleNode Reason = "NoEligibleNode"
)

// Node-level reasons that make a node ineligible, in the order they are checked: a node gets the first
// that applies.
const (
	// DuplicateNode: the node's name is listed more than once.
	DuplicateNode Reason = "DuplicateNode"
	// SpeakerDown: the failure detector does not see the node's speaker alive (Node.Alive is false).
	SpeakerDown Reason = "SpeakerDown"
	// NotReady: the speaker is alive but not ready to announce (Node.ReadySince is zero).
	NotReady Reason = "NotReady"
	// Excluded: the node carries the exclude-from-external-load-balancers label.
	Excluded Reason = "Excluded"
	// NetworkUnavailable: the node's NetworkUnavailable condition is True.
	NetworkUnavailable Reason = "NetworkUnavailable"
	// NotSelected: no advertisement's node selectors select the node.
	NotSelected Reason = "NotSelected"
	// NoInterface: every advertisement selecting the node names interfaces, and the node has none of
	// them.
	NoInterface Reason = "NoInterface"
	// NoLocalEndpoint: a Service with externalTrafficPolicy Local has no ready or serving endpoint on
	// the node. As Decision.Reason: some nodes pass every other rule, but none has the local endpoints.
	NoLocalEndpoint Reason = "NoLocalEndpoint"
)

// Node-level reasons of eligible nodes that do not announce.
const (
	// ServingOnly: an externalTrafficPolicy Local Service has only serving (terminating) endpoints on
	// the node, while other eligible nodes have ready ones.
	ServingOnly Reason = "ServingOnly"
	// HoldDown: the node ranks ahead of the announcer but has been ready for less than Input.HoldDown.
	HoldDown Reason = "HoldDown"
	// StickyCurrent: the node ranks ahead of the announcer, but Input.Sticky keeps the addresses on
	// the current announcer.
	StickyCurrent Reason = "StickyCurrent"
	// Outranked: the node is eligible and ranks after the announcer.
	Outranked Reason = "Outranked"
)

// Eligible reports whether r is given to nodes that may announce the addresses but were not chosen
// (ServingOnly, HoldDown, StickyCurrent, Outranked).
func (r Reason) Eligible() bool {
	switch r {
	case ServingOnly, HoldDown, StickyCurrent, Outranked:
		return true
	}
	return false
}

// String returns r as a string.
func (r Reason) String() string { return string(r) }
