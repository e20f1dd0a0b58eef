package controller

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestServesServiceCIDRs: the ServiceCIDR informer is started only when discovery lists the
// resource; a group the apiserver does not know is a plain no, any other failure is reported.
func TestServesServiceCIDRs(t *testing.T) {
	boom := errors.New("connection refused")
	for _, tt := range []struct {
		name    string
		list    *metav1.APIResourceList
		err     error
		want    bool
		wantErr error
	}{
		{name: "served", list: &metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "ingresses"}, {Name: "servicecidrs"}}}, want: true},
		{name: "group without it (Kubernetes before 1.33)", list: &metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "ingresses"}}}},
		{name: "group not served", err: apierrors.NewNotFound(schema.GroupResource{Group: "networking.k8s.io"}, "v1")},
		{name: "discovery failed", err: boom, wantErr: boom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var asked string
			got, err := servesServiceCIDRs(func(gv string) (*metav1.APIResourceList, error) { asked = gv; return tt.list, tt.err })
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("servesServiceCIDRs = %v, %v; want %v, %v", got, err, tt.want, tt.wantErr)
			}
			if asked != "networking.k8s.io/v1" {
				t.Errorf("asked about %q, want networking.k8s.io/v1", asked)
			}
		})
	}
}
