package bgpconfig

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// TestLastValid feeds one LastValid a sequence of configurations, as a cluster's edits would, and
// checks after each what is built (sessions with their hold time and BFD profile, the paths of
// r1), which current versions are reported invalid, and which objects are held at their last
// valid version.
func TestLastValid(t *testing.T) {
	hold := func(d time.Duration) func(*v1beta2.BGPPeerSpec) {
		return func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(d) }
	}
	withBFD := func(name string) func(*v1beta2.BGPPeerSpec) {
		return func(s *v1beta2.BGPPeerSpec) { s.BFDProfile = name }
	}
	profile := func(name string, rx uint32) v1beta1.BFDProfile {
		return v1beta1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1beta1.BFDProfileSpec{ReceiveInterval: u32(rx)}}
	}
	community := func(name, alias, value string) v1beta1.Community {
		return v1beta1.Community{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: alias, Value: value}}}}
	}
	adWith := func(communities ...string) v1beta1.BGPAdvertisement {
		return bgpAd("ad", func(s *v1beta1.BGPAdvertisementSpec) { s.Communities = communities })
	}
	svcs := []Service{svc("ns/a", "198.51.100.1")}
	type step struct {
		name        string
		peers       []v1beta2.BGPPeer
		ads         []v1beta1.BGPAdvertisement
		profiles    []v1beta1.BFDProfile
		communities []v1beta1.Community
		// want: "name hold bfdProfile paths-of-the-session" per session.
		want     []string
		wantErrs []ObjectRef
		wantHeld []ObjectRef
		wantErr  error // the sentinel of the first error, if any
	}
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "a bad edit keeps the last valid version until fixed",
		steps: []step{{
			name:  "valid",
			peers: []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", hold(9*time.Second)), bgpPeer("r2", 64512, 64513, "192.0.2.2")},
			ads:   []v1beta1.BGPAdvertisement{bgpAd("ad")},
			want:  []string{"r1 9s  [198.51.100.1/32]", "r2 1m30s  [198.51.100.1/32]"},
		}, {
			name:     "r1 gets an invalid hold time: its previous version stays",
			peers:    []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", hold(time.Second)), bgpPeer("r2", 64512, 64513, "192.0.2.2", hold(30*time.Second))},
			ads:      []v1beta1.BGPAdvertisement{bgpAd("ad")},
			want:     []string{"r1 9s  [198.51.100.1/32]", "r2 30s  [198.51.100.1/32]"},
			wantErrs: []ObjectRef{{"BGPPeer", "r1"}},
			wantHeld: []ObjectRef{{"BGPPeer", "r1"}},
			wantErr:  ErrInvalidTimers,
		}, {
			name:     "still invalid: still held (not forgotten by the previous round)",
			peers:    []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", hold(2*time.Second)), bgpPeer("r2", 64512, 64513, "192.0.2.2", hold(30*time.Second))},
			ads:      []v1beta1.BGPAdvertisement{bgpAd("ad")},
			want:     []string{"r1 9s  [198.51.100.1/32]", "r2 30s  [198.51.100.1/32]"},
			wantErrs: []ObjectRef{{"BGPPeer", "r1"}},
			wantHeld: []ObjectRef{{"BGPPeer", "r1"}},
			wantErr:  ErrInvalidTimers,
		}, {
			name:  "fixed: the new version is used",
			peers: []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", hold(12*time.Second)), bgpPeer("r2", 64512, 64513, "192.0.2.2", hold(30*time.Second))},
			ads:   []v1beta1.BGPAdvertisement{bgpAd("ad")},
			want:  []string{"r1 12s  [198.51.100.1/32]", "r2 30s  [198.51.100.1/32]"},
		}},
	}, {
		name: "an object that was never valid is left out",
		steps: []step{{
			name:     "r1 invalid from the start",
			peers:    []v1beta2.BGPPeer{bgpPeer("r1", 64512, 0, "192.0.2.1"), bgpPeer("r2", 64512, 64513, "192.0.2.2")},
			want:     []string{"r2 1m30s  []"},
			wantErrs: []ObjectRef{{"BGPPeer", "r1"}},
			wantErr:  ErrInvalidASN,
		}},
	}, {
		name: "a deleted object is forgotten",
		steps: []step{{
			name:  "valid",
			peers: []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1")},
			want:  []string{"r1 1m30s  []"},
		}, {
			name: "deleted",
		}, {
			name:     "recreated invalid: nothing to fall back to",
			peers:    []v1beta2.BGPPeer{bgpPeer("r1", 64512, 0, "192.0.2.1")},
			wantErrs: []ObjectRef{{"BGPPeer", "r1"}},
			wantErr:  ErrInvalidASN,
		}},
	}, {
		name: "an invalid profile keeps its last version, and so its peer",
		steps: []step{{
			name:     "valid",
			peers:    []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", withBFD("fast"))},
			profiles: []v1beta1.BFDProfile{profile("fast", 50)},
			want:     []string{"r1 1m30s fast []"},
		}, {
			name:     "receive interval out of range",
			peers:    []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", withBFD("fast"))},
			profiles: []v1beta1.BFDProfile{profile("fast", 1)},
			want:     []string{"r1 1m30s fast []"},
			wantErrs: []ObjectRef{{"BFDProfile", "fast"}},
			wantHeld: []ObjectRef{{"BFDProfile", "fast"}},
			wantErr:  ErrInvalidBFDProfile,
		}},
	}, {
		name: "a held version that is no longer valid is left out",
		steps: []step{{
			name:     "valid",
			peers:    []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1", withBFD("fast")), bgpPeer("r2", 64512, 64513, "192.0.2.2")},
			profiles: []v1beta1.BFDProfile{profile("fast", 50)},
			want:     []string{"r1 1m30s fast []", "r2 1m30s  []"},
		}, {
			// r1's new version is invalid, and its last valid version names a profile that is gone.
			name:     "r1 invalid, its profile deleted",
			peers:    []v1beta2.BGPPeer{bgpPeer("r1", 64512, 0, "192.0.2.1", withBFD("fast")), bgpPeer("r2", 64512, 64513, "192.0.2.2")},
			want:     []string{"r2 1m30s  []"},
			wantErrs: []ObjectRef{{"BGPPeer", "r1"}},
			wantErr:  ErrInvalidASN,
		}},
	}, {
		name: "a community alias edited to a bad value keeps its old value",
		steps: []step{{
			name:        "valid",
			peers:       []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1")},
			ads:         []v1beta1.BGPAdvertisement{adWith("no-export")},
			communities: []v1beta1.Community{community("aliases", "no-export", "65535:65281")},
			want:        []string{"r1 1m30s  [198.51.100.1/32 65535:65281]"},
		}, {
			name:        "value out of range",
			peers:       []v1beta2.BGPPeer{bgpPeer("r1", 64512, 64513, "192.0.2.1")},
			ads:         []v1beta1.BGPAdvertisement{adWith("no-export")},
			communities: []v1beta1.Community{community("aliases", "no-export", "70000:1")},
			want:        []string{"r1 1m30s  [198.51.100.1/32 65535:65281]"},
			wantErrs:    []ObjectRef{{"Community", "aliases"}},
			wantHeld:    []ObjectRef{{"Community", "aliases"}},
			wantErr:     ErrInvalidCommunity,
		}},
	}, {
		name: "a conflict caused by an edit holds the edited object",
		steps: []step{{
			name:  "valid",
			peers: []v1beta2.BGPPeer{bgpPeer("a", 64512, 64513, "192.0.2.1"), bgpPeer("b", 64512, 64513, "192.0.2.2")},
			want:  []string{"a 1m30s  []", "b 1m30s  []"},
		}, {
			// b now takes a's address: Build refuses b (a comes first), so b keeps its old address.
			name:     "b moves onto a's address",
			peers:    []v1beta2.BGPPeer{bgpPeer("a", 64512, 64513, "192.0.2.1"), bgpPeer("b", 64512, 64513, "192.0.2.1")},
			want:     []string{"a 1m30s  []", "b 1m30s  []"},
			wantErrs: []ObjectRef{{"BGPPeer", "b"}},
			wantHeld: []ObjectRef{{"BGPPeer", "b"}},
			wantErr:  ErrConflict,
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lv LastValid
			for _, s := range tt.steps {
				in := base()
				in.Peers, in.Advertisements, in.BFDProfiles, in.Communities, in.Services = s.peers, s.ads, s.profiles, s.communities, svcs
				st, errs, held := lv.Build(in)
				var got []string
				for _, sess := range st.Sessions {
					var paths []string
					for _, p := range sess.Paths {
						ps := p.Prefix.String()
						for _, c := range p.Communities {
							ps += " " + c.String()
						}
						paths = append(paths, ps)
					}
					got = append(got, fmt.Sprintf("%s %v %s %v", sess.Name, sess.HoldTime, sess.BFDProfile, paths))
				}
				if diff := cmp.Diff(s.want, got); diff != "" {
					t.Errorf("%s: sessions (-want +got):\n%s", s.name, diff)
				}
				var refs []ObjectRef
				for _, e := range errs {
					refs = append(refs, ObjectRef{e.Kind, e.Name})
				}
				if diff := cmp.Diff(s.wantErrs, refs); diff != "" {
					t.Errorf("%s: errors (-want +got):\n%s\n%v", s.name, diff, errs)
				}
				if diff := cmp.Diff(s.wantHeld, held); diff != "" {
					t.Errorf("%s: held (-want +got):\n%s", s.name, diff)
				}
				if s.wantErr != nil && (len(errs) == 0 || !errors.Is(errs[0], s.wantErr)) {
					t.Errorf("%s: errors %v, want the first to wrap %v", s.name, errs, s.wantErr)
				}
			}
		})
	}
}
