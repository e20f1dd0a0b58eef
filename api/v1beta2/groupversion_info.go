package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is metallb.io/v1beta2, the group and version of BGPPeer.
var GroupVersion = schema.GroupVersion{Group: "metallb.io", Version: "v1beta2"}

// BGPPeerGVR is the resource of BGPPeer in this version (the storage version), for dynamic clients
// and informers.
var BGPPeerGVR = GroupVersion.WithResource("bgppeers")

var (
	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds BGPPeer and BGPPeerList of metallb.io/v1beta2 to a
	// scheme. It fails only if the scheme already holds a different Go type
	// under one of these kinds.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns the group-qualified resource of a plural resource name,
// e.g. Resource("bgppeers").
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &BGPPeer{}, &BGPPeerList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
