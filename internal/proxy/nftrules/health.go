package nftrules

import "net/netip"

// HealthCheck is what a Local-policy Service's health-check node port reports on this node.
type HealthCheck struct {
	Service  ServiceKey
	NodePort uint16
	// LocalReady counts this node's ready endpoint addresses over all ports and families. A
	// terminating endpoint does not count even when the rules fall back to it (KEP-1669): the
	// check then fails, so load balancers move away from the node.
	LocalReady int
}

// HealthChecks returns the health checks of m's Services with externalTrafficPolicy Local and a
// health-check node port, in key order. A check answers 200 when LocalReady > 0, else 503.
func HealthChecks(m *Model) []HealthCheck {
	var out []HealthCheck
	for _, k := range sortedKeys(m.Services) {
		s := m.Services[k]
		if s == nil || !s.ExternalTrafficPolicyLocal || s.HealthCheckNodePort == 0 {
			continue
		}
		ready := map[netip.Addr]bool{}
		for _, p := range s.Ports {
			for _, ep := range p.Endpoints {
				if ep.Local && ep.Ready && ep.Addr.IsValid() {
					ready[ep.Addr.Unmap()] = true
				}
			}
		}
		out = append(out, HealthCheck{Service: k, NodePort: s.HealthCheckNodePort, LocalReady: len(ready)})
	}
	return out
}
