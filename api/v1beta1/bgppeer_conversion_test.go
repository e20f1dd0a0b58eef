package v1beta1_test

import (
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// TestBGPPeerRoundTrip: v1beta1 → v1beta2 → v1beta1 gives back every field, for any spec (nil and
// empty lists and maps are the same object in JSON's eyes and in the apiserver's).
func TestBGPPeerRoundTrip(t *testing.T) {
	roundTrip := func(s v1beta1.BGPPeerSpec) bool {
		back := v1beta1.BGPPeerSpecFromV1beta2(s.ToV1beta2())
		if diff := cmp.Diff(s, back, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("v1beta1 → v1beta2 → v1beta1 (-want +got):\n%s", diff)
			return false
		}
		return true
	}
	cfg := &quick.Config{MaxCount: 2000, Values: func(v []reflect.Value, r *rand.Rand) {
		v[0] = reflect.ValueOf(randomSpec(r))
	}}
	if err := quick.Check(roundTrip, cfg); err != nil {
		t.Error(err)
	}
}

// randomSpec fills every field of a v1beta1 spec, some left empty.
func randomSpec(r *rand.Rand) v1beta1.BGPPeerSpec {
	str := func() string {
		if r.Intn(4) == 0 {
			return ""
		}
		v, _ := quick.Value(reflect.TypeFor[string](), r)
		return v.String()
	}
	dur := func() metav1.Duration {
		if r.Intn(3) == 0 {
			return metav1.Duration{}
		}
		return metav1.Duration{Duration: time.Duration(r.Int63n(int64(time.Hour)))}
	}
	s := v1beta1.BGPPeerSpec{MyASN: r.Uint32(), ASN: r.Uint32(), Address: str(), SrcAddress: str(),
		Port: uint16(r.Intn(65536)), HoldTime: dur(), KeepaliveTime: dur(), RouterID: str(), Password: str(),
		BFDProfile: str(), EBGPMultiHop: r.Intn(2) == 0}
	for range r.Intn(3) {
		var ns v1beta1.NodeSelector
		for range r.Intn(3) {
			if ns.MatchLabels == nil {
				ns.MatchLabels = map[string]string{}
			}
			ns.MatchLabels[str()] = str()
		}
		for range r.Intn(3) {
			e := v1beta1.MatchExpression{Key: str(), Operator: []string{"In", "NotIn", "Exists", "DoesNotExist"}[r.Intn(4)]}
			for range r.Intn(3) {
				e.Values = append(e.Values, str())
			}
			ns.MatchExpressions = append(ns.MatchExpressions, e)
		}
		s.NodeSelectors = append(s.NodeSelectors, ns)
	}
	return s
}

// TestBGPPeerConversion: the fields as MetalLB v0.16.1 converts them (its
// TestValidateBGPPeerConvertTo), and what v1beta1 has no field for is left out.
func TestBGPPeerConversion(t *testing.T) {
	v1 := v1beta1.BGPPeerSpec{MyASN: 42, ASN: 142, Address: "1.2.3.4", Port: 1179,
		HoldTime: metav1.Duration{Duration: 180 * time.Second}, RouterID: "10.20.30.40", SrcAddress: "10.20.30.40",
		EBGPMultiHop: true, BFDProfile: "default", KeepaliveTime: metav1.Duration{Duration: time.Second}, Password: "nopass",
		NodeSelectors: []v1beta1.NodeSelector{{MatchLabels: map[string]string{"foo": "bar"},
			MatchExpressions: []v1beta1.MatchExpression{{Key: "k", Operator: "In", Values: []string{"quux"}}}}}}
	v2 := v1beta2.BGPPeerSpec{MyASN: 42, ASN: 142, Address: "1.2.3.4", Port: 1179,
		HoldTime: &metav1.Duration{Duration: 180 * time.Second}, RouterID: "10.20.30.40", SrcAddress: "10.20.30.40",
		EBGPMultiHop: true, BFDProfile: "default", KeepaliveTime: &metav1.Duration{Duration: time.Second}, Password: "nopass",
		NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"foo": "bar"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpIn, Values: []string{"quux"}}}}}}
	if diff := cmp.Diff(v2, v1.ToV1beta2()); diff != "" {
		t.Errorf("ToV1beta2 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(v1, v1beta1.BGPPeerSpecFromV1beta2(v2)); diff != "" {
		t.Errorf("BGPPeerSpecFromV1beta2 (-want +got):\n%s", diff)
	}
	// Unset timers stay unset (MetalLB would set 0s, turning keepalives off).
	if got := (v1beta1.BGPPeerSpec{MyASN: 1}).ToV1beta2(); got.HoldTime != nil || got.KeepaliveTime != nil {
		t.Errorf("unset timers became %v, %v", got.HoldTime, got.KeepaliveTime)
	}
	// v1beta2 only: dropped in v1beta1, as MetalLB does. Exists has values [] in v1beta1 (required).
	only2 := v2
	only2.LocalASN, only2.DynamicASN, only2.Interface, only2.VRFName = 7, v1beta2.ExternalASNMode, "eth0", "red"
	only2.ConnectTime = &metav1.Duration{Duration: time.Second}
	only2.EnableGracefulRestart, only2.DisableMP, only2.DualStackAddressFamily = true, true, true
	only2.NodeSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpExists}}}}
	want := v1
	want.NodeSelectors = []v1beta1.NodeSelector{{MatchExpressions: []v1beta1.MatchExpression{{Key: "k", Operator: "Exists", Values: []string{}}}}}
	if diff := cmp.Diff(want, v1beta1.BGPPeerSpecFromV1beta2(only2)); diff != "" {
		t.Errorf("BGPPeerSpecFromV1beta2 of v1beta2-only fields (-want +got):\n%s", diff)
	}
}
