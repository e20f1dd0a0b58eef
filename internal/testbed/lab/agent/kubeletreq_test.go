package agent

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

func TestParseKubeletRequest(t *testing.T) {
	since := time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name, method, path, query string
		want                      kubeletRequest
		err                       error
	}{
		{name: "healthz", method: "GET", path: "/healthz", want: kubeletRequest{Endpoint: epHealthz}},
		{name: "pods", method: "GET", path: "/pods/", want: kubeletRequest{Endpoint: epPods}},
		{name: "pods by POST", method: "POST", path: "/pods", err: errNotFound},
		{name: "unknown path", method: "GET", path: "/stats/summary", err: errNotFound},
		{name: "root", method: "GET", path: "/", err: errNotFound},
		{name: "empty segment", method: "GET", path: "/containerLogs/default//c", err: errNotFound},
		{name: "logs", method: "GET", path: "/containerLogs/default/web/nginx",
			want: kubeletRequest{Endpoint: epLogs, Namespace: "default", Pod: "web", Container: "nginx"}},
		{name: "logs with every option", method: "GET", path: "/containerLogs/ns/p/c",
			query: "follow=true&previous=1&timestamps=true&tailLines=10&limitBytes=500&sinceTime=2026-11-26T18:00:00Z",
			want: kubeletRequest{Endpoint: epLogs, Namespace: "ns", Pod: "p", Container: "c", Log: logOptions{
				Follow: true, Previous: true, Timestamps: true, TailLines: ptr.To[int64](10), LimitBytes: ptr.To[int64](500), Since: since}}},
		{name: "logs sinceSeconds and stream", method: "GET", path: "/containerLogs/ns/p/c", query: "sinceSeconds=30&stream=Stderr",
			want: kubeletRequest{Endpoint: epLogs, Namespace: "ns", Pod: "p", Container: "c", Log: logOptions{SinceSecs: 30, Stream: "Stderr"}}},
		{name: "logs tailLines=0", method: "GET", path: "/containerLogs/ns/p/c", query: "tailLines=0",
			want: kubeletRequest{Endpoint: epLogs, Namespace: "ns", Pod: "p", Container: "c", Log: logOptions{TailLines: ptr.To[int64](0)}}},
		{name: "logs negative tail", method: "GET", path: "/containerLogs/ns/p/c", query: "tailLines=-1", err: errBadRequest},
		{name: "logs zero limit", method: "GET", path: "/containerLogs/ns/p/c", query: "limitBytes=0", err: errBadRequest},
		{name: "logs bad bool", method: "GET", path: "/containerLogs/ns/p/c", query: "follow=yes", err: errBadRequest},
		{name: "logs bad sinceTime", method: "GET", path: "/containerLogs/ns/p/c", query: "sinceTime=yesterday", err: errBadRequest},
		{name: "logs both sinces", method: "GET", path: "/containerLogs/ns/p/c", query: "sinceSeconds=5&sinceTime=2026-11-26T18:00:00Z", err: errBadRequest},
		{name: "logs bad stream", method: "GET", path: "/containerLogs/ns/p/c", query: "stream=stdin", err: errBadRequest},
		{name: "logs tail with one stream", method: "GET", path: "/containerLogs/ns/p/c", query: "stream=Stdout&tailLines=3", err: errBadRequest},
		{name: "logs without container", method: "GET", path: "/containerLogs/ns/p", err: errNotFound},
		{name: "exec", method: "POST", path: "/exec/default/web/nginx", query: "command=sh&command=-c&command=exit+3&stdout=1",
			want: kubeletRequest{Endpoint: epExec, Namespace: "default", Pod: "web", Container: "nginx", Command: []string{"sh", "-c", "exit 3"}}},
		{name: "exec with uid", method: "GET", path: "/exec/default/web/0f1e/nginx", query: "command=ls",
			want: kubeletRequest{Endpoint: epExec, Namespace: "default", Pod: "web", UID: "0f1e", Container: "nginx", Command: []string{"ls"}}},
		{name: "exec without command", method: "POST", path: "/exec/default/web/nginx", err: errBadRequest},
		{name: "exec by PUT", method: "PUT", path: "/exec/default/web/nginx", query: "command=ls", err: errNotFound},
		{name: "portForward", method: "POST", path: "/portForward/default/web",
			want: kubeletRequest{Endpoint: epPortForward, Namespace: "default", Pod: "web"}},
		{name: "portForward with uid", method: "GET", path: "/portForward/default/web/0f1e",
			want: kubeletRequest{Endpoint: epPortForward, Namespace: "default", Pod: "web", UID: "0f1e"}},
		{name: "attach", method: "POST", path: "/attach/default/web/nginx", err: errNotSupported},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseKubeletRequest(tt.method, tt.path, q)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if tt.err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestAuthorizeClient(t *testing.T) {
	chain := func(cn string, orgs ...string) [][]*x509.Certificate {
		return [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn, Organization: orgs}}}}
	}
	for _, tt := range []struct {
		name     string
		verified [][]*x509.Certificate
		want     clientDecision
	}{
		{"no certificate (or one the lab CA did not sign)", nil, clientUnauthenticated},
		{"empty chain", [][]*x509.Certificate{{}}, clientUnauthenticated},
		{"the apiserver's kubelet client", chain("kube-apiserver-kubelet-client"), clientAllowed},
		{"system:masters", chain("kubernetes-admin", "system:masters"), clientAllowed},
		{"a node", chain("system:node:myk8s-worker", "system:nodes"), clientForbidden},
		{"a user", chain("jane", "developers"), clientForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, got := authorizeClient(tt.verified, "kube-apiserver-kubelet-client"); got != tt.want {
				t.Errorf("decision = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIsNSInit(t *testing.T) {
	for _, tt := range []struct {
		cmdline string
		want    bool
	}{
		{"/usr/local/bin/ironlb\x00lab\x00nsinit\x00", true},
		{"/tmp/agent.test\x00lab\x00nsinit\x00", true},
		{"sleep\x00600\x00", false},
		{"/usr/local/bin/ironlb\x00speaker\x00", false},
		{"/usr/local/bin/ironlb\x00lab\x00nsinit\x00extra\x00", false},
		{"", false},
	} {
		if got := isNSInit([]byte(tt.cmdline)); got != tt.want {
			t.Errorf("isNSInit(%q) = %v, want %v", tt.cmdline, got, tt.want)
		}
	}
}

// TestExecArgv: exec maps a command the container's image has to its local program, as the container's
// own command is; other commands run as given, from the host's file system.
func TestExecArgv(t *testing.T) {
	p := Programs{Self: "/usr/local/bin/ironlb", K8sBin: "/k8s/bin"}
	for _, tt := range []struct {
		name, image string
		argv, want  []string
	}{
		{"the image's program by name", "docker.io/traefik/whoami:v1.10", []string{"whoami", "--port", "80"},
			[]string{"/usr/local/bin/ironlb", "whoami", "--port", "80"}},
		{"the image's program by path", "registry.k8s.io/kube-proxy:v1.37.2", []string{"/usr/local/bin/kube-proxy", "--version"},
			[]string{"/k8s/bin/kube-proxy", "--version"}},
		{"a host tool", "docker.io/traefik/whoami:v1.10", []string{"sh", "-c", "exit 3"}, []string{"sh", "-c", "exit 3"}},
		{"an image the lab does not know", "example.com/unknown:1", []string{"cat", "/etc/hostname"}, []string{"cat", "/etc/hostname"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, execArgv(p, tt.image, tt.argv)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestPreviousRun(t *testing.T) {
	for _, tt := range []struct {
		name       string
		latest     int
		backingOff bool
		want       int
		ok         bool
	}{
		{"first run, running", 0, false, 0, false},
		{"restarted once, running", 1, false, 0, true},
		{"restarted three times, running", 3, false, 2, true},
		{"first run crashed, backing off", 0, true, 0, true},
		{"third run crashed, backing off", 2, true, 2, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := previousRun(tt.latest, tt.backingOff); got != tt.want || ok != tt.ok {
				t.Errorf("previousRun(%d, %v) = %d, %v; want %d, %v", tt.latest, tt.backingOff, got, ok, tt.want, tt.ok)
			}
		})
	}
}
