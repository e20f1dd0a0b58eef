// Package bfd is Bidirectional Forwarding Detection for the speaker's BGP sessions: RFC 5880 in
// asynchronous mode over single-hop UDP (RFC 5881), without the echo function, demand mode of its
// own, or authentication. It lets a router drop a dead node's routes within receive interval ×
// detect multiplier (150 ms at 50 ms × 3) instead of a BGP hold time, and interoperates with
// FRR's bfdd.
//
// The package has three layers, each usable and tested alone:
//
//   - The wire format: [Packet], [Parse] and [Packet.Marshal]. Pure functions over bytes, fuzzed;
//     Parse applies the checks of RFC 5880 §6.8.6 that need no session and never panics. Every
//     discarded packet has a [DropReason], which is also the label of [Stats].Dropped.
//   - The state machine: [Session]. No I/O and no clock: it is fed packets and times
//     ([Session.Receive], [Session.Tick]) and says when it next needs the time
//     ([Session.NextDeadline]). Three-way handshake (Down → Init → Up), detection time, Poll/Final
//     sequences when timers change, 1 s transmission while not Up, jitter, passive mode and
//     AdminDown all live here, table-tested with explicit times.
//   - The adapter: [Manager] runs one Session per peer address over a [Conn]. [Listen] returns the
//     real Conn ([UDPConn], Linux); [FakeNetwork] an in-memory one for tests.
//
// Packet flow through a Manager:
//
//	peer ──UDP :3784──▶ UDPConn.Recv ──▶ TTL == 255? ──▶ Parse ──▶ session by Your Discriminator,
//	  (IP_RECVTTL, IP_PKTINFO)            (GTSM)                   else by source address
//	                                                                   │
//	                                                                   ▼
//	OnChange ◀── Run's goroutine ◀── StateChange ◀── Session.Receive / Session.Tick
//	                                                                   │ packet due
//	peer ◀──UDP :3784── Sender (one socket per session: local address, ◀┘
//	                    source port 49152–65535, TTL 255, CS6)
//
// The protocol loop owns every session. It reads all queued packets before it looks at any timer,
// so a pause in scheduling (the loop, not the peer, was late) never makes a live peer look dead.
// With [Config].Realtime it runs on its own OS thread at SCHED_FIFO priority with 1 ns timer
// slack, waiting in ppoll(2) rather than in Go's network poller, so it sends on time while every
// CPU is busy; [Stats].MaxLateness shows how late it ran. The loop still depends on Go's other
// runtime threads now and then, so the speaker should also raise the whole process
// ([SetProcessNice] -10): with two busy loops per CPU on two CPUs, a 50 ms × 3 session with FRR
// held for 120 s without a flap, the loop at most 25 ms late. Management calls
// ([Manager.AddPeer], [Manager.RemovePeer]) record what is wanted and wake the loop, which
// reconciles.
//
// For the BGP speaker: a StateChange to Down with RemoteState AdminDown (the peer removed the
// session) must not tear down BGP (RFC 5882 §3.2); any other change from Up to Down should. When
// Run ends, or a peer is removed, the session goes AdminDown and tells its peer so.
package bfd
