package bgpconfig

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Community is a standard BGP community (RFC 1997): the high 16 bits are usually an AS number.
type Community uint32

// String formats c as "AS:value".
func (c Community) String() string { return fmt.Sprintf("%d:%d", uint32(c)>>16, uint32(c)&0xffff) }

// LargeCommunity is a large BGP community (RFC 8092).
type LargeCommunity struct {
	GlobalAdmin, LocalData1, LocalData2 uint32
}

// String formats c as "global:local1:local2", without the "large:" marker (FRR's and GoBGP's form).
func (c LargeCommunity) String() string {
	return fmt.Sprintf("%d:%d:%d", c.GlobalAdmin, c.LocalData1, c.LocalData2)
}

func (c LargeCommunity) compare(d LargeCommunity) int {
	return cmp.Or(cmp.Compare(c.GlobalAdmin, d.GlobalAdmin), cmp.Compare(c.LocalData1, d.LocalData1),
		cmp.Compare(c.LocalData2, d.LocalData2))
}

// CommunityValue is a parsed community: a standard one, or a large one when IsLarge.
type CommunityValue struct {
	Standard Community
	Large    LargeCommunity
	IsLarge  bool
}

// String formats v the way ParseCommunity reads it.
func (v CommunityValue) String() string {
	if v.IsLarge {
		return "large:" + v.Large.String()
	}
	return v.Standard.String()
}

// errCommunityFormat: the string does not have a community's form (it may be an alias).
var errCommunityFormat = errors.New("not of the form AS:value or large:global:local1:local2")

// ParseCommunity parses MetalLB's community syntax: "AS:value" with two decimal 16-bit numbers (a
// standard community), or "large:global:local1:local2" with three decimal 32-bit numbers (a large
// community). A string of another form returns an error wrapping ErrUnknownCommunity (it may be
// an alias); one of the right form with a number out of range, ErrInvalidCommunity.
func ParseCommunity(s string) (CommunityValue, error) {
	fs := strings.Split(s, ":")
	switch {
	case len(fs) == 2:
		var v [2]uint64
		for i, f := range fs {
			n, err := parseDecimal(f, 16)
			if err != nil {
				return CommunityValue{}, errf(ErrInvalidCommunity, "%q: %v", s, err)
			}
			v[i] = n
		}
		return CommunityValue{Standard: Community(v[0]<<16 | v[1])}, nil
	case len(fs) == 4 && fs[0] == "large":
		var v [3]uint32
		for i, f := range fs[1:] {
			n, err := parseDecimal(f, 32)
			if err != nil {
				return CommunityValue{}, errf(ErrInvalidCommunity, "%q: %v", s, err)
			}
			v[i] = uint32(n)
		}
		return CommunityValue{IsLarge: true, Large: LargeCommunity{v[0], v[1], v[2]}}, nil
	}
	return CommunityValue{}, fmt.Errorf("%w: %q: %w", ErrUnknownCommunity, s, errCommunityFormat)
}

// parseDecimal parses a plain decimal number of at most bits bits: digits only, no sign, no base
// prefix, no underscores.
func parseDecimal(s string, bits int) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty number")
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%q does not fit in %d bits", s, bits)
	}
	return n, nil
}

// ASTrans is AS_TRANS (RFC 6793), the stand-in for 4-byte AS numbers in 2-byte fields: it must not
// be configured as a real AS number.
const ASTrans = 23456

// ParseASN parses an AS number in asplain ("4200000000") or asdot ("64086.59904", RFC 5396)
// notation. It rejects 0 and AS_TRANS with ErrInvalidASN, like every AS number Build checks.
func ParseASN(s string) (uint32, error) {
	var asn uint64
	if hi, lo, ok := strings.Cut(s, "."); ok {
		h, err := parseDecimal(hi, 16)
		if err != nil {
			return 0, errf(ErrInvalidASN, "%q: %v", s, err)
		}
		l, err := parseDecimal(lo, 16)
		if err != nil {
			return 0, errf(ErrInvalidASN, "%q: %v", s, err)
		}
		asn = h<<16 | l
	} else {
		n, err := parseDecimal(s, 32)
		if err != nil {
			return 0, errf(ErrInvalidASN, "%q: %v", s, err)
		}
		asn = n
	}
	if err := checkASN(uint32(asn)); err != nil {
		return 0, err
	}
	return uint32(asn), nil
}

// checkASN rejects the AS numbers no session may use.
func checkASN(asn uint32) error {
	switch asn {
	case 0:
		return errf(ErrInvalidASN, "0 is reserved")
	case ASTrans:
		return errf(ErrInvalidASN, "%d is AS_TRANS (RFC 6793)", asn)
	}
	return nil
}
