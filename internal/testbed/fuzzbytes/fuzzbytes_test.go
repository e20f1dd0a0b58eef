package fuzzbytes

import (
	"slices"
	"testing"
)

func TestReader(t *testing.T) {
	r := New([]byte{7, 0x12, 0x34, 5, 9})
	if got := r.Byte(); got != 7 {
		t.Errorf("Byte = %d, want 7", got)
	}
	if got := r.U16(); got != 0x1234 {
		t.Errorf("U16 = %#x, want 0x1234", got)
	}
	if got := r.N(1); got != 0 {
		t.Errorf("N(1) = %d, want 0", got)
	}
	if got := r.N(3); got != 5%3 {
		t.Errorf("N(3) = %d, want %d (N(1) must read nothing)", got, 5%3)
	}
	if got := Pick(r, "a", "b", "c", "d"); got != "b" {
		t.Errorf("Pick = %q, want b (9 mod 4)", got)
	}
	// Past the end: zeros, and Pick still chooses the first.
	for i := range 3 {
		if b, u, n, p := r.Byte(), r.U16(), r.N(5), Pick(r, 1, 2); b != 0 || u != 0 || n != 0 || p != 1 {
			t.Fatalf("read %d past the end: %d %d %d %d, want zeros and the first choice", i, b, u, n, p)
		}
	}
}

// TestPickReadsOneByteEvenForOneChoice: a catalogue of one still takes its byte (N does not).
func TestPickReadsOneByteEvenForOneChoice(t *testing.T) {
	r := New([]byte{1, 2})
	Pick(r, "only")
	if got := r.Byte(); got != 2 {
		t.Errorf("after Pick of one choice the next byte is %d, want 2", got)
	}
}

// An embedding generator is a Source.
type gen struct{ *Reader }

func (g gen) pair() []int { return []int{Pick(g, 10, 20, 30), g.N(2)} }

func TestEmbedded(t *testing.T) {
	if got := (gen{New([]byte{2, 3})}).pair(); !slices.Equal(got, []int{30, 1}) {
		t.Errorf("pair = %v, want [30 1]", got)
	}
}
