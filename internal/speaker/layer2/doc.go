// Package layer2 answers ARP (IPv4) and NDP (IPv6) for the addresses a node
// announces on one interface: the packet layer of the speaker's layer-2 mode.
//
// The package has two halves, as mdlayher/arp and mdlayher/ndp do:
//
//   - Pure wire formats. [ARP] and [NDP] are whole Ethernet frames; [ParseARP]
//     and [ParseNDP] decode and validate them, their Marshal methods encode
//     them. They do no I/O, never panic on arbitrary input and are fuzzed. The
//     ARP payload is mdlayher/arp's Packet; the ICMPv6 message is
//     mdlayher/ndp's Message. Ethernet and IPv6 headers are written here,
//     because the responder sends from a packet socket (see below).
//   - [Responder], one per interface and address family, built by [NewARP] or
//     [NewNDP] around a net.PacketConn that carries whole Ethernet frames (a
//     packet socket from [ListenARP] or [ListenNDP], or a [FakeConn] in
//     tests). Constructors start nothing; [Responder.Run] reads requests and
//     answers them until its context ends.
//
// What goes on the wire:
//
//   - ARP (RFC 826): only requests, broadcast or addressed to the interface's
//     MAC, for an announced address are answered, with a unicast reply to the
//     requester. ARP probes (sender IP 0.0.0.0, RFC 5227 §2.1.1) are answered
//     too, as the kernel does, so the prober sees the address is in use.
//   - Gratuitous ARP (RFC 5227 §3 "ARP Announcement", RFC 5944 §4.6): both a
//     request (sender = target = VIP, target MAC zero) and a reply (sender =
//     target = VIP, target MAC = sender MAC, which is what makes Linux treat
//     a reply as gratuitous), both to ff:ff:ff:ff:ff:ff.
//   - NDP (RFC 4861): neighbour solicitations for an announced address are
//     answered with a solicited advertisement carrying Override=1 and a
//     Target Link-Layer Address option, so a client's cache entry is
//     replaced after a failover (RFC 4861 §7.2.5; MetalLB sends Override=0).
//     A duplicate address detection probe (unspecified source) is answered
//     to ff02::1 with Solicited=0 (§7.2.4), defending the address.
//     Gratuitous = unsolicited advertisement to ff02::1, Override=1 (§7.2.6).
//     The responder joins the solicited-node multicast group of every
//     announced address (§7.2.1) through [Groups], which sends MLD reports.
//   - Conflicts (RFC 5227 §2.4): an ARP packet whose sender IP is an
//     announced address, or a neighbour advertisement for one, coming from
//     another MAC calls Config.OnConflict.
//
// Why packet sockets for NDP, not ndp.Conn: an ICMPv6 socket only sees
// packets the kernel delivers locally. A client's unicast neighbour
// unreachability probe is addressed to the VIP itself, which is not assigned
// to the node, so the kernel never delivers it, and the client's cache entry
// fails after three unanswered probes. A packet socket filtered to NS/NA sees
// it at the link layer, and lets the responder pick the source MAC and the
// answer's link-layer address per client.
package layer2
