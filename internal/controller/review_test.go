package controller

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// TestDecodeReview: what decodeReview answers for bodies that are not a review, or a review without
// a request (400, the message given), and what it returns for one that is.
func TestDecodeReview(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		limit      int64
		wantCode   int // 0: decoded
		wantMsg    string
	}{
		{name: "a review", body: `{"request":{"uid":"u1","operation":"CREATE"}}`, limit: 1 << 10},
		{name: "not JSON", body: `<xml/>`, limit: 1 << 10, wantCode: http.StatusBadRequest, wantMsg: "not an AdmissionReview"},
		{name: "no request", body: `{"response":{"uid":"u1"}}`, limit: 1 << 10, wantCode: http.StatusBadRequest, wantMsg: "not an AdmissionReview"},
		{name: "cut at the limit", body: `{"request":{"uid":"u1","operation":"CREATE"}}`, limit: 10, wantCode: http.StatusBadRequest, wantMsg: "not an AdmissionReview"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			got := decodeReview(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body)), tc.limit, "not an AdmissionReview",
				func(r *admissionv1.AdmissionReview) bool { return r.Request != nil })
			if tc.wantCode == 0 {
				if got == nil || got.Request.UID != "u1" || got.Request.Operation != admissionv1.Create {
					t.Fatalf("decoded %+v (answered %d %q)", got, rec.Code, rec.Body)
				}
				if rec.Body.Len() != 0 {
					t.Errorf("answered %q for a review it decoded", rec.Body)
				}
				return
			}
			if got != nil || rec.Code != tc.wantCode || strings.TrimSpace(rec.Body.String()) != tc.wantMsg {
				t.Errorf("decoded %+v, answered %d %q; want nil, %d %q", got, rec.Code, rec.Body, tc.wantCode, tc.wantMsg)
			}
		})
	}
}
