package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CommunityAlias gives a BGP community value a name.
type CommunityAlias struct {
	// Name is the alias, usable in BGPAdvertisement communities.
	Name string `json:"name,omitempty"`
	// Value is the community the alias stands for: a standard community
	// (65535:65282) or a large community (large:1234:1234:1234).
	Value string `json:"value,omitempty"`
}

// CommunitySpec is the list of aliases a Community defines.
type CommunitySpec struct {
	Communities []CommunityAlias `json:"communities,omitempty"`
}

// CommunityStatus is empty: a Community reports nothing.
type CommunityStatus struct{}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status

// Community defines named aliases for BGP communities, so advertisements can
// refer to a community by name.
type Community struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CommunitySpec   `json:"spec,omitempty"`
	Status CommunityStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// CommunityList is a list of Communities.
type CommunityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Community `json:"items"`
}
