package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta2"
)

// BGPPeer is served as v1beta1 and v1beta2 (stored); ironlb's conversion webhook (the controller's
// /convert) converts specs between them with these two functions, field for field as MetalLB
// v0.16.1's BGPPeer ConvertTo and ConvertFrom do, with one deliberate difference: a zero holdTime
// or keepaliveTime (v1beta1 cannot tell unset from zero) becomes unset in v1beta2, so the defaults
// apply, where MetalLB sets both to 0s, which turns keepalives off.
//
// v1beta1 → v1beta2 → v1beta1 gives back the spec as it was (TestBGPPeerRoundTrip). The other way
// loses what v1beta1 has no field for, as in MetalLB: localASN, dynamicASN, interface,
// connectTime, passwordSecret, enableGracefulRestart, vrf, disableMP, dualStackAddressFamily.
// Objects are stored as v1beta2, so reading one as v1beta1 hides those fields, and writing it back
// as v1beta1 drops them; clients that set them must use v1beta2.

// ToV1beta2 returns spec s in v1beta2's form.
func (s BGPPeerSpec) ToV1beta2() v1beta2.BGPPeerSpec {
	return v1beta2.BGPPeerSpec{
		MyASN:         s.MyASN,
		ASN:           s.ASN,
		Address:       s.Address,
		SrcAddress:    s.SrcAddress,
		Port:          s.Port,
		HoldTime:      nonZero(s.HoldTime),
		KeepaliveTime: nonZero(s.KeepaliveTime),
		RouterID:      s.RouterID,
		Password:      s.Password,
		BFDProfile:    s.BFDProfile,
		EBGPMultiHop:  s.EBGPMultiHop,
		NodeSelectors: toLabelSelectors(s.NodeSelectors),
	}
}

// BGPPeerSpecFromV1beta2 returns spec s in v1beta1's form, without the fields v1beta1 lacks.
func BGPPeerSpecFromV1beta2(s v1beta2.BGPPeerSpec) BGPPeerSpec {
	out := BGPPeerSpec{
		MyASN:         s.MyASN,
		ASN:           s.ASN,
		Address:       s.Address,
		SrcAddress:    s.SrcAddress,
		Port:          s.Port,
		RouterID:      s.RouterID,
		Password:      s.Password,
		BFDProfile:    s.BFDProfile,
		EBGPMultiHop:  s.EBGPMultiHop,
		NodeSelectors: fromLabelSelectors(s.NodeSelectors),
	}
	if s.HoldTime != nil {
		out.HoldTime = *s.HoldTime
	}
	if s.KeepaliveTime != nil {
		out.KeepaliveTime = *s.KeepaliveTime
	}
	return out
}

func nonZero(d metav1.Duration) *metav1.Duration {
	if d.Duration == 0 {
		return nil
	}
	return &d
}

// toLabelSelectors converts nodeSelectors; an empty one (all nodes) stays empty.
func toLabelSelectors(sels []NodeSelector) []metav1.LabelSelector {
	if sels == nil {
		return nil
	}
	out := make([]metav1.LabelSelector, 0, len(sels))
	for _, s := range sels {
		var ls metav1.LabelSelector
		if len(s.MatchLabels) > 0 {
			ls.MatchLabels = make(map[string]string, len(s.MatchLabels))
			for k, v := range s.MatchLabels {
				ls.MatchLabels[k] = v
			}
		}
		for _, e := range s.MatchExpressions {
			ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: e.Key, Operator: metav1.LabelSelectorOperator(e.Operator), Values: cloneValues(e.Values)})
		}
		out = append(out, ls)
	}
	return out
}

func fromLabelSelectors(sels []metav1.LabelSelector) []NodeSelector {
	if sels == nil {
		return nil
	}
	out := make([]NodeSelector, 0, len(sels))
	for _, s := range sels {
		var ns NodeSelector
		if len(s.MatchLabels) > 0 {
			ns.MatchLabels = make(map[string]string, len(s.MatchLabels))
			for k, v := range s.MatchLabels {
				ns.MatchLabels[k] = v
			}
		}
		for _, e := range s.MatchExpressions {
			// v1beta1 requires values (an empty list for Exists and DoesNotExist).
			ns.MatchExpressions = append(ns.MatchExpressions, MatchExpression{Key: e.Key, Operator: string(e.Operator),
				Values: append([]string{}, e.Values...)})
		}
		out = append(out, ns)
	}
	return out
}

func cloneValues(v []string) []string {
	if len(v) == 0 {
		return nil
	}
	return append([]string(nil), v...)
}
