package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Authorizer lets through only the HTTP requests the apiserver allows: the bearer token must pass
// a TokenReview, and its user a SubjectAccessReview for `get` on the request's path as a
// non-resource URL (as kube-rbac-proxy and controller-runtime's metrics filter do). Grant it with
// a ClusterRole rule `nonResourceURLs: ["/metrics"], verbs: ["get"]`. Decisions are cached for
// cacheTTL per token and path, so a scrape every few seconds costs two API calls a minute.
type Authorizer struct {
	cs  kubernetes.Interface
	now func() time.Time

	mu    sync.Mutex // guards the following fields
	cache map[[sha256.Size]byte]decision
}

type decision struct {
	status  int // http.StatusOK, StatusUnauthorized or StatusForbidden
	expires time.Time
}

const (
	cacheTTL     = time.Minute
	cacheMaxSize = 1024
)

// NewAuthorizer returns an Authorizer asking cs's apiserver.
func NewAuthorizer(cs kubernetes.Interface) *Authorizer {
	return &Authorizer{cs: cs, now: time.Now, cache: map[[sha256.Size]byte]decision{}}
}

// Wrap returns next behind the authorizer: 401 without a valid token, 403 when its user may not
// get the path, 500 when the apiserver cannot be asked (not cached).
func (a *Authorizer) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		status, err := a.decide(r.Context(), token, r.URL.Path)
		switch {
		case err != nil:
			http.Error(w, "authorization: "+err.Error(), http.StatusInternalServerError)
		case status == http.StatusOK:
			next.ServeHTTP(w, r)
		default:
			http.Error(w, http.StatusText(status), status)
		}
	})
}

// decide asks (or remembers) whether token's user may get path.
func (a *Authorizer) decide(ctx context.Context, token, path string) (int, error) {
	key := sha256.Sum256([]byte(path + "\x00" + token))
	now := a.now()
	a.mu.Lock()
	d, ok := a.cache[key]
	a.mu.Unlock()
	if ok && now.Before(d.expires) {
		return d.status, nil
	}
	status, err := a.review(ctx, token, path)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= cacheMaxSize {
		for k, d := range a.cache {
			if !now.Before(d.expires) || len(a.cache) >= cacheMaxSize {
				delete(a.cache, k)
			}
		}
	}
	a.cache[key] = decision{status: status, expires: now.Add(cacheTTL)}
	return status, nil
}

func (a *Authorizer) review(ctx context.Context, token, path string) (int, error) {
	tr, err := a.cs.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, nil
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"}}}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}

// selfSignedTLS makes a TLS configuration with a certificate made now for this process, valid for
// ten years. Scrapers do not verify it (the PodMonitors set insecureSkipVerify, as for the
// kubelet's and kube-rbac-proxy's own certificates): the bearer token authenticates the client,
// and the connection is encrypted.
func selfSignedTLS(name string) (*tls.Config, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	now := time.Now()
	t := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, t, t, &k.PublicKey, k)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, errors.Join(errors.New("self-signed certificate"), err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: k, Leaf: leaf}}}, nil
}
