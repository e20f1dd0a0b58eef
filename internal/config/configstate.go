package config

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironlb/ironlb/api/v1beta1"
)

// MetalLB's ConfigurationState objects (v0.16.1, internal/k8s/k8s.go and controllers/values.go):
// one per component in the configuration namespace, each listing conditions, one per part of the
// component that loads configuration, from which Result and ErrorSummary follow
// (ConfigStateStatus). The controller writes "controller"; each speaker writes its own,
// "speaker-<node>".
const (
	// ConfigStateController is the controller's ConfigurationState.
	ConfigStateController = "controller"
	// LabelComponentType is "controller" or "speaker"; LabelNodeName the speaker's node.
	LabelComponentType = "metallb.io/component-type"
	LabelNodeName      = "metallb.io/node-name"

	// ConditionConfigValid is the condition of the part loading the configuration objects
	// (MetalLB's ConfigReconciler), ConditionPoolValid the controller's pools.
	ConditionConfigValid = "configReconcilerValid"
	ConditionPoolValid   = "poolReconcilerValid"
	// Condition reasons: ReasonReconciled with status True; ReasonConfigurationError with status
	// False makes the state Invalid.
	ReasonReconciled         = "Reconciled"
	ReasonConfigurationError = "ConfigurationError"
)

// SpeakerConfigState is the name of the speaker's ConfigurationState on node.
func SpeakerConfigState(node string) string { return "speaker-" + node }

// ConfigStateStatus computes a ConfigurationState's result and error summary from its conditions,
// as MetalLB's ConfigurationStateReconciler does: Unknown without conditions, Invalid when one is
// False with reason ConfigurationError (the summary is their messages, one per line), else Valid.
func ConfigStateStatus(conds []metav1.Condition) (result v1beta1.ConfigurationResult, summary string) {
	if len(conds) == 0 {
		return v1beta1.ConfigurationResultUnknown, ""
	}
	result = v1beta1.ConfigurationResultValid
	var msgs []string
	for _, c := range conds {
		if c.Status == metav1.ConditionFalse && c.Reason == ReasonConfigurationError {
			result = v1beta1.ConfigurationResultInvalid
			msgs = append(msgs, c.Message)
		}
	}
	return result, strings.Join(msgs, "\n")
}

// ConfigCondition is a condition of type typ: True (Reconciled) without problems, else False
// (ConfigurationError) with the problems, one per line, as its message.
func ConfigCondition(typ string, problems []string) metav1.Condition {
	if len(problems) == 0 {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: ReasonReconciled}
	}
	return metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: ReasonConfigurationError, Message: strings.Join(problems, "\n")}
}

// MergeConditions returns old with each of conds set (meta.SetStatusCondition: a condition whose
// status did not change keeps its lastTransitionTime; a new one gets now).
func MergeConditions(old []metav1.Condition, now metav1.Time, conds ...metav1.Condition) []metav1.Condition {
	out := make([]metav1.Condition, len(old))
	copy(out, old)
	for _, c := range conds {
		c.LastTransitionTime = now
		meta.SetStatusCondition(&out, c)
	}
	return out
}
