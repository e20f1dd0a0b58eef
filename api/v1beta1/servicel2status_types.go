package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetalLBServiceL2Status is where a Service's layer 2 announcement is made.
// The node and the Service it names never change once written.
type MetalLBServiceL2Status struct {
	// Node is the node that answers ARP/NDP for the Service's addresses and
	// so receives its traffic.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	Node string `json:"node,omitempty"`
	// ServiceName is the name of the Service this status is about.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	ServiceName string `json:"serviceName,omitempty"`
	// ServiceNamespace is the namespace of the Service this status is about.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	ServiceNamespace string `json:"serviceNamespace,omitempty"`
	// Interfaces are the node's interfaces the announcement is made on.
	Interfaces []InterfaceInfo `json:"interfaces,omitempty"`
}

// InterfaceInfo names one network interface of a node.
type InterfaceInfo struct {
	// Name is the interface's name on the node.
	Name string `json:"name,omitempty"`
}

// ServiceL2StatusSpec is empty: the object is written by the speaker and
// carries only status.
type ServiceL2StatusSpec struct{}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Allocated Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Service Name",type=string,JSONPath=`.status.serviceName`
// +kubebuilder:printcolumn:name="Service Namespace",type=string,JSONPath=`.status.serviceNamespace`

// ServiceL2Status reports which node announces a LoadBalancer Service in
// layer 2 mode, one object per Service and announcing node.
type ServiceL2Status struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceL2StatusSpec    `json:"spec,omitempty"`
	Status MetalLBServiceL2Status `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ServiceL2StatusList is a list of ServiceL2Statuses.
type ServiceL2StatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceL2Status `json:"items"`
}
