package bgpconfig

import (
	"errors"
	"testing"
)

func TestParseCommunity(t *testing.T) {
	tests := []struct {
		in   string
		want CommunityValue
		err  error
	}{
		{"65535:65282", CommunityValue{Standard: 0xffffff02}, nil},
		{"0:0", CommunityValue{}, nil},
		{"64512:007", CommunityValue{Standard: comm(64512, 7)}, nil},
		{"large:1:2:3", CommunityValue{IsLarge: true, Large: LargeCommunity{1, 2, 3}}, nil},
		{"large:4294967295:0:4294967295", CommunityValue{IsLarge: true, Large: LargeCommunity{4294967295, 0, 4294967295}}, nil},
		{"65536:1", CommunityValue{}, ErrInvalidCommunity},
		{"1:-1", CommunityValue{}, ErrInvalidCommunity},
		{"+1:1", CommunityValue{}, ErrInvalidCommunity},
		{"1:", CommunityValue{}, ErrInvalidCommunity},
		{"0x10:1", CommunityValue{}, ErrInvalidCommunity},
		{"large:1:2:4294967296", CommunityValue{}, ErrInvalidCommunity},
		{"large:1:2:", CommunityValue{}, ErrInvalidCommunity},
		{"1:2:3", CommunityValue{}, ErrUnknownCommunity},
		{"huge:1:2:3", CommunityValue{}, ErrUnknownCommunity},
		{"large:1:2", CommunityValue{}, ErrUnknownCommunity},
		{"no-export", CommunityValue{}, ErrUnknownCommunity},
		{"", CommunityValue{}, ErrUnknownCommunity},
	}
	for _, tt := range tests {
		got, err := ParseCommunity(tt.in)
		if got != tt.want || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("ParseCommunity(%q) = %+v, %v; want %+v, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
	if s := (CommunityValue{Standard: 0xffffff02}).String(); s != "65535:65282" {
		t.Errorf("String() = %q", s)
	}
	if s := (CommunityValue{IsLarge: true, Large: LargeCommunity{1, 2, 3}}).String(); s != "large:1:2:3" {
		t.Errorf("String() = %q", s)
	}
}

func TestParseASN(t *testing.T) {
	tests := []struct {
		in      string
		want    uint32
		wantErr bool
	}{
		{"64512", 64512, false},
		{"4294967295", 4294967295, false},
		{"1.10", 65546, false},
		{"65535.65535", 4294967295, false},
		{"0.64512", 64512, false},
		{"0", 0, true},
		{"23456", 0, true},
		{"0.23456", 0, true},
		{"4294967296", 0, true},
		{"65536.1", 0, true},
		{"1.", 0, true},
		{".1", 0, true},
		{"1.2.3", 0, true},
		{"-1", 0, true},
		{"", 0, true},
		{"AS64512", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseASN(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr || err != nil && !errors.Is(err, ErrInvalidASN) {
			t.Errorf("ParseASN(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
