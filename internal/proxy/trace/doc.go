// Package trace walks a packet through an nftables ruleset built by nftrules and reports the path:
// which base chains ran, which map entry matched, which service chain and endpoint choice
// (random, round-robin or Maglev bucket), the DNAT target, whether it is masqueraded, or why it
// is dropped or rejected.
//
// It evaluates the rules as written (a knftables Fake's table, or a dump of one), not the model
// they were built from, so tests that trace packets check the builder, as kube-proxy's nftables
// tests do. It reads each rule's text with nftrules.ParseRule, the one parser of the grammar
// nftrules renders, and evaluates the statements; it fails on anything outside that grammar
// rather than guess.
//
// The packet path it follows is netfilter's, restricted to the table's own base chains:
//
//	from the network: prerouting -> (input | forward -> postrouting)
//	from the host:    output -> postrouting [-> input, if the destination is local]
//
// Base chains of a hook run in priority order; NAT statements end their base chain. Only the
// first packet of a connection is traced (conntrack state "new"), and dynamic sets (session
// affinity) are empty unless Host.Affinity fills them. A `numgen` choice (a verdict map, or a
// cascade of `numgen ... mod K 0` rules) forks the trace: the result has one path per endpoint it
// may pick. `jhash` is computed as the kernel does, so a
// Maglev Service yields the one endpoint that client gets.
package trace
