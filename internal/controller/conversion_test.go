package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/ironlb/ironlb/api/v1beta1"
	"github.com/ironlb/ironlb/api/v1beta2"
)

// TestConvertPeer: the spec is converted, apiVersion set, and everything else (metadata, status,
// fields the apiserver added) returned as it came; what cannot be converted is refused with the
// object's name.
func TestConvertPeer(t *testing.T) {
	const meta = `"metadata":{"name":"r","namespace":"metallb-system","uid":"u1","resourceVersion":"7","labels":{"a":"b"},` +
		`"annotations":{"x":"y"},"creationTimestamp":"2026-01-01T00:00:00Z","generation":3}`
	tests := []struct {
		name, in, want, wantErr string
		to                      string
	}{
		{name: "v1beta1 to v1beta2", to: "metallb.io/v1beta2",
			in: `{"apiVersion":"metallb.io/v1beta1","kind":"BGPPeer",` + meta + `,"spec":{"myASN":1,"peerASN":2,"peerAddress":"10.0.0.1",` +
				`"holdTime":"90s","keepaliveTime":"0s","nodeSelectors":[{"matchExpressions":[{"key":"k","operator":"Exists","values":[]}]}]},"status":{}}`,
			want: `{"apiVersion":"metallb.io/v1beta2","kind":"BGPPeer",` + meta + `,"spec":{"myASN":1,"peerASN":2,"peerAddress":"10.0.0.1",` +
				`"holdTime":"1m30s","nodeSelectors":[{"matchExpressions":[{"key":"k","operator":"Exists"}]}],"passwordSecret":{}},"status":{}}`},
		{name: "v1beta2 to v1beta1 drops what v1beta1 lacks", to: "metallb.io/v1beta1",
			in: `{"apiVersion":"metallb.io/v1beta2","kind":"BGPPeer",` + meta + `,"spec":{"myASN":1,"peerASN":2,"peerAddress":"10.0.0.1",` +
				`"peerPort":179,"vrf":"red","disableMP":false,"passwordSecret":{"name":"s"}}}`,
			want: `{"apiVersion":"metallb.io/v1beta1","kind":"BGPPeer",` + meta + `,"spec":{"myASN":1,"peerASN":2,"peerAddress":"10.0.0.1",` +
				`"peerPort":179,"holdTime":"0s","keepaliveTime":"0s"}}`},
		{name: "same version", to: "metallb.io/v1beta2",
			in:   `{"apiVersion":"metallb.io/v1beta2","kind":"BGPPeer",` + meta + `,"spec":{"vrf":"red"}}`,
			want: `{"apiVersion":"metallb.io/v1beta2","kind":"BGPPeer",` + meta + `,"spec":{"vrf":"red"}}`},
		{name: "not a BGPPeer", to: "metallb.io/v1beta1", in: `{"apiVersion":"metallb.io/v1beta2","kind":"Other",` + meta + `}`,
			wantErr: "Other metallb-system/r: only BGPPeers are converted"},
		{name: "unknown version", to: "metallb.io/v1", in: `{"apiVersion":"metallb.io/v1beta2","kind":"BGPPeer",` + meta + `,"spec":{}}`,
			wantErr: `bgppeer metallb-system/r: no conversion from "metallb.io/v1beta2" to "metallb.io/v1"`},
		{name: "a spec that does not decode", to: "metallb.io/v1beta2",
			in:      `{"apiVersion":"metallb.io/v1beta1","kind":"BGPPeer",` + meta + `,"spec":{"myASN":"many"}}`,
			wantErr: "bgppeer metallb-system/r: decoding its metallb.io/v1beta1 spec"},
		{name: "not JSON", to: "metallb.io/v1beta2", in: `{`, wantErr: "decoding an object to convert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := convertPeer([]byte(tt.in), tt.to)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.want), &w); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(w, g); diff != "" {
				t.Errorf("convertPeer (-want +got):\n%s", diff)
			}
		})
	}

	// A review answers every object, or fails as a whole naming the object.
	req := &apiextensionsv1.ConversionRequest{UID: "r1", DesiredAPIVersion: "metallb.io/v1beta2", Objects: []runtime.RawExtension{
		{Raw: []byte(tests[0].in)}, {Raw: []byte(tests[3].in)}}}
	if resp := convertReview(req); resp.UID != "r1" || resp.Result.Status != metav1.StatusFailure || !strings.Contains(resp.Result.Message, "Other") {
		t.Errorf("review with a bad object: %+v", resp)
	}
	req.Objects = req.Objects[:1]
	if resp := convertReview(req); resp.UID != "r1" || resp.Result.Status != metav1.StatusSuccess || len(resp.ConvertedObjects) != 1 {
		t.Errorf("review: %+v", resp)
	}
}

// TestConversionAgainstAPIServer: with the controller's webhook serving /convert and keeping the
// CRD's caBundle, a BGPPeer created as v1beta1 reads as v1beta2 and back as v1beta1 with every
// field, and one created as v1beta2 reads as v1beta1 without the fields v1beta1 lacks.
func TestConversionAgainstAPIServer(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.webhookAddr = freeAddr(t)
	_, port, _ := net.SplitHostPort(h.webhookAddr)
	dyn := dynamic.NewForConfigOrDie(h.env.Config)
	// The CRD as installed names the webhook's Service, which this apiserver cannot reach: point it
	// at the test's address (the certificate for WebhookService "localhost" covers it).
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/conversion/webhook/clientConfig","value":{"url":"https://localhost:%s/convert"}}]`, port)
	if _, err := dyn.Resource(crdGVR).Patch(ctx, conversionCRD, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.startWithWebhook()

	v1 := v1beta1.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: "metallb.io/v1beta1", Kind: "BGPPeer"},
		ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns, Labels: map[string]string{"team": "net"}},
		Spec: v1beta1.BGPPeerSpec{MyASN: 64512, ASN: 64513, Address: "10.0.0.1", SrcAddress: "10.0.0.2", Port: 1179,
			HoldTime: metav1.Duration{Duration: 90 * time.Second}, KeepaliveTime: metav1.Duration{Duration: 30 * time.Second},
			RouterID: "10.0.0.3", Password: "pw", BFDProfile: "fast", EBGPMultiHop: true,
			NodeSelectors: []v1beta1.NodeSelector{{MatchLabels: map[string]string{"rack": "1"},
				MatchExpressions: []v1beta1.MatchExpression{{Key: "zone", Operator: "In", Values: []string{"a", "b"}}}}}}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1)
	if err != nil {
		t.Fatal(err)
	}
	// Stored as v1beta2: the create needs the webhook, which answers once its certificate is in the
	// CRD's caBundle.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := dyn.Resource(v1beta1.BGPPeerGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("creating a v1beta1 BGPPeer (conversion webhook): %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	var as2 v1beta2.BGPPeer
	get(t, dyn, v1beta2.BGPPeerGVR, "old", &as2)
	want2 := v1.Spec.ToV1beta2()
	if diff := cmp.Diff(want2, as2.Spec); diff != "" {
		t.Errorf("v1beta1 BGPPeer read as v1beta2 (-want +got):\n%s", diff)
	}
	if as2.Labels["team"] != "net" {
		t.Errorf("labels %v after conversion", as2.Labels)
	}
	var back v1beta1.BGPPeer
	get(t, dyn, v1beta1.BGPPeerGVR, "old", &back)
	if diff := cmp.Diff(v1.Spec, back.Spec); diff != "" {
		t.Errorf("v1beta1 BGPPeer read back as v1beta1 (-want +got):\n%s", diff)
	}

	// Created as v1beta2 with fields v1beta1 lacks: read as v1beta1 without them, as v1beta2 with.
	v2 := v1beta2.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: "metallb.io/v1beta2", Kind: "BGPPeer"},
		ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: ns},
		Spec:       v1beta2.BGPPeerSpec{MyASN: 64512, ASN: 64513, Address: "10.0.0.9", VRFName: "red", EnableGracefulRestart: true}}
	if u, err = runtime.DefaultUnstructuredConverter.ToUnstructured(&v2); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1beta2.BGPPeerGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var new1 v1beta1.BGPPeer
	get(t, dyn, v1beta1.BGPPeerGVR, "new", &new1)
	if new1.Spec.Address != "10.0.0.9" || new1.Spec.Port != 179 {
		t.Errorf("v1beta2 BGPPeer read as v1beta1: %+v", new1.Spec)
	}
	var new2 v1beta2.BGPPeer
	get(t, dyn, v1beta2.BGPPeerGVR, "new", &new2)
	if new2.Spec.VRFName != "red" || !new2.Spec.EnableGracefulRestart {
		t.Errorf("v1beta2 BGPPeer lost its v1beta2 fields: %+v", new2.Spec)
	}
	// A list converts every item.
	l, err := dyn.Resource(v1beta1.BGPPeerGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 2 {
		t.Fatalf("listing v1beta1 BGPPeers: %v (%d)", err, len(l.Items))
	}
	// Let the controller finish starting (stopped while loading, it reports the cancellation).
	h.waitJSONPath("configurationstate", "controller", "{.metadata.name}", "controller")
}

func get(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, name string, into any) {
	t.Helper()
	u, err := dyn.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading %s %s: %v", gvr.Version, name, err)
	}
	if u.GetAPIVersion() != gvr.GroupVersion().String() {
		t.Errorf("read as %s, got apiVersion %s", gvr.Version, u.GetAPIVersion())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatal(err)
	}
}
