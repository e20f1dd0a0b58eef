// Package bgp is the speaker's BGP mode: it embeds GoBGP (github.com/osrg/gobgp/v4) and makes the
// routers see what package bgpconfig computed for this node, the sessions to open and the paths to
// advertise over each, and ties each session with a BFD profile to a BFD session (package bfd).
//
//	bgpconfig.Build ──State──▶ Speaker.Set ──kick──▶ Run's goroutine ──▶ GoBGP (one server)
//	                                                     ▲    │            neighbors, paths,
//	  GoBGP WatchEvent (peer state) ─────events──────────┤    │            export policy
//	  GoBGP log "failed to connect" ─────events──────────┤    └──▶ bfd.Manager AddPeer/RemovePeer
//	  bfd.Manager OnChange ──────────────events──────────┘
//	                                                     │
//	                               OnState(SessionStatus)◀┘
//
// One goroutine, Run's, owns GoBGP, the BFD manager's peers and the statuses; GoBGP's callbacks and
// the BFD manager only post events to it. GoBGP is used as its authors intend when embedded: Serve
// runs before any call, StartBgp with ListenPort -1 (the speaker dials; it does not listen), and
// WatchEvent(WatchPeer()) for state changes.
//
// # Paths and attributes
//
// GoBGP has one RIB for all neighbors, while each session has its own prefixes and attributes
// (advertisements name peers; LOCAL_PREF is for iBGP). The global RIB holds one bare path per
// prefix, origin IGP with an unspecified next hop, which GoBGP replaces by each session's local
// address (next-hop-self); a global export policy, default reject, gives each neighbor its prefixes
// with their communities, large communities and LOCAL_PREF (one statement per neighbor and
// attribute set). Changing what a connected neighbor gets for a prefix that stays in the RIB is
// followed by a soft reset out of that neighbor. The global import policy rejects everything: the
// speaker accepts no routes.
//
// Every session presents its own AS number (GoBGP's per-neighbor local AS); the server's global AS
// number is the first session's, and only its router ID is shared, as bgpconfig guarantees. A
// change of router ID restarts GoBGP: Stop waits for the old server's goroutines before the new one
// starts, which matters because StartBgp writes GoBGP package variables (table.SelectionOptions,
// table.UseMultiplePaths) that every server's session goroutines read, so one process must not
// start a BgpServer while another exchanges routes (the tests start their GoBGP routers first). Any failed GoBGP call other than adding one neighbor stops
// GoBGP, and the State is applied again from scratch after a backoff (1 s, doubling to 30 s).
//
// # BFD
//
// A session whose BFD session goes from Up to Down, unless the peer took BFD down administratively
// (RFC 5882 §3.2), is disabled at once (GoBGP DisablePeer: a Cease NOTIFICATION and no reconnection)
// and released when BFD is Up again, or after the session's hold time if BFD stays down. GoBGP
// takes one admin state request at a time and silently drops one made while the last is pending
// (a BFD flap of a millisecond: hold and release back to back), so 500 ms after each request the
// speaker reads GoBGP's admin state and asks again until it is what it last asked for. The router,
// running BFD too, drops this node's routes within its own detection time (receive interval ×
// multiplier) when the node dies.
//
// # Status
//
// SessionStatus carries MetalLB's (frr-k8s') BGPSessionState fields (bgpStatus with FRR's state
// names, bfdStatus with "N/A" when there is no BFD) and why a session is not Established (a
// DownReason and a message). A connection attempt that fails, such as one to a router that expects
// another TCP MD5 password, is only visible in GoBGP's debug log; the speaker reads that record to
// report ConnectFailed with the error.
//
// # Limits
//
// Hold time 0 (no keepalives) cannot be expressed to GoBGP, which reads 0 as its default of 90 s.
// Sessions carry their own address family only (dualStackAddressFamily is not implemented).
// enableGracefulRestart is passed to GoBGP (restart time 120 s) but not tested with a router.
// The reasons of failed attempts rely on GoBGP v4.8's log messages; the loopback tests, which
// provoke them, fail if an upgrade renames them.
package bgp
