package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels frr-k8s puts on BGPSessionState objects, to select a node's or a peer's sessions.
const (
	LabelNode = "frrk8s.metallb.io/node"
	LabelPeer = "frrk8s.metallb.io/peer"
	LabelVRF  = "frrk8s.metallb.io/vrf"
)

// BGPSessionStateSpec is empty: the object is written by the node's BGP speaker and carries only
// status.
type BGPSessionStateSpec struct{}

// BGPSessionStateStatus is the state of one BGP session of one node.
type BGPSessionStateStatus struct {
	// BGPStatus is the BGP state with FRR's names: Idle, Connect, Active, OpenSent, OpenConfirm or
	// Established.
	BGPStatus string `json:"bgpStatus,omitempty"`
	// BFDStatus is the BFD state: "N/A" when the session has no BFD, else down, init, up or
	// adminDown.
	BFDStatus string `json:"bfdStatus,omitempty"`
	// Node is the node the session runs on.
	Node string `json:"node,omitempty"`
	// Peer is the peer's address.
	Peer string `json:"peer,omitempty"`
	// VRF is the session's VRF; empty for the default VRF.
	VRF string `json:"vrf,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Peer",type=string,JSONPath=`.status.peer`
// +kubebuilder:printcolumn:name="VRF",type=string,JSONPath=`.status.vrf`
// +kubebuilder:printcolumn:name="BGP",type=string,JSONPath=`.status.bgpStatus`
// +kubebuilder:printcolumn:name="BFD",type=string,JSONPath=`.status.bfdStatus`

// BGPSessionState exposes the state of one BGP session of one node.
type BGPSessionState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BGPSessionStateSpec   `json:"spec,omitempty"`
	Status BGPSessionStateStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BGPSessionStateList is a list of BGPSessionStates.
type BGPSessionStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPSessionState `json:"items"`
}
