package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta2"
	"github.com/ironlb/ironlb/internal/bgpconfig"
)

// TestValidatePeer: what the webhook refuses in a BGPPeer on its own — MetalLB's admission checks
// (its peerFromCR and parseTimers, run by its webhook) and what ironlb's speakers would refuse
// anyway — and what it leaves to the speakers because it names objects that may come later.
func TestValidatePeer(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	peer := func(mut func(*v1beta2.BGPPeerSpec)) *v1beta2.BGPPeer {
		p := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: "metallb-system"},
			Spec: v1beta2.BGPPeerSpec{MyASN: 64513, ASN: 64512, Address: "172.18.255.254"}}
		if mut != nil {
			mut(&p.Spec)
		}
		return p
	}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"rack": "a"}}
	for _, tt := range []struct {
		name string
		mut  func(*v1beta2.BGPPeerSpec)
		want string // substring of the error; "" = valid
		is   error  // the bgpconfig sentinel the error wraps, when it is one of them
	}{
		{"seed 003's peer", nil, "", nil},
		{"myASN 0", func(s *v1beta2.BGPPeerSpec) { s.MyASN = 0 }, "spec.myASN", bgpconfig.ErrInvalidASN},
		{"AS_TRANS", func(s *v1beta2.BGPPeerSpec) { s.ASN = 23456 }, "spec.peerASN", bgpconfig.ErrInvalidASN},
		{"peerASN and dynamicASN", func(s *v1beta2.BGPPeerSpec) { s.ASN = s.MyASN; s.DynamicASN = v1beta2.InternalASNMode }, "both set", bgpconfig.ErrInvalidASN},
		{"neither peerASN nor dynamicASN", func(s *v1beta2.BGPPeerSpec) { s.ASN = 0 }, "one of peerASN and dynamicASN", bgpconfig.ErrInvalidASN},
		{"dynamicASN external", func(s *v1beta2.BGPPeerSpec) { s.ASN = 0; s.DynamicASN = v1beta2.ExternalASNMode }, "", nil},
		{"ebgpMultiHop on iBGP", func(s *v1beta2.BGPPeerSpec) { s.ASN = s.MyASN; s.EBGPMultiHop = true }, "iBGP", bgpconfig.ErrConflict},
		{"no address", func(s *v1beta2.BGPPeerSpec) { s.Address = "" }, "one of peerAddress and interface", bgpconfig.ErrInvalidAddress},
		{"address and interface", func(s *v1beta2.BGPPeerSpec) { s.Interface = "eth0" }, "both set", bgpconfig.ErrConflict},
		{"bad peerAddress", func(s *v1beta2.BGPPeerSpec) { s.Address = "172.18.255.300" }, `"172.18.255.300" is not a unicast IP address`, bgpconfig.ErrInvalidAddress},
		{"multicast peerAddress", func(s *v1beta2.BGPPeerSpec) { s.Address = "224.0.0.5" }, "spec.peerAddress", bgpconfig.ErrInvalidAddress},
		{"bad sourceAddress", func(s *v1beta2.BGPPeerSpec) { s.SrcAddress = "nope" }, "spec.sourceAddress", bgpconfig.ErrInvalidAddress},
		{"sourceAddress of the other family", func(s *v1beta2.BGPPeerSpec) { s.SrcAddress = "fd00::1" }, "not of the family", bgpconfig.ErrInvalidAddress},
		{"IPv6 routerID", func(s *v1beta2.BGPPeerSpec) { s.RouterID = "fd00::1" }, "spec.routerID", bgpconfig.ErrInvalidAddress},
		{"holdTime 2s", func(s *v1beta2.BGPPeerSpec) { s.HoldTime = d("2s") }, "must be 0 or at least 3s", bgpconfig.ErrInvalidTimers},
		{"holdTime 3.5s rounds to 3s", func(s *v1beta2.BGPPeerSpec) { s.HoldTime = d("3.5s") }, "", nil},
		{"keepalive above hold", func(s *v1beta2.BGPPeerSpec) { s.HoldTime, s.KeepaliveTime = d("9s"), d("10s") }, "must be less than hold time", bgpconfig.ErrInvalidTimers},
		{"keepalive equal to hold", func(s *v1beta2.BGPPeerSpec) { s.HoldTime, s.KeepaliveTime = d("9s"), d("9s") }, "must be less than hold time", bgpconfig.ErrInvalidTimers},
		{"negative keepalive", func(s *v1beta2.BGPPeerSpec) { s.KeepaliveTime = d("-1s") }, "negative", bgpconfig.ErrInvalidTimers},
		{"password and passwordSecret", func(s *v1beta2.BGPPeerSpec) {
			s.Password = "hunter2"
			s.PasswordSecret = corev1.SecretReference{Name: "bgp-auth"}
		}, "password and passwordSecret are both set", bgpconfig.ErrInvalidPassword},
		{"password with a line break", func(s *v1beta2.BGPPeerSpec) { s.Password = "a\nb" }, "line break", bgpconfig.ErrInvalidPassword},
		{"password longer than TCP MD5 takes", func(s *v1beta2.BGPPeerSpec) { s.Password = strings.Repeat("x", 81) }, "81 bytes", bgpconfig.ErrInvalidPassword},
		{"passwordSecret alone: the Secret may come later", func(s *v1beta2.BGPPeerSpec) { s.PasswordSecret = corev1.SecretReference{Name: "later"} }, "", nil},
		{"unknown bfdProfile: it may come later", func(s *v1beta2.BGPPeerSpec) { s.BFDProfile = "later" }, "", nil},
		{"bfdProfile on a multi-hop session", func(s *v1beta2.BGPPeerSpec) { s.BFDProfile = "any"; s.EBGPMultiHop = true }, "multi-hop", bgpconfig.ErrUnsupported},
		{"VRF", func(s *v1beta2.BGPPeerSpec) { s.VRFName = "red" }, "spec.vrf", bgpconfig.ErrUnsupported},
		{"malformed nodeSelector", func(s *v1beta2.BGPPeerSpec) {
			s.NodeSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}}
		}, "spec.nodeSelectors", bgpconfig.ErrInvalidSelector},
		{"nodeSelector listed twice", func(s *v1beta2.BGPPeerSpec) { s.NodeSelectors = []metav1.LabelSelector{sel, sel} }, "spec.nodeSelectors[1]: duplicate of [0] (rack=a)", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidatePeer(peer(tt.mut))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Fatalf("error %v does not wrap %v", err, tt.is)
			}
		})
	}
}

// TestBGPPasswords: only a basic-auth Secret's "password" key is a password (MetalLB's rule); every
// other Secret is named with why it holds none.
func TestBGPPasswords(t *testing.T) {
	sec := func(name string, typ corev1.SecretType, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "metallb-system"}, Type: typ, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	pw, unusable := BGPPasswords([]any{
		sec("auth", corev1.SecretTypeBasicAuth, map[string]string{"password": "s3cret", "username": "ignored"}),
		sec("empty-password", corev1.SecretTypeBasicAuth, map[string]string{"password": ""}),
		sec("opaque", corev1.SecretTypeOpaque, map[string]string{"password": "x"}),
		sec("untyped", "", map[string]string{"password": "x"}),
		sec("tls", corev1.SecretTypeTLS, nil),
		sec("nokey", corev1.SecretTypeBasicAuth, map[string]string{"username": "x"}),
		"not a secret",
	})
	if diff := cmp.Diff(map[string]string{"auth": "s3cret", "empty-password": ""}, pw); diff != "" {
		t.Errorf("passwords (-want +got):\n%s", diff)
	}
	want := map[string]string{
		"opaque":  `Secret "opaque" has type Opaque, want kubernetes.io/basic-auth`,
		"untyped": `Secret "untyped" has type Opaque, want kubernetes.io/basic-auth`,
		"tls":     `Secret "tls" has type kubernetes.io/tls, want kubernetes.io/basic-auth`,
		"nokey":   `Secret "nokey" has no "password" key`,
	}
	if diff := cmp.Diff(want, unusable); diff != "" {
		t.Errorf("unusable (-want +got):\n%s", diff)
	}
	if pw, unusable := BGPPasswords(nil); pw != nil || unusable != nil {
		t.Errorf("no Secrets: %v, %v; want nil maps", pw, unusable)
	}
}
