package layer2

import (
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
)

// ndpFilter accepts untagged Ethernet frames carrying IPv6 with ICMPv6 as
// the first next header and type 135 (NS) or 136 (NA). Extension headers are
// not followed: hosts do not put them on neighbour discovery.
var ndpFilter = []bpf.Instruction{
	/* 0 */ bpf.LoadAbsolute{Off: 12, Size: 2}, // EtherType
	/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv6, SkipFalse: 6},
	/* 2 */ bpf.LoadAbsolute{Off: etherHeaderLen + 6, Size: 1}, // IPv6 next header
	/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoICMPv6, SkipFalse: 4},
	/* 4 */ bpf.LoadAbsolute{Off: icmpTypeOffset, Size: 1}, // ICMPv6 type
	/* 5 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ipv6.ICMPTypeNeighborSolicitation), SkipTrue: 1},
	/* 6 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ipv6.ICMPTypeNeighborAdvertisement), SkipFalse: 1},
	/* 7 */ bpf.RetConstant{Val: readBufferSize},
	/* 8 */ bpf.RetConstant{Val: 0},
}
