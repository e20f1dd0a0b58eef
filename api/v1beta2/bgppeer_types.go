package v1beta2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPPeerSpec is a BGP session to open with a router. Exactly one of peerASN
// and dynamicASN, and exactly one of peerAddress and interface, must be set;
// as in MetalLB, the schema leaves that check to the controller.
type BGPPeerSpec struct {
	// The AS numbers are uint32 in Go and declared format int64 in the
	// schema: since Kubernetes 1.36 the API server holds format int32
	// strictly, so with int32 and the 4294967295 maximum it refuses every
	// object that sets the field. MetalLB changed myASN and peerASN the same
	// way before v0.16.1, and localASN after it.

	// MyASN is the AS number of the local end of the session.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	MyASN uint32 `json:"myASN"`

	// ASN is the AS number expected from the remote end. Exactly one of ASN
	// and DynamicASN must be set.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	ASN uint32 `json:"peerASN,omitempty"`

	// LocalASN, if set, is the AS number announced to this peer instead of
	// MyASN (BGP's local-as, without prepending MyASN). Not supported by
	// MetalLB's native BGP mode.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	LocalASN uint32 `json:"localASN,omitempty"`

	// DynamicASN accepts the remote AS number the peer presents instead of
	// naming it in ASN: "internal" refuses a peer whose AS number differs
	// from MyASN, "external" one whose AS number equals it. Exactly one of
	// ASN and DynamicASN must be set.
	// +kubebuilder:validation:Enum=internal;external
	// +optional
	DynamicASN DynamicASNMode `json:"dynamicASN,omitempty"`

	// Address is the address to dial. Exactly one of Address and Interface
	// must be set.
	// +optional
	Address string `json:"peerAddress,omitempty"`

	// Interface is the node interface an unnumbered BGP session is opened
	// over. The name is not validated: an interface the node lacks only
	// keeps the session down. Exactly one of Address and Interface must be
	// set.
	// +optional
	Interface string `json:"interface,omitempty"`

	// SrcAddress is the source address of the session.
	// +optional
	SrcAddress string `json:"sourceAddress,omitempty"`

	// Port is the port to dial. Defaults to 179.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16384
	// +kubebuilder:default:=179
	Port uint16 `json:"peerPort,omitempty"`

	// HoldTime is the BGP hold time to propose (RFC 4271).
	// +optional
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`

	// KeepaliveTime is the BGP keepalive time to propose (RFC 4271).
	// +optional
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`

	// ConnectTime is how long to wait between attempts to connect to the
	// peer: a whole number of seconds from 1 to 65535.
	// +kubebuilder:validation:XValidation:message="connect time should be between 1 seconds to 65535",rule="duration(self).getSeconds() >= 1 && duration(self).getSeconds() <= 65535"
	// +kubebuilder:validation:XValidation:message="connect time should contain a whole number of seconds",rule="duration(self).getMilliseconds() % 1000 == 0"
	// +optional
	ConnectTime *metav1.Duration `json:"connectTime,omitempty"`

	// RouterID is the BGP router ID to send to the peer.
	// +optional
	RouterID string `json:"routerID,omitempty"`

	// NodeSelectors limit the nodes that open this session to those matching
	// one of them. Empty, every node.
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Password is the TCP MD5 password of the session, for routers that
	// require one. Prefer PasswordSecret.
	// +optional
	Password string `json:"password,omitempty"`

	// PasswordSecret names a Secret of type kubernetes.io/basic-auth, in the
	// namespace of the deployment, whose "password" key is the TCP MD5
	// password of the session.
	// +optional
	PasswordSecret corev1.SecretReference `json:"passwordSecret,omitempty"`

	// BFDProfile names the BFDProfile of a BFD session run beside this BGP
	// session. Unset, no BFD session.
	// +optional
	BFDProfile string `json:"bfdProfile,omitempty"`

	// EnableGracefulRestart lets the peer keep forwarding along the routes it
	// knows while the session restarts. It cannot be changed after creation,
	// since changing it restarts the session. FRR modes only.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="EnableGracefulRestart cannot be changed after creation"
	EnableGracefulRestart bool `json:"enableGracefulRestart,omitempty"`

	// EBGPMultiHop says the peer is more than one hop away. FRR modes only.
	// +optional
	EBGPMultiHop bool `json:"ebgpMultiHop,omitempty"`

	// VRFName is the host VRF of the interface the session goes through.
	// +optional
	VRFName string `json:"vrf,omitempty"`

	// DisableMP used to put IPv4 and IPv6 routes in separate sessions.
	//
	// Deprecated: each session now carries the family of its own address
	// only; set DualStackAddressFamily to carry both.
	// +optional
	// +kubebuilder:default:=false
	DisableMP bool `json:"disableMP,omitempty"`

	// DualStackAddressFamily enables the session for the other IP family too,
	// so IPv4 routes can be exchanged over an IPv6 session and the reverse.
	// +optional
	// +kubebuilder:default:=false
	DualStackAddressFamily bool `json:"dualStackAddressFamily,omitempty"`
}

// BGPPeerStatus is empty: a BGPPeer reports nothing.
type BGPPeerStatus struct{}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.peerAddress`
// +kubebuilder:printcolumn:name="ASN",type=string,JSONPath=`.spec.peerASN`
// +kubebuilder:printcolumn:name="BFD Profile",type=string,JSONPath=`.spec.bfdProfile`
// +kubebuilder:printcolumn:name="Multi Hops",type=string,JSONPath=`.spec.ebgpMultiHop`

// BGPPeer is a router the speakers open BGP sessions with.
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BGPPeerSpec   `json:"spec,omitempty"`
	Status BGPPeerStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BGPPeerList is a list of BGPPeers.
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPPeer `json:"items"`
}

// DynamicASNMode is how a BGPPeer without a fixed remote AS number accepts
// the one the peer presents.
type DynamicASNMode string

const (
	// InternalASNMode accepts only a peer in the same AS (iBGP).
	InternalASNMode DynamicASNMode = "internal"
	// ExternalASNMode accepts only a peer in another AS (eBGP).
	ExternalASNMode DynamicASNMode = "external"
)
