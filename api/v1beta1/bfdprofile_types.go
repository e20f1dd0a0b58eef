package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BFDProfileSpec holds the settings of a BFD session. Every field is
// optional; an unset one is left to the BGP daemon's default.
type BFDProfileSpec struct {
	// ReceiveInterval is the shortest interval, in milliseconds, at which
	// this system can receive control packets. The daemon's default is 300.
	// +kubebuilder:validation:Maximum:=60000
	// +kubebuilder:validation:Minimum:=10
	// +optional
	ReceiveInterval *uint32 `json:"receiveInterval,omitempty"`
	// TransmitInterval is the shortest interval, in milliseconds and before
	// jitter, at which this system wants to send control packets. The
	// daemon's default is 300.
	// +kubebuilder:validation:Maximum:=60000
	// +kubebuilder:validation:Minimum:=10
	// +optional
	TransmitInterval *uint32 `json:"transmitInterval,omitempty"`
	// DetectMultiplier is how many of the peer's transmit intervals may pass
	// without a packet before the session is declared down.
	// +kubebuilder:validation:Maximum:=255
	// +kubebuilder:validation:Minimum:=2
	// +optional
	DetectMultiplier *uint32 `json:"detectMultiplier,omitempty"`
	// EchoInterval is the shortest interval, in milliseconds, at which this
	// system can receive echo packets. The daemon's default is 50.
	// +kubebuilder:validation:Maximum:=60000
	// +kubebuilder:validation:Minimum:=10
	// +optional
	EchoInterval *uint32 `json:"echoInterval,omitempty"`
	// EchoMode turns the echo function on. Off by default; not supported on
	// multi-hop sessions.
	// +optional
	EchoMode *bool `json:"echoMode,omitempty"`
	// PassiveMode makes the session passive: it sends nothing until it has
	// received a control packet from the peer.
	// +optional
	PassiveMode *bool `json:"passiveMode,omitempty"`
	// MinimumTTL is, for multi-hop sessions only, the lowest TTL an incoming
	// control packet may have.
	// +kubebuilder:validation:Maximum:=254
	// +kubebuilder:validation:Minimum:=1
	// +optional
	MinimumTTL *uint32 `json:"minimumTtl,omitempty"`
}

// BFDProfileStatus is empty: a BFDProfile reports nothing.
type BFDProfileStatus struct{}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Passive Mode",type=boolean,JSONPath=`.spec.passiveMode`
// +kubebuilder:printcolumn:name="Transmit Interval",type=integer,JSONPath=`.spec.transmitInterval`
// +kubebuilder:printcolumn:name="Receive Interval",type=integer,JSONPath=`.spec.receiveInterval`
// +kubebuilder:printcolumn:name="Multiplier",type=integer,JSONPath=`.spec.detectMultiplier`

// BFDProfile is a named set of BFD settings that a BGPPeer can refer to, to
// run a BFD session beside its BGP session.
type BFDProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BFDProfileSpec   `json:"spec,omitempty"`
	Status BFDProfileStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BFDProfileList is a list of BFDProfiles.
type BFDProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BFDProfile `json:"items"`
}
