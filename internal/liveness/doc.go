// Package liveness is ironlb's own failure detectors, shared by the speaker and the proxy. The
// Kubernetes API is far too slow for this (a Node turns NotReady after 40-50 s), and MetalLB's
// memberlist takes seconds.
//
//   - Heartbeats (the speaker's election view): every speaker sends a small UDP heartbeat to every
//     other speaker on the interface that announces, every Interval, and declares a peer dead after
//     Multiplier intervals without one (BFD's asynchronous mode, RFC 5880 §6.8.4, without the session
//     handshake). Heartbeats on the announcing link also mean a node whose link is down is never
//     considered alive.
//   - Echoes (the speaker's, unless --echo-interval=0, and the proxy's): each node probes every other
//     with ICMP echoes that the peer's kernel answers, and judges only its own probes, so scheduling
//     pauses on either side are never taken for a dead peer.
//
// Nothing on the wire is trusted (issue 18):
//
//   - Heartbeats are signed with HMAC-SHA256 and a cluster key, kept in the Secret [KeySecret]
//     (data keys [KeyPrimary] and, during a rotation, [KeySecondary]; the controller creates it).
//     Senders sign with the primary; receivers accept either, so an operator rotates by moving
//     primary to secondary and writing a new primary, then dropping the secondary. Without a key a
//     Monitor neither sends nor accepts heartbeats.
//   - A heartbeat is believed only from a known node (the peer list), from its InternalIP, signed,
//     within a window of the receiver's clock, and not replayed: a per-boot random nonce, a
//     sequence number that must grow within a boot, and a timestamp that must be newer than
//     anything accepted from that node for a new boot. The [Verifier] decides, purely (auth.go).
//     Rejections have a [Reason].
//   - Heartbeats carry no MAC: the speaker learns its peers' MACs from its own neighbour table.
//   - Echo probes carry a random nonce per probe; only an answer from the probed address echoing
//     the nonce of a pending probe counts ([EchoTracker.Reply]).
//
// The package is a pure core with two thin socket adapters beside it:
//
//   - Core, no I/O and no clock (fed with times, table-tested): [Detector] (detector.go), the
//     heartbeat wire format [Heartbeat], [Heartbeat.Marshal] and [Parse] (wire.go), the heartbeat
//     authentication [Signer] and [Verifier] (auth.go), and the echo state machine [EchoTracker]
//     (echo.go).
//   - Adapters: [Monitor] (run.go) runs a Verifier and a Detector over a UDP socket (it draws the
//     boot nonce); [Echoer] (icmp_linux.go) runs
//     an EchoTracker over a raw ICMP socket. Each is a Run(ctx) loop owning its core.
package liveness
