package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConfigurationResult is whether a component found the configuration valid.
// +kubebuilder:validation:Enum=Valid;Invalid;Unknown
type ConfigurationResult string

const (
	// ConfigurationResultValid means the component accepted the configuration.
	ConfigurationResultValid ConfigurationResult = "Valid"
	// ConfigurationResultInvalid means the component found errors in it.
	ConfigurationResultInvalid ConfigurationResult = "Invalid"
	// ConfigurationResultUnknown means the component has not reported yet.
	ConfigurationResultUnknown ConfigurationResult = "Unknown"
)

// ConfigurationStateStatus is a component's verdict on the configuration.
type ConfigurationStateStatus struct {
	// Result is the verdict.
	// +optional
	Result ConfigurationResult `json:"result,omitempty"`

	// ErrorSummary joins the errors the component's reconcilers met; empty
	// when Result is Valid.
	// +optional
	ErrorSummary string `json:"errorSummary,omitempty"`

	// Conditions are the conditions reported by the component's reconcilers,
	// one per type.
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.result`
// +kubebuilder:printcolumn:name="ErrorSummary",type=string,JSONPath=`.status.errorSummary`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ConfigurationState reports whether one component (the controller, or the
// speaker of one node) accepted the configuration. It has no spec. Its labels
// say whose it is: metallb.io/component-type is "controller" or "speaker",
// and a speaker's also carries metallb.io/node-name.
type ConfigurationState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status ConfigurationStateStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ConfigurationStateList is a list of ConfigurationStates.
type ConfigurationStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []ConfigurationState `json:"items"`
}
