package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
)

// TestConfigStateStatus is MetalLB's ConfigurationStateReconciler rule, one row per case.
func TestConfigStateStatus(t *testing.T) {
	ok := ConfigCondition(ConditionConfigValid, nil)
	bad := ConfigCondition(ConditionConfigValid, []string{"BGPPeer r: spec.holdTime: invalid timers", "IPAddressPool p: InvalidPool: overlaps q"})
	poolBad := ConfigCondition(ConditionPoolValid, []string{"pool x overlaps y"})
	other := metav1.Condition{Type: "somethingElse", Status: metav1.ConditionFalse, Reason: "UnknownError", Message: "not a configuration error"}
	for _, tt := range []struct {
		name   string
		conds  []metav1.Condition
		result v1beta1.ConfigurationResult
		summ   string
	}{
		{"no condition yet: Unknown", nil, v1beta1.ConfigurationResultUnknown, ""},
		{"all Reconciled: Valid", []metav1.Condition{ok}, v1beta1.ConfigurationResultValid, ""},
		{"a ConfigurationError: Invalid, its message", []metav1.Condition{bad}, v1beta1.ConfigurationResultInvalid, "BGPPeer r: spec.holdTime: invalid timers\nIPAddressPool p: InvalidPool: overlaps q"},
		{"two: both messages, in condition order", []metav1.Condition{poolBad, bad}, v1beta1.ConfigurationResultInvalid, "pool x overlaps y\nBGPPeer r: spec.holdTime: invalid timers\nIPAddressPool p: InvalidPool: overlaps q"},
		{"False for another reason: not a configuration error", []metav1.Condition{ok, other}, v1beta1.ConfigurationResultValid, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, s := ConfigStateStatus(tt.conds)
			if r != tt.result || s != tt.summ {
				t.Errorf("got (%q, %q), want (%q, %q)", r, s, tt.result, tt.summ)
			}
		})
	}
}

// TestMergeConditions: a condition whose status stays keeps its transition time (and takes the new
// message); one whose status changes, or a new one, takes now; others are kept.
func TestMergeConditions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	old := []metav1.Condition{
		{Type: ConditionConfigValid, Status: metav1.ConditionFalse, Reason: ReasonConfigurationError, Message: "a", LastTransitionTime: t0},
		{Type: ConditionPoolValid, Status: metav1.ConditionTrue, Reason: ReasonReconciled, LastTransitionTime: t0},
	}
	got := MergeConditions(old, t1, ConfigCondition(ConditionConfigValid, []string{"b"}))
	want := []metav1.Condition{
		{Type: ConditionConfigValid, Status: metav1.ConditionFalse, Reason: ReasonConfigurationError, Message: "b", LastTransitionTime: t0},
		old[1],
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("same status (-want +got):\n%s", diff)
	}
	got = MergeConditions(old, t1, ConfigCondition(ConditionConfigValid, nil), ConfigCondition("new", nil))
	want = []metav1.Condition{
		{Type: ConditionConfigValid, Status: metav1.ConditionTrue, Reason: ReasonReconciled, LastTransitionTime: t1},
		old[1],
		{Type: "new", Status: metav1.ConditionTrue, Reason: ReasonReconciled, LastTransitionTime: t1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status changed (-want +got):\n%s", diff)
	}
	if old[0].Message != "a" {
		t.Errorf("old changed: %+v", old[0])
	}
}
