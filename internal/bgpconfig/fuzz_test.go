package bgpconfig

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// FuzzParseCommunity: never panics, every error wraps one of the two community errors, and what
// parses formats back to the same value.
func FuzzParseCommunity(f *testing.F) {
	for _, s := range []string{"65535:65282", "large:1:2:3", "0:0", "65536:1", "large:1:2", "1:2:3", "", ":", "large:::", "01:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseCommunity(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidCommunity) && !errors.Is(err, ErrUnknownCommunity) {
				t.Fatalf("ParseCommunity(%q): untyped error %v", s, err)
			}
			return
		}
		back, err := ParseCommunity(v.String())
		if err != nil || back != v {
			t.Fatalf("ParseCommunity(%q) = %+v, whose String %q parses as %+v, %v", s, v, v.String(), back, err)
		}
		fields := strings.Split(s, ":")
		if v.IsLarge != (fields[0] == "large") {
			t.Fatalf("ParseCommunity(%q) large = %v", s, v.IsLarge)
		}
	})
}

// FuzzParseASN: never panics, errors are ErrInvalidASN, results are never 0 or AS_TRANS, and an
// asplain result formats back to the input's value.
func FuzzParseASN(f *testing.F) {
	for _, s := range []string{"64512", "1.10", "0", "23456", "4294967296", "65535.65535", "1.", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		asn, err := ParseASN(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidASN) || asn != 0 {
				t.Fatalf("ParseASN(%q) = %d, %v", s, asn, err)
			}
			return
		}
		if asn == 0 || asn == ASTrans {
			t.Fatalf("ParseASN(%q) = %d", s, asn)
		}
		if !strings.Contains(s, ".") {
			if n, err := strconv.ParseUint(s, 10, 32); err != nil || uint32(n) != asn {
				t.Fatalf("ParseASN(%q) = %d, strconv says %d, %v", s, asn, n, err)
			}
		}
	})
}

// FuzzBuild feeds arbitrary strings and numbers into a BGPPeer and a BGPAdvertisement: Build never
// panics, every error is a ConfigError wrapping a sentinel, and every session it returns is valid.
func FuzzBuild(f *testing.F) {
	f.Add(uint32(64512), uint32(64513), "192.0.2.1", "", "65535:65282", "large:1:2:3", int32(32), int64(90), int64(30), "")
	f.Add(uint32(0), uint32(0), "::1", "2001:db8::2", "x", "1:2:3", int32(0), int64(-1), int64(0), "internal")
	f.Fuzz(func(t *testing.T, my, peerAS uint32, address, source, c1, c2 string, agg int32, hold, ka int64, dyn string) {
		in := base()
		in.Communities = []v1beta1.Community{{ObjectMeta: metav1.ObjectMeta{Name: "c"},
			Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: c1, Value: c2}}}}}
		in.Peers = []v1beta2.BGPPeer{bgpPeer("p", my, peerAS, address, func(s *v1beta2.BGPPeerSpec) {
			s.SrcAddress, s.DynamicASN = source, v1beta2.DynamicASNMode(dyn)
			s.HoldTime, s.KeepaliveTime = dur(time.Duration(hold)*time.Second), dur(time.Duration(ka)*time.Second)
		})}
		in.Advertisements = []v1beta1.BGPAdvertisement{bgpAd("a", func(s *v1beta1.BGPAdvertisementSpec) {
			s.Communities, s.AggregationLength = []string{c1, c2}, &agg
		})}
		b := svc("ns/b")
		if a, err := netip.ParseAddr(address); err == nil {
			b.Addrs = []netip.Addr{a}
		}
		in.Services = []Service{svc("ns/a", "198.51.100.7"), b}
		st, errs := Build(in)
		sentinels := []error{ErrInvalidASN, ErrInvalidAddress, ErrInvalidTimers, ErrInvalidPassword, ErrSecretNotFound, ErrUnusableSecret,
			ErrUnknownBFDProfile, ErrInvalidBFDProfile, ErrInvalidCommunity, ErrUnknownCommunity, ErrInvalidAggregation,
			ErrInvalidSelector, ErrConflict, ErrUnsupported}
		for _, e := range errs {
			ok := false
			for _, s := range sentinels {
				ok = ok || errors.Is(e, s)
			}
			if !ok || e.Kind == "" {
				t.Fatalf("error %v wraps no sentinel", e)
			}
		}
		for _, s := range st.Sessions {
			if s.LocalASN == 0 || s.LocalASN == ASTrans || !s.Addr.IsValid() || s.HoldTime != 0 && s.KeepaliveTime >= s.HoldTime {
				t.Fatalf("invalid session %+v", s)
			}
			for _, p := range s.Paths {
				if p.Prefix.Addr().Is4() != s.Addr.Is4() || p.Prefix != p.Prefix.Masked() || !s.IBGP && p.LocalPref != 0 {
					t.Fatalf("invalid path %+v on %+v", p, s)
				}
			}
			if !st.RouterID.Is4() {
				t.Fatalf("router ID %v", st.RouterID)
			}
		}
	})
}
