package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetalLBServiceBGPStatus is which BGP peers a node is configured to
// announce a Service to. The node and the Service it names never change once
// written.
type MetalLBServiceBGPStatus struct {
	// Node is the node that announces the Service.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	Node string `json:"node,omitempty"`

	// ServiceName is the name of the Service this status is about.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	ServiceName string `json:"serviceName,omitempty"`

	// ServiceNamespace is the namespace of the Service this status is about.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	ServiceNamespace string `json:"serviceNamespace,omitempty"`

	// Peers are the BGPPeers the Service is configured to be announced to.
	// Whether a peer actually receives the route depends on its session,
	// which this does not report.
	Peers []string `json:"peers,omitempty"`
}

// ServiceBGPStatusSpec is empty: the object is written by the speaker and
// carries only status.
type ServiceBGPStatusSpec struct{}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Service Name",type=string,JSONPath=`.status.serviceName`
// +kubebuilder:printcolumn:name="Service Namespace",type=string,JSONPath=`.status.serviceNamespace`

// ServiceBGPStatus reports, per node, the BGP peers a LoadBalancer Service is
// configured to be announced to.
type ServiceBGPStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceBGPStatusSpec    `json:"spec,omitempty"`
	Status MetalLBServiceBGPStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ServiceBGPStatusList is a list of ServiceBGPStatuses.
type ServiceBGPStatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceBGPStatus `json:"items"`
}
