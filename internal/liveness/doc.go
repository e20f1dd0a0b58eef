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
// The package is a pure core with two thin socket adapters beside it:
//
//   - Core, no I/O and no clock (fed with times, table-tested): [Detector] (detector.go), the
//     heartbeat wire format [Heartbeat], [Heartbeat.Marshal] and [Parse] (wire.go), and the echo
//     state machine [EchoTracker] (echo.go).
//   - Adapters: [Monitor] (run.go) runs a Detector over a UDP socket; [Echoer] (icmp_linux.go) runs
//     an EchoTracker over a raw ICMP socket. Each is a Run(ctx) loop owning its core.
package liveness
