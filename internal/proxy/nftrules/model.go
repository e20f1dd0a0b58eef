package nftrules

import (
	"fmt"
	"net/netip"
	"time"
)

// Protocol is a Service port's transport protocol, spelled as nft spells it.
type Protocol string

// The protocols a Service port can use.
const (
	TCP  Protocol = "tcp"
	UDP  Protocol = "udp"
	SCTP Protocol = "sctp"
)

func (p Protocol) valid() bool { return p == TCP || p == UDP || p == SCTP }

// Algorithm is how a Service picks an endpoint for a new connection. The zero value is Random.
type Algorithm uint8

const (
	// Random picks each endpoint with equal probability, as kube-proxy does
	// (`numgen random mod N`).
	Random Algorithm = iota
	// RoundRobin hands new connections to the endpoints in turn (`numgen inc mod N`); the turn is
	// kept per rule, so it restarts when the Service's endpoints change.
	RoundRobin
	// Maglev hashes the client's address into a Maglev lookup table (`jhash ip saddr mod M`), so a
	// client keeps its endpoint and removing one of N endpoints moves about 1/N of the clients.
	// Every node builds the same table for the same endpoints.
	Maglev
)

// String returns the name ParseAlgorithm accepts.
func (a Algorithm) String() string {
	switch a {
	case Random:
		return "random"
	case RoundRobin:
		return "round-robin"
	case Maglev:
		return "maglev"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm parses an algorithm name as written in a Service annotation: "random" (also
// ""), "round-robin" or "maglev". Any other name is an error.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "", "random":
		return Random, nil
	case "round-robin", "roundrobin", "rr":
		return RoundRobin, nil
	case "maglev", "source-hash", "consistent-hash":
		return Maglev, nil
	}
	return Random, fmt.Errorf("unknown balancing algorithm %q (want random, round-robin or maglev)", s)
}

// DefaultAffinityTimeout is sessionAffinityConfig.clientIP.timeoutSeconds' default.
const DefaultAffinityTimeout = 10800 * time.Second

// ServiceKey names a Service.
type ServiceKey struct {
	Namespace, Name string
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// Service is what the dataplane needs of one Service of type ClusterIP, NodePort or
// LoadBalancer. Headless and ExternalName Services are not proxied: leave them out of the Model
// (or leave ClusterIPs empty, which has the same effect).
//
// Addresses of both families may be mixed; a Builder uses those of its own family. A Service
// with no ClusterIP in the Builder's family gets no rules in that family, whatever its other
// addresses (as kube-proxy).
type Service struct {
	Namespace, Name string

	ClusterIPs      []netip.Addr
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []netip.Addr // status.loadBalancer.ingress[].ip
	Ports           []Port

	// ExternalTrafficPolicyLocal sends node-port, external-IP and load-balancer traffic from
	// outside the cluster only to this node's endpoints and keeps the client's address. It has no
	// effect on a Service without such addresses.
	ExternalTrafficPolicyLocal bool
	// InternalTrafficPolicyLocal sends ClusterIP traffic only to this node's endpoints.
	InternalTrafficPolicyLocal bool
	// HealthCheckNodePort is the port of the Local-policy health check; 0 if none. The rules do not
	// use it; see HealthChecks.
	HealthCheckNodePort uint16

	// SessionAffinityClientIP keeps a client on its endpoint for SessionAffinityTimeout after its
	// last new connection (0 means DefaultAffinityTimeout).
	SessionAffinityClientIP bool
	SessionAffinityTimeout  time.Duration

	// LoadBalancerSourceRanges, if any, are the only sources allowed to the LoadBalancerIPs (not to
	// node ports or external IPs, as in kube-proxy).
	LoadBalancerSourceRanges []netip.Prefix

	Algorithm Algorithm

	// ExternalMode is how load-balancer and external-IP traffic reaches the pods: snat (the
	// main table, as kube-proxy) or direct server return (PlanDSR, WriteDSR). The zero value
	// is the proxy's default.
	ExternalMode ExternalMode
}

// Key returns the Service's namespace and name.
func (s *Service) Key() ServiceKey { return ServiceKey{s.Namespace, s.Name} }

// Port is one Service port with the endpoints that serve it.
type Port struct {
	// Name is the port's name; it may be empty for a Service's only port.
	Name     string
	Protocol Protocol
	Port     uint16
	NodePort uint16 // 0 if none
	// Endpoints serve this port; each carries the target port resolved for it (named target
	// ports may resolve differently per endpoint). Order does not matter.
	Endpoints []Endpoint
}

// Endpoint is one address serving a Service port, from an EndpointSlice.
type Endpoint struct {
	Addr netip.Addr
	Port uint16 // resolved targetPort
	// Node is the node the endpoint runs on (EndpointSlice nodeName); endpoints on a node in
	// Node.DeadNodes are not used while others are.
	Node string
	// Ready, Serving and Terminating are the EndpointSlice conditions. Ready endpoints are used;
	// when a scope (cluster-wide, or this node for Local policies) has none, its Serving and
	// Terminating ones are. Others are never used.
	Ready, Serving, Terminating bool
	// Local is true when the endpoint runs on this node (Node == this node's name).
	Local bool
	// ZoneHints and NodeHints are the EndpointSlice's hints.forZones and hints.forNodes: the zones
	// and nodes whose Cluster-policy traffic this endpoint should serve (TopologyMode).
	ZoneHints, NodeHints []string
}

// Node describes the node the rules are for.
type Node struct {
	Name string
	// NodePortAddresses are the addresses that accept node-port traffic. Empty means every local
	// address except loopback (`fib daddr type local`).
	NodePortAddresses []netip.Addr
	// IPs are the node's own addresses. A loadBalancerSourceRanges entry that contains one of
	// them also admits the load-balancer IPs as sources (a VIP looped back on the node).
	IPs []netip.Addr
	// ClusterCIDRs are the pod networks. Traffic from outside them to a ClusterIP is masqueraded,
	// and traffic from inside them to an external address short-circuits Local policy. Empty:
	// neither (unless Config.MasqueradeAll).
	ClusterCIDRs []netip.Prefix
	// ServiceCIDRs are the Service networks: traffic to an unallocated address in them is dropped.
	ServiceCIDRs []netip.Prefix
	// Zone is the node's topology.kubernetes.io/zone label, for endpoints' zone hints.
	Zone string
	// DeadNodes are nodes the speakers have declared dead. Their endpoints are left out until
	// they return, unless no other endpoint is usable. This node is never dead to itself.
	DeadNodes map[string]bool
}

// Model is everything one sync needs. Services are keyed by namespace and name.
//
// The Builder never modifies a Model. Incremental treats a *Service it has seen before at the
// same key as unchanged without looking inside, so replace a Service's pointer when it changes
// instead of editing it in place.
type Model struct {
	Node     Node
	Services map[ServiceKey]*Service
}
