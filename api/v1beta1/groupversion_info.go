package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is metallb.io/v1beta1, the group and version of every kind in
// this package.
var GroupVersion = schema.GroupVersion{Group: "metallb.io", Version: "v1beta1"}

// The resource of each kind in this package, for dynamic clients, informers and RBAC checks. Their
// plural names are the CRDs' (config/crd/bases).
var (
	IPAddressPoolGVR      = GroupVersion.WithResource("ipaddresspools")
	L2AdvertisementGVR    = GroupVersion.WithResource("l2advertisements")
	BGPAdvertisementGVR   = GroupVersion.WithResource("bgpadvertisements")
	BGPPeerGVR            = GroupVersion.WithResource("bgppeers") // served for old clients; ironlb reads v1beta2.BGPPeerGVR
	CommunityGVR          = GroupVersion.WithResource("communities")
	BFDProfileGVR         = GroupVersion.WithResource("bfdprofiles")
	ServiceL2StatusGVR    = GroupVersion.WithResource("servicel2statuses")
	ServiceBGPStatusGVR   = GroupVersion.WithResource("servicebgpstatuses")
	ConfigurationStateGVR = GroupVersion.WithResource("configurationstates")
)

var (
	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds every kind of metallb.io/v1beta1, and their lists, to
	// a scheme. It fails only if the scheme already holds a different Go type
	// under one of these kinds.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns the group-qualified resource of a plural resource name,
// e.g. Resource("ipaddresspools").
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&IPAddressPool{}, &IPAddressPoolList{},
		&BGPPeer{}, &BGPPeerList{},
		&L2Advertisement{}, &L2AdvertisementList{},
		&BGPAdvertisement{}, &BGPAdvertisementList{},
		&Community{}, &CommunityList{},
		&BFDProfile{}, &BFDProfileList{},
		&ServiceL2Status{}, &ServiceL2StatusList{},
		&ServiceBGPStatus{}, &ServiceBGPStatusList{},
		&ConfigurationState{}, &ConfigurationStateList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
