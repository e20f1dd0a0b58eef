// Package attack is the lab's attacker: it forges, captures and replays the speakers' UDP heartbeats
// and forges ARP claims for service addresses, from a lab namespace (the outside client, mypc).
// `ironlb lab chaos` uses it for its attack faults (forged-heartbeat, replayed-heartbeat, forged-arp)
// and test/e2e's TestHeartbeatAttack for its one-shot attack.
//
// It is split as the product's adapters are:
//
//   - Pure (forge.go, wire.go; no sockets, no clock): the forged heartbeats (Leaving, NotReady,
//     Ghosts), the parse of captured IPv4/UDP packets (ParseUDP4, fuzzed) and the forged ARP packets
//     (ARPClaims).
//   - Sockets (conn.go): Capture (an AF_PACKET socket in a node's namespace), UDPSender and
//     ARPSender (sockets opened in the attacker's namespace, optionally bound to an address the
//     attacker took over).
//
// It never adds an address or a route anywhere: a caller that wants the attacker to hold a cut
// node's address adds it to the attacker's namespace and removes it afterwards. It is test bed
// code: the product never imports it.
package attack
