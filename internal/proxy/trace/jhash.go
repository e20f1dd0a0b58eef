package trace

import "math/bits"

// jhash is the kernel's jhash() (include/linux/jhash.h, Bob Jenkins' lookup3) over key, as nft's
// jhash expression computes it on a little-endian machine.
func jhash(key []byte, initval uint32) uint32 {
	const initVal = 0xdeadbeef
	length := uint32(len(key))
	a := initVal + length + initval
	b, c := a, a
	k := key
	for len(k) > 12 {
		a += le32(k[0:4])
		b += le32(k[4:8])
		c += le32(k[8:12])
		a, b, c = jhashMix(a, b, c)
		k = k[12:]
	}
	if len(k) == 0 {
		return c
	}
	var tail [12]byte
	copy(tail[:], k)
	c += le32(tail[8:12])
	b += le32(tail[4:8])
	a += le32(tail[0:4])
	_, _, c = jhashFinal(a, b, c)
	return c
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func jhashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func jhashFinal(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}

// bucket is nft's `jhash ... mod n`: the kernel scales the hash into [0, n) with
// reciprocal_scale (a multiply and shift), not a remainder.
func bucket(h, n uint32) uint32 { return uint32(uint64(h) * uint64(n) >> 32) }
