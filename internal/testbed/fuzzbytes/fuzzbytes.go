// Package fuzzbytes turns a fuzz target's input into the decisions of a generator: the engine
// mutates bytes, and a generator that reads one byte per decision (which pool, which port, is this
// endpoint ready) lets one mutated byte change one decision. Past the end of the input every read
// is zero, so that any input, the empty one too, draws a whole object: the smallest one.
//
// The fuzz targets of the cores (config, election, nftrules, convert) draw their objects through
// it, each with its own catalogue: a generator type embeds a *Reader and adds its own methods. It
// is test bed (no product package imports it) and imports nothing, so that a core's tests may.
package fuzzbytes

// Reader hands out fuzz input one byte at a time. It is not safe for concurrent use; a fuzz
// execution makes its own.
type Reader struct{ b []byte }

// New reads b (not copied: the engine does not change an input while it runs).
func New(b []byte) *Reader { return &Reader{b: b} }

// Byte returns the next byte; past the end, 0.
func (r *Reader) Byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// U16 returns the next two bytes, big-endian.
func (r *Reader) U16() uint16 { return uint16(r.Byte())<<8 | uint16(r.Byte()) }

// N returns a number in [0, k): the next byte modulo k. For k <= 1 there is no choice to make, so
// it returns 0 and reads nothing.
func (r *Reader) N(k int) int {
	if k <= 1 {
		return 0
	}
	return int(r.Byte()) % k
}

// Source is what Pick reads: a *Reader, or a generator that embeds one.
type Source interface{ Byte() byte }

// Pick returns one of choices, chosen by the next byte, which it reads even when there is one
// choice (so that a catalogue growing from one entry to two does not shift every later decision).
// It panics when there are no choices.
func Pick[T any](r Source, choices ...T) T { return choices[int(r.Byte())%len(choices)] }
