// Package rbac_test checks the least privilege of ironlb's ServiceAccounts: it applies the RBAC
// manifests of config/controller, config/speaker and config/proxy to a real kube-apiserver
// (internal/testbed/testenv) and asks the apiserver, by SubjectAccessReview, what each ServiceAccount may do
// over a matrix of verbs, resources and namespaces. The answer must equal testdata/rbac.golden
// (refreshed with -update after a deliberate change), and a few must-nots are asserted on their own
// so that regenerating the golden file cannot quietly accept them.
package rbac_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/rbac.golden")

const configNS = "metallb-system"

// webhookNS holds the webhook's certificate Secret, out of the speakers' reach.
const webhookNS = configNS + "-webhook"

var accounts = []string{"ironlb-controller", "ironlb-speaker", "ironlb-proxy"}

var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// resource is one row of the matrix; a resource of a cluster-scoped kind has clusterScoped set.
type resource struct {
	group, resource, sub string
	clusterScoped        bool
	name                 string // a resourceName the manifests grant by name, "" for any
	namespaces           []string
}

func (r resource) String() string {
	s := r.resource
	if r.group != "" {
		s += "." + r.group
	}
	if r.sub != "" {
		s += "/" + r.sub
	}
	if r.name != "" {
		s += " name=" + r.name
	}
	return s
}

// The namespaces asked about: the configuration namespace, a user's, kube-system, and "" (every
// namespace at once: what a ClusterRole grants).
var namespaces = []string{configNS, webhookNS, "default", "kube-system", ""}

func matrix() []resource {
	ns := func(group, res, sub string) resource {
		return resource{group: group, resource: res, sub: sub, namespaces: namespaces}
	}
	cl := func(group, res string) resource {
		return resource{group: group, resource: res, clusterScoped: true, namespaces: []string{""}}
	}
	named := func(r resource, name string, nss ...string) resource {
		r.name = name
		if nss != nil {
			r.namespaces = nss
		}
		return r
	}
	rs := []resource{
		ns("", "services", ""), ns("", "services", "status"), ns("", "endpoints", ""), ns("", "pods", ""),
		ns("", "secrets", ""), ns("", "configmaps", ""), ns("", "events", ""), ns("", "serviceaccounts", "token"),
		ns("events.k8s.io", "events", ""), ns("discovery.k8s.io", "endpointslices", ""), ns("coordination.k8s.io", "leases", ""),
		cl("", "nodes"), {resource: "nodes", sub: "status", clusterScoped: true, namespaces: []string{""}}, cl("", "namespaces"), cl("networking.k8s.io", "servicecidrs"),
		cl("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
		cl("apiextensions.k8s.io", "customresourcedefinitions"),
		cl("authentication.k8s.io", "tokenreviews"), cl("authorization.k8s.io", "subjectaccessreviews"),
		ns("rbac.authorization.k8s.io", "roles", ""), ns("rbac.authorization.k8s.io", "rolebindings", ""),
		cl("rbac.authorization.k8s.io", "clusterroles"), cl("rbac.authorization.k8s.io", "clusterrolebindings"),
		named(ns("", "secrets", ""), "ironlb-webhook-cert", webhookNS),
		named(ns("", "secrets", ""), "ironlb-heartbeat-key", configNS),
		named(ns("coordination.k8s.io", "leases", ""), "ironlb-controller", configNS),
		named(ns("metallb.io", "configurationstates", ""), "controller", configNS),
		named(ns("", "configmaps", ""), "kube-proxy", "kube-system"),
		named(cl("admissionregistration.k8s.io", "validatingwebhookconfigurations"), "ironlb-validating-webhook"),
		named(cl("apiextensions.k8s.io", "customresourcedefinitions"), "bgppeers.metallb.io"),
	}
	for _, r := range []string{"ipaddresspools", "l2advertisements", "bgpadvertisements", "bgppeers", "communities", "bfdprofiles",
		"configurationstates", "servicel2statuses", "servicebgpstatuses"} {
		rs = append(rs, ns("metallb.io", r, ""))
	}
	for _, r := range []string{"ipaddresspools", "configurationstates", "servicel2statuses", "servicebgpstatuses"} {
		rs = append(rs, ns("metallb.io", r, "status"))
	}
	rs = append(rs, ns("frrk8s.metallb.io", "bgpsessionstates", ""), ns("frrk8s.metallb.io", "bgpsessionstates", "status"))
	return rs
}

// grant is one allowed access: account, verb, resource, namespace.
type grant struct {
	account, verb string
	res           resource
	ns            string
}

func TestLeastPrivilege(t *testing.T) {
	env := testenv.Start(t)
	for _, f := range []string{"../../config/controller/00-namespace.yaml", "../../config/controller/01-webhook-namespace.yaml", "../../config/controller/10-rbac.yaml",
		"../../config/speaker/10-rbac.yaml", "../../config/proxy/10-rbac.yaml"} {
		if out, err := env.Kubectl("apply", "-f", f); err != nil {
			t.Fatalf("applying %s: %v\n%s", f, err, out)
		}
	}
	cs := kubernetes.NewForConfigOrDie(env.Config)
	grants := allowed(t, cs)

	// The golden table: per account, resource and namespace, the verbs allowed.
	type cell struct{ account, res, ns string }
	cells := map[cell][]string{}
	for _, g := range grants {
		ns := g.ns
		if ns == "" {
			ns = "*"
		}
		c := cell{g.account, g.res.String(), ns}
		cells[c] = append(cells[c], g.verb)
	}
	var lines []string
	for c, vs := range cells {
		lines = append(lines, fmt.Sprintf("%-18s %-52s %-15s %s", c.account, c.res, c.ns, strings.Join(vs, ",")))
	}
	slices.Sort(lines)
	got := "# account, resource, namespace (* = all, or cluster-scoped), verbs allowed; generated by go test -update\n" +
		strings.Join(lines, "\n") + "\n"
	const golden = "testdata/rbac.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("what the ServiceAccounts may do changed (-golden +now); if on purpose, run go test -update:\n%s", diff)
	}

	// Must-nots, whatever the golden file says.
	for _, g := range grants {
		r := g.res
		write := !slices.Contains([]string{"get", "list", "watch"}, g.verb)
		switch {
		case g.account == "ironlb-speaker" && r.resource == "secrets" && g.ns != configNS:
			t.Errorf("the speaker may %s Secrets in %q: only the configuration namespace's, where BGP passwords live", g.verb, g.ns)
		case g.account == "ironlb-speaker" && write && (r.resource == "services" || r.resource == "ipaddresspools"):
			t.Errorf("the speaker may %s %s in %q", g.verb, r, g.ns)
		case g.account != "ironlb-controller" && r.resource == "secrets" && write:
			t.Errorf("%s may %s Secrets (%s) in %q: a speaker that could write the heartbeat key could lock the others out", g.account, g.verb, r, g.ns)
		case g.account == "ironlb-proxy" && r.resource == "secrets":
			t.Errorf("the proxy may %s Secrets in %q", g.verb, g.ns)
		case g.account != "ironlb-controller" && r.resource == "services" && r.sub == "status" && write:
			t.Errorf("%s may %s Service status in %q: only the controller writes it", g.account, g.verb, g.ns)
		case r.group == "rbac.authorization.k8s.io" && write,
			r.resource == "customresourcedefinitions" && write && !conversionCABundle(g),
			r.resource == "serviceaccounts" && r.sub == "token":
			t.Errorf("%s may %s %s: a way to more privilege", g.account, g.verb, r)
		case r.resource == "secrets" && r.name == "" && (g.verb == "get" || g.verb == "list" || g.verb == "watch") && g.account != "ironlb-speaker":
			t.Errorf("%s may %s every Secret in %q", g.account, g.verb, g.ns)
		case r.resource == "secrets" && (g.ns == webhookNS || g.ns == "") && g.account != "ironlb-controller":
			t.Errorf("%s may %s %s in %q: the webhook's certificate and keys are the controller's alone", g.account, g.verb, r, g.ns)
		}
	}
}

// allowed asks the apiserver about every account × verb × resource × namespace and returns the
// accesses granted.
func allowed(t *testing.T, cs kubernetes.Interface) []grant {
	type q struct {
		account, verb string
		res           resource
		ns            string
	}
	var qs []q
	for _, a := range accounts {
		for _, r := range matrix() {
			for _, ns := range r.namespaces {
				for _, v := range verbs {
					qs = append(qs, q{a, v, r, ns})
				}
			}
		}
	}
	var (
		mu     sync.Mutex
		grants []grant
		wg     sync.WaitGroup
	)
	work := make(chan q)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range work {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:" + configNS + ":" + x.account,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + configNS, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: x.ns, Verb: x.verb,
						Group: x.res.group, Resource: x.res.resource, Subresource: x.res.sub, Name: x.res.name},
				}}
				out, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
				if err != nil {
					t.Errorf("SubjectAccessReview %+v: %v", x, err)
					continue
				}
				if out.Status.Allowed {
					mu.Lock()
					grants = append(grants, grant{x.account, x.verb, x.res, x.ns})
					mu.Unlock()
				}
			}
		}()
	}
	for _, x := range qs {
		work <- x
	}
	close(work)
	wg.Wait()
	// Verbs in the matrix's order, so the golden lines are stable.
	slices.SortStableFunc(grants, func(a, b grant) int { return slices.Index(verbs, a.verb) - slices.Index(verbs, b.verb) })
	return grants
}

// conversionCABundle says whether g is the one CRD write allowed: the controller patching the
// caBundle of BGPPeer's conversion webhook, which it serves (internal/controller/certs.go).
func conversionCABundle(g grant) bool {
	return g.account == "ironlb-controller" && g.res.name == "bgppeers.metallb.io" && g.verb == "patch"
}
