package bfdprofile

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestProfile(t *testing.T) {
	got := Profile{EchoMode: true}.WithDefaults()
	want := Profile{ReceiveInterval: ms(300), TransmitInterval: ms(300), DetectMultiplier: 3, EchoMode: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		p  Profile
		ok bool
	}{
		{Profile{}, true},
		{Profile{ReceiveInterval: ms(50), TransmitInterval: ms(50), DetectMultiplier: 3}, true},
		{Profile{ReceiveInterval: ms(10), TransmitInterval: time.Minute, DetectMultiplier: 255}, true},
		{Profile{ReceiveInterval: ms(9)}, false},
		{Profile{TransmitInterval: time.Minute + time.Microsecond}, false},
		{Profile{ReceiveInterval: ms(10) + time.Nanosecond}, false},
		{Profile{TransmitInterval: -ms(50)}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.p, err, tc.ok)
		}
	}
}
