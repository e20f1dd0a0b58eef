package nftrules

// NoLocalEndpoints counts the Service ports of family v6 (false: IPv4) that have a Local traffic
// policy and no usable endpoint on this node, as kube-proxy's nftables mode counts them for
// kubeproxy_sync_proxy_rules_no_local_endpoints_total: internal (internalTrafficPolicy Local: the
// ClusterIP's traffic is dropped) and external (externalTrafficPolicy Local on a port with a
// node port, external IP or load-balancer IP of the family: traffic from outside is dropped). A
// port with no usable endpoint anywhere is rejected instead and counted in neither.
func NoLocalEndpoints(m *Model, v6 bool) (internal, external int) {
	for _, svc := range m.Services {
		if !hasFamily(svc.ClusterIPs, v6) {
			continue
		}
		for i := range svc.Ports {
			p := &svc.Ports[i]
			sel := SelectEndpoints(svc, p, &m.Node, v6)
			if !sel.HasEndpoints {
				continue
			}
			if svc.InternalTrafficPolicyLocal && len(sel.Local) == 0 {
				internal++
			}
			ext := p.NodePort != 0 || hasFamily(svc.ExternalIPs, v6) || hasFamily(svc.LoadBalancerIPs, v6)
			if svc.ExternalTrafficPolicyLocal && ext && len(sel.Local) == 0 {
				external++
			}
		}
	}
	return internal, external
}
