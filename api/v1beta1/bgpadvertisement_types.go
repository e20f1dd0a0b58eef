package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPAdvertisementSpec says which pools' addresses are announced over BGP,
// to which peers, from which nodes, and with which BGP attributes.
// serviceSelectors cannot be combined with aggregation: an aggregated prefix
// would also cover the addresses of Services the selectors leave out.
// +kubebuilder:validation:XValidation:rule="!has(self.serviceSelectors) || self.serviceSelectors.size() == 0 || ((!has(self.aggregationLength) || self.aggregationLength == 32) && (!has(self.aggregationLengthV6) || self.aggregationLengthV6 == 128))",message="serviceSelectors cannot be used with an aggregationLength other than 32 or an aggregationLengthV6 other than 128"
type BGPAdvertisementSpec struct {
	// AggregationLength is the prefix length IPv4 addresses are rolled up
	// into before they are announced. Defaults to 32, one route per address.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default:=32
	// +optional
	AggregationLength *int32 `json:"aggregationLength,omitempty"`

	// AggregationLengthV6 is the prefix length IPv6 addresses are rolled up
	// into before they are announced. Defaults to 128, one route per address.
	// +kubebuilder:default:=128
	// +optional
	AggregationLengthV6 *int32 `json:"aggregationLengthV6,omitempty"`

	// Declared format int64 with the uint32 bounds, where MetalLB's schema
	// says int32 without bounds: since Kubernetes 1.36 int32 refuses values
	// above 2147483647, which BGP allows and the Go type holds.

	// LocalPref is the BGP LOCAL_PREF attribute of the announcements; a peer
	// prefers the path with the higher value.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	LocalPref uint32 `json:"localPref,omitempty"`

	// Communities are the BGP communities attached to the announcements. Each
	// is a standard community (65535:65282), a large community
	// (large:1234:1234:1234) or the name of an alias a Community object
	// defines.
	// +optional
	Communities []string `json:"communities,omitempty"`

	// IPAddressPools names the pools whose addresses are announced.
	// +optional
	IPAddressPools []string `json:"ipAddressPools,omitempty"`

	// IPAddressPoolSelectors select, by label, more pools whose addresses are
	// announced. When neither this nor IPAddressPools selects a pool, the
	// advertisement applies to every pool.
	// +optional
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`

	// NodeSelectors limit the nodes announced as next hops. Empty, every
	// node is.
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Peers names the BGPPeers the addresses are announced to. Empty, every
	// configured peer.
	// +optional
	Peers []string `json:"peers,omitempty"`

	// ServiceSelectors limit, by label, the Services whose addresses are
	// announced. Empty, every Service with an address from the selected
	// pools. Not allowed together with aggregation.
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// BGPAdvertisementStatus is empty: a BGPAdvertisement reports nothing.
type BGPAdvertisementStatus struct{}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="IPAddressPools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="IPAddressPool Selectors",type=string,JSONPath=`.spec.ipAddressPoolSelectors`
// +kubebuilder:printcolumn:name="Peers",type=string,JSONPath=`.spec.peers`
// +kubebuilder:printcolumn:name="Node Selectors",type=string,JSONPath=`.spec.nodeSelectors`,priority=10

// BGPAdvertisement announces the addresses of the selected pools to BGP
// peers, with the attributes it sets.
type BGPAdvertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BGPAdvertisementSpec   `json:"spec,omitempty"`
	Status BGPAdvertisementStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BGPAdvertisementList is a list of BGPAdvertisements.
type BGPAdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPAdvertisement `json:"items"`
}
