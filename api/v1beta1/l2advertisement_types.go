package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// L2AdvertisementSpec says which pools' addresses are announced with ARP and
// NDP, from which nodes and interfaces, and for which Services.
type L2AdvertisementSpec struct {
	// IPAddressPools names the pools whose addresses are announced.
	// +optional
	IPAddressPools []string `json:"ipAddressPools,omitempty"`
	// IPAddressPoolSelectors select, by label, more pools whose addresses are
	// announced. When neither this nor IPAddressPools selects a pool, the
	// advertisement applies to every pool.
	// +optional
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`
	// NodeSelectors limit the nodes that may announce the addresses. Empty,
	// every node may.
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`
	// Interfaces are the host interfaces the addresses are announced from.
	// Empty, every interface of the node.
	// +optional
	Interfaces []string `json:"interfaces,omitempty"`
	// ServiceSelectors limit, by label, the Services whose addresses are
	// announced. Empty, every Service with an address from the selected
	// pools.
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// L2AdvertisementStatus is empty: an L2Advertisement reports nothing.
type L2AdvertisementStatus struct{}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="IPAddressPools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="IPAddressPool Selectors",type=string,JSONPath=`.spec.ipAddressPoolSelectors`
// +kubebuilder:printcolumn:name="Interfaces",type=string,JSONPath=`.spec.interfaces`
// +kubebuilder:printcolumn:name="Node Selectors",type=string,JSONPath=`.spec.nodeSelectors`,priority=10

// L2Advertisement announces the addresses of the selected pools on the local
// network (layer 2: ARP for IPv4, NDP for IPv6).
type L2Advertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   L2AdvertisementSpec   `json:"spec,omitempty"`
	Status L2AdvertisementStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// L2AdvertisementList is a list of L2Advertisements.
type L2AdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []L2Advertisement `json:"items"`
}
