package trace

import "net/netip"

// DSRBucket is nft's `jhash ip saddr . th sport . ip daddr . th dport . meta l4proto mod n seed
// seed` (the flow hash of nftrules' direct server return) for an IPv4 flow: the concatenation
// is hashed as the kernel holds it in registers, each field padded with zeros to 4 bytes.
// TestDSRBucketKernel checks it against the kernel.
func DSRBucket(src, dst netip.Addr, sport, dport uint16, proto uint8, n, seed uint32) uint32 {
	var k [20]byte
	s, d := src.As4(), dst.As4()
	copy(k[0:4], s[:])
	k[4], k[5] = byte(sport>>8), byte(sport)
	copy(k[8:12], d[:])
	k[12], k[13] = byte(dport>>8), byte(dport)
	k[16] = proto
	return bucket(jhash(k[:], seed), n)
}
