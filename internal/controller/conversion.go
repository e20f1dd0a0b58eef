package controller

import (
	"encoding/json"
	"fmt"
	"net/http"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// The conversion webhook (path /convert of the admission webhook's server, same certificate) turns
// BGPPeers between metallb.io/v1beta1 and v1beta2 for the apiserver, as MetalLB's does: the CRD
// bgppeers.metallb.io names it in spec.conversion (config/crd/bases, written by hack/generate.sh),
// and certs keeps that CRD's caBundle trusting the served certificate like the webhook
// configuration's. The spec is converted field by field (v1beta1.BGPPeerSpec.ToV1beta2,
// v1beta1.BGPPeerSpecFromV1beta2); metadata and status are returned as they came, byte for byte
// in JSON terms, since the apiserver refuses a conversion that changes metadata.

// conversionCRD is the CRD whose conversion webhook is this one.
const conversionCRD = "bgppeers.metallb.io"

// convertPeer returns obj, a BGPPeer in JSON of any served version, in version want
// ("metallb.io/v1beta2"). Its errors name the object. It is pure.
func convertPeer(obj []byte, want string) ([]byte, error) {
	var u map[string]any
	if err := json.Unmarshal(obj, &u); err != nil {
		return nil, fmt.Errorf("decoding an object to convert: %w", err)
	}
	from, _ := u["apiVersion"].(string)
	kind, _ := u["kind"].(string)
	name := "?"
	if md, ok := u["metadata"].(map[string]any); ok {
		n, _ := md["name"].(string)
		namespace, _ := md["namespace"].(string)
		name = namespace + "/" + n
	}
	if kind != "BGPPeer" {
		return nil, fmt.Errorf("%s %s: only BGPPeers are converted", kind, name)
	}
	spec, err := json.Marshal(u["spec"])
	if err != nil {
		return nil, err
	}
	var out any
	switch {
	case from == want:
		return obj, nil
	case from == v1beta1.GroupVersion.String() && want == v1beta2.GroupVersion.String():
		var s v1beta1.BGPPeerSpec
		if err := json.Unmarshal(spec, &s); err != nil {
			return nil, fmt.Errorf("bgppeer %s: decoding its %s spec: %w", name, from, err)
		}
		out = s.ToV1beta2()
	case from == v1beta2.GroupVersion.String() && want == v1beta1.GroupVersion.String():
		var s v1beta2.BGPPeerSpec
		if err := json.Unmarshal(spec, &s); err != nil {
			return nil, fmt.Errorf("bgppeer %s: decoding its %s spec: %w", name, from, err)
		}
		out = v1beta1.BGPPeerSpecFromV1beta2(s)
	default:
		return nil, fmt.Errorf("bgppeer %s: no conversion from %q to %q", name, from, want)
	}
	if _, had := u["spec"]; had {
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("bgppeer %s: %w", name, err)
		}
		var converted map[string]any
		if err := json.Unmarshal(b, &converted); err != nil {
			return nil, fmt.Errorf("bgppeer %s: %w", name, err)
		}
		u["spec"] = converted
	}
	u["apiVersion"] = want
	return json.Marshal(u)
}

// convertReview answers a ConversionReview: every object converted, or a failure naming the first
// that could not be (the apiserver then fails the request that needed it).
func convertReview(req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, o := range req.Objects {
		c, err := convertPeer(o.Raw, req.DesiredAPIVersion)
		if err != nil {
			return &apiextensionsv1.ConversionResponse{UID: req.UID,
				Result: metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}}
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: c})
	}
	return resp
}

// convert is the HTTP handler of /convert.
func (w *webhook) convert(rw http.ResponseWriter, req *http.Request) {
	review := decodeReview(rw, req, 16<<20, "not a ConversionReview",
		func(r *apiextensionsv1.ConversionReview) bool { return r.Request != nil })
	if review == nil {
		return
	}
	review.Response = convertReview(review.Request)
	if review.Response.Result.Status != metav1.StatusSuccess {
		w.log.Error("conversion refused", "to", review.Request.DesiredAPIVersion, "err", review.Response.Result.Message)
	}
	review.Request = nil
	writeReview(rw, review)
}
