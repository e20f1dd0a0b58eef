package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is frrk8s.metallb.io/v1beta1.
var GroupVersion = schema.GroupVersion{Group: "frrk8s.metallb.io", Version: "v1beta1"}

// BGPSessionStateGVR is the resource of BGPSessionState, for dynamic clients and informers.
var BGPSessionStateGVR = GroupVersion.WithResource("bgpsessionstates")

var (
	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds BGPSessionState and its list to a scheme. It fails only if the scheme
	// already holds a different Go type under one of these kinds.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &BGPSessionState{}, &BGPSessionStateList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
