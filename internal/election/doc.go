// Package election decides which node announces each LoadBalancer address in layer-2 mode, and, in
// spread mode, which node answers each client. It is pure and deterministic: standard library only, no
// Kubernetes types, no I/O, no goroutines, no clocks (the caller passes now). Every speaker runs the
// same election over its own view of the cluster, so speakers that see the same nodes elect the same
// announcer without talking to each other.
//
// The speaker turns Nodes, its failure detector's verdicts, L2Advertisements, Services and
// EndpointSlices into the plain model here (Node, Advertisement, Service, Endpoint), groups the Services
// with Group, and calls Elect once per group. Each Decision names the announcer, or says why there is
// none, and says for every other node why it does not announce (PerNode), for status, events and
// metrics.
//
// # Rules
//
// A node is eligible for an address when all of these hold; the first that fails is its Reason:
//
//  1. its name is listed once (DuplicateNode);
//  2. its speaker is alive by ironlb's own failure detector (SpeakerDown) and ready (NotReady);
//  3. it does not carry node.kubernetes.io/exclude-from-external-load-balancers (Excluded);
//  4. its NetworkUnavailable condition is not True (NetworkUnavailable);
//  5. an L2Advertisement selecting the address selects the node by its nodeSelectors (NotSelected);
//  6. one such advertisement names no interfaces, or the node has one it names (NoInterface);
//  7. for externalTrafficPolicy Local, it holds a ready or serving endpoint of every Local Service on
//     the address that has endpoints at all (NoLocalEndpoint).
//
// The address is not announced at all when no Service has a valid address (NoAddress), no
// advertisement selects it (NoAdvertisement), or no Service on it has an endpoint that can serve,
// ready or serving, on any node (NoEndpoints).
//
// Eligible nodes whose local endpoints are ready are preferred to nodes whose endpoints are only
// serving, that is terminating (ServingOnly). Among the preferred ones, nodes are ordered by Rank:
// sha256(node + "#" + key address) compared as bytes, MetalLB's order, so addresses spread evenly over
// nodes and removing a node moves only the addresses it announced. The announcer is the first in that
// order, subject to the failback policy (Input.HoldDown, Input.Sticky) described below.
//
// All addresses of one Input go to one node. The election is keyed on the first address of the
// Service, as MetalLB's is, so both families of a dual-stack Service land together. Group puts Services
// sharing an address into one Input, keyed on the smallest of their first addresses (the shared
// address itself in the usual case), so shared-IP Services always land on the same node.
//
// # Where ironlb differs from MetalLB
//
//   - Failback. MetalLB's election is a hash over live nodes, so a returning node takes its addresses
//     back as soon as it is seen, ready or not; seed 003 and the failover measurements
//     (shared/research/metallb-failover.md) show the gap this causes. Here a node must have been ready
//     for Input.HoldDown before it displaces an eligible announcer, and in a failover nodes ready for
//     HoldDown are preferred over ones that just came up (so a flapping node is not handed addresses).
//     With Input.Sticky a returning node never takes addresses back: they move only when their node
//     fails. The zero policy (HoldDown 0, Sticky false) is MetalLB's, and gives MetalLB's winner.
//   - Readiness. The node must be alive by ironlb's detector and ready; MetalLB uses memberlist
//     membership only.
//   - Interfaces. When the rank winner lacks every interface its advertisements name, MetalLB still
//     elects it, and it fails to announce (announceFailed); here it is not eligible and the next node in
//     rank announces.
//   - Shared addresses. MetalLB elects per Service, so Services sharing an address whose candidate sets
//     differ may land on different nodes (MetalLB issues #558, #968); here the election is per group of
//     addresses and the Local endpoint rule asks for endpoints of every Local Service on the address.
//   - Terminating endpoints. MetalLB treats ready and serving endpoints alike; here a node with only
//     serving (terminating) local endpoints announces only when no node has ready ones.
//   - Spread mode (Input.Spread, Ring), which MetalLB lacks: one address is answered
//     through several nodes. Each client's ARP request or neighbor solicitation is answered with the
//     MAC of the node that rendezvous hashing of (address, node, client) picks among Decision.Spread,
//     as Linux bonding's balance-alb spreads received traffic over its ports. When a node leaves, only
//     the clients it had move; when one joins (after its hold-down), about 1/N of clients move to it.
//     Spread mode is stateless: Sticky does not apply to it. Decision.Node is still elected and remains
//     the address's primary (status, gratuitous announcements to all clients).
//
// Timing is the caller's: Elect is re-run when the detector, Nodes, advertisements, Services or
// endpoints change, and when a node's hold-down ends (ReadySince + HoldDown). Views differ between
// speakers for a moment, so a node that loses an address while still eligible keeps answering until
// the winner takes it (Decision.Lingers): a handover no failure caused is make-before-break.
package election
