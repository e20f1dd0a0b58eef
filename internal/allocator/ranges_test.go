package allocator

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func rng(first, last string) Range {
	return Range{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}
}

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Range
		wantErr bool
		str     string // Range.String of the result
	}{
		{in: "10.0.0.0/24", want: rng("10.0.0.0", "10.0.0.255"), str: "10.0.0.0/24"},
		{in: "192.168.1.10-192.168.1.20", want: rng("192.168.1.10", "192.168.1.20"), str: "192.168.1.10-192.168.1.20"},
		{in: "192.168.1.10 - 192.168.1.20", want: rng("192.168.1.10", "192.168.1.20"), str: "192.168.1.10-192.168.1.20"},
		{in: "  192.168.1.10\t-  192.168.1.20 ", want: rng("192.168.1.10", "192.168.1.20"), str: "192.168.1.10-192.168.1.20"},
		{in: "172.18.255.200-172.18.255.250", want: rng("172.18.255.200", "172.18.255.250"), str: "172.18.255.200-172.18.255.250"},
		{in: "10.0.0.7-10.0.0.7", want: rng("10.0.0.7", "10.0.0.7"), str: "10.0.0.7/32"},
		{in: "10.0.0.0-10.0.0.255", want: rng("10.0.0.0", "10.0.0.255"), str: "10.0.0.0/24"},
		{in: "10.0.0.7/32", want: rng("10.0.0.7", "10.0.0.7"), str: "10.0.0.7/32"},
		{in: "0.0.0.0/0", want: rng("0.0.0.0", "255.255.255.255"), str: "0.0.0.0/0"},
		{in: "fc00::/120", want: rng("fc00::", "fc00::ff"), str: "fc00::/120"},
		{in: "fc00::/64", want: rng("fc00::", "fc00::ffff:ffff:ffff:ffff"), str: "fc00::/64"},
		{in: "fc00::1-fc00::5", want: rng("fc00::1", "fc00::5"), str: "fc00::1-fc00::5"},
		{in: "::/0", want: rng("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), str: "::/0"},
		// Host bits set: accepted and masked, as MetalLB's net.ParseCIDR-based parser does.
		{in: "10.0.0.1/24", want: rng("10.0.0.0", "10.0.0.255"), str: "10.0.0.0/24"},
		{in: "fc00::1/120", want: rng("fc00::", "fc00::ff"), str: "fc00::/120"},

		{in: "", wantErr: true},
		{in: "10.0.0.1", wantErr: true},
		{in: "fc00::1", wantErr: true},
		{in: "10.0.0.0/33", wantErr: true},
		{in: "10.0.0.0/", wantErr: true},
		{in: "10.0.0/24", wantErr: true},
		{in: "010.0.0.0/24", wantErr: true},
		{in: "10.0.0.20-10.0.0.10", wantErr: true},
		{in: "10.0.0.1-fc00::1", wantErr: true},
		{in: "fc00::1-10.0.0.1", wantErr: true},
		{in: "10.0.0.1-", wantErr: true},
		{in: "-10.0.0.1", wantErr: true},
		{in: "10.0.0.1-10.0.0.2-10.0.0.3", wantErr: true},
		{in: "10.0.0.0/24-10.0.1.0/24", wantErr: true},
		{in: "fe80::1%eth0-fe80::2%eth0", wantErr: true},
		{in: "fe80::%eth0/64", wantErr: true},
		{in: "::ffff:10.0.0.1-::ffff:10.0.0.2", wantErr: true},
		{in: "::ffff:10.0.0.0/120", wantErr: true},
		{in: "hello", wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRange(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseRange(%q) = %v, want an error", tc.in, got)
				}
				if !errors.Is(err, ErrInvalidRange) {
					t.Errorf("error %v is not ErrInvalidRange", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRange(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff([]Range{tc.want}, got, addrCmp); diff != "" {
				t.Errorf("ParseRange(%q) (-want +got):\n%s", tc.in, diff)
			}
			if s := got[0].String(); s != tc.str {
				t.Errorf("String() = %q, want %q", s, tc.str)
			}
			back, err := ParseRange(got[0].String())
			if err != nil || back[0] != got[0] {
				t.Errorf("round trip of %q: %v, %v", got[0].String(), back, err)
			}
		})
	}
}

func TestParseRangeErrorMessage(t *testing.T) {
	_, err := ParseRange("10.0.0.20-10.0.0.10")
	want := `invalid range "10.0.0.20-10.0.0.10": start 10.0.0.20 is after end 10.0.0.10`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
	if ReasonOf(err) != ErrInvalidRange {
		t.Errorf("ReasonOf = %q", ReasonOf(err))
	}
}

func TestNormalizeSubtract(t *testing.T) {
	for _, tc := range []struct {
		name        string
		in, taken   []Range
		fam         Family
		norm, minus []Range
	}{
		{
			name:  "merge overlapping and adjacent, drop other family and invalid",
			in:    []Range{rng("10.0.0.10", "10.0.0.20"), rng("10.0.0.0", "10.0.0.9"), rng("10.0.0.15", "10.0.0.30"), rng("fc00::", "fc00::1"), rng("10.0.1.5", "10.0.1.1"), {}},
			fam:   IPv4,
			norm:  []Range{rng("10.0.0.0", "10.0.0.30")},
			taken: []Range{rng("10.0.0.5", "10.0.0.6"), rng("10.0.0.30", "10.0.0.40")},
			minus: []Range{rng("10.0.0.0", "10.0.0.4"), rng("10.0.0.7", "10.0.0.29")},
		},
		{
			name:  "whole range taken",
			in:    []Range{rng("10.0.0.0", "10.0.0.9")},
			fam:   IPv4,
			norm:  []Range{rng("10.0.0.0", "10.0.0.9")},
			taken: []Range{rng("9.0.0.0", "11.0.0.0")},
		},
		{
			name:  "ends of the address space",
			in:    []Range{rng("255.255.255.250", "255.255.255.255"), rng("0.0.0.0", "0.0.0.3")},
			fam:   IPv4,
			norm:  []Range{rng("0.0.0.0", "0.0.0.3"), rng("255.255.255.250", "255.255.255.255")},
			taken: []Range{rng("0.0.0.0", "0.0.0.0"), rng("255.255.255.255", "255.255.255.255")},
			minus: []Range{rng("0.0.0.1", "0.0.0.3"), rng("255.255.255.250", "255.255.255.254")},
		},
		{
			name:  "ipv4-mapped ends are unmapped",
			in:    []Range{rng("::ffff:10.0.0.1", "::ffff:10.0.0.2")},
			fam:   IPv4,
			norm:  []Range{rng("10.0.0.1", "10.0.0.2")},
			minus: []Range{rng("10.0.0.1", "10.0.0.2")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := normalize(tc.in, tc.fam)
			if diff := cmp.Diff(tc.norm, n, addrCmp); diff != "" {
				t.Errorf("normalize (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.minus, subtract(n, tc.taken), addrCmp); diff != "" {
				t.Errorf("subtract (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuggyIn(t *testing.T) {
	for _, r := range []Range{
		rng("10.0.0.0", "10.0.0.255"), rng("10.0.0.1", "10.0.0.254"), rng("10.0.0.255", "10.0.1.0"),
		rng("10.0.0.0", "10.0.3.255"), rng("0.0.0.0", "0.0.0.0"), rng("255.255.255.0", "255.255.255.255"),
		rng("10.0.0.100", "10.0.7.3"),
	} {
		var want int64
		for a := r.First; a.Compare(r.Last) <= 0 && a.IsValid(); a = a.Next() {
			if buggy(a) {
				want++
			}
		}
		if got := buggyIn(r); got != want {
			t.Errorf("buggyIn(%v) = %d, want %d", r, got, want)
		}
	}
	if got, want := buggyIn(rng("0.0.0.0", "255.255.255.255")), int64(1<<25); got != want {
		t.Errorf("buggyIn(0.0.0.0/0) = %d, want %d", got, want)
	}
}

func TestRangePrefixes(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"10.0.0.0/24", []string{"10.0.0.0/24"}},
		{"10.0.0.7-10.0.0.7", []string{"10.0.0.7/32"}},
		{"10.0.0.1-10.0.0.6", []string{"10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"}},
		{"172.18.255.200-172.18.255.250", []string{"172.18.255.200/29", "172.18.255.208/28", "172.18.255.224/28", "172.18.255.240/29", "172.18.255.248/31", "172.18.255.250/32"}},
		{"0.0.0.0-255.255.255.255", []string{"0.0.0.0/0"}},
		{"255.255.255.254-255.255.255.255", []string{"255.255.255.254/31"}},
		{"fc00::1-fc00::3", []string{"fc00::1/128", "fc00::2/127"}},
	}
	for _, tt := range tests {
		rs, err := ParseRange(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range rs[0].Prefixes() {
			got = append(got, p.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Prefixes() = %v, want %v", tt.in, got, tt.want)
		}
	}
}
