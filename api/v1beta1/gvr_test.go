package v1beta1_test

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// TestGVRs holds each kind's resource variable to the CRD that serves it (wantCRDs, which
// TestCRDsServeMetalLBAPI holds to config/crd/bases).
func TestGVRs(t *testing.T) {
	for kind, gvr := range map[string]schema.GroupVersionResource{
		"IPAddressPool":      v1beta1.IPAddressPoolGVR,
		"L2Advertisement":    v1beta1.L2AdvertisementGVR,
		"BGPAdvertisement":   v1beta1.BGPAdvertisementGVR,
		"BGPPeer":            v1beta1.BGPPeerGVR,
		"Community":          v1beta1.CommunityGVR,
		"BFDProfile":         v1beta1.BFDProfileGVR,
		"ServiceL2Status":    v1beta1.ServiceL2StatusGVR,
		"ServiceBGPStatus":   v1beta1.ServiceBGPStatusGVR,
		"ConfigurationState": v1beta1.ConfigurationStateGVR,
	} {
		want := wantCRDs[kind]
		if gvr.Group != "metallb.io" || gvr.Resource != want.plural || gvr.Version != "v1beta1" || !slices.Contains(want.versions, "v1beta1") {
			t.Errorf("%s: %v; the CRD serves %s in %v", kind, gvr, want.plural, want.versions)
		}
	}
	if want := wantCRDs["BGPPeer"]; v1beta2.BGPPeerGVR != v1beta2.GroupVersion.WithResource(want.plural) || !slices.Contains(want.versions, "v1beta2") {
		t.Errorf("v1beta2.BGPPeerGVR = %v", v1beta2.BGPPeerGVR)
	}
}
