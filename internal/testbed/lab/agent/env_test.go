package agent

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mapLookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func noLookup(string) (string, bool) { return "", false }

func TestExpand(t *testing.T) {
	vars := map[string]string{
		"FOO":   "foo",
		"BAR":   "bar",
		"EMPTY": "",
		"REF":   "$(FOO)", // values are not expanded again
		"A":     "a",
		"B":     "b",
		"":      "empty-name",
	}
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"plain text", "hello world", "hello world"},
		{"defined", "$(FOO)", "foo"},
		{"defined in text", "x-$(FOO)-y", "x-foo-y"},
		{"two references", "$(FOO)$(BAR)", "foobar"},
		{"defined as empty", "[$(EMPTY)]", "[]"},
		{"undefined stays", "$(NOPE)", "$(NOPE)"},
		{"undefined in text", "a $(NOPE) b $(FOO)", "a $(NOPE) b foo"},
		{"value not expanded again", "$(REF)", "$(FOO)"},
		{"escaped dollar", "$$", "$"},
		{"escaped reference stays literal", "$$(FOO)", "$(FOO)"},
		{"escaped then reference", "$$$(FOO)", "$foo"},
		{"two escapes", "$$$$", "$$"},
		{"three dollars", "$$$", "$$"},
		{"unterminated", "$(FOO", "$(FOO"},
		{"unterminated after text", "x $(FOO", "x $(FOO"},
		{"unterminated keeps later text", "$(FOO $$ bar", "$(FOO $$ bar"},
		{"trailing dollar", "cost: 5$", "cost: 5$"},
		{"lone dollar", "$", "$"},
		{"dollar before other byte", "$FOO $1 $-", "$FOO $1 $-"},
		{"shell syntax is not ours", "${FOO}", "${FOO}"},
		{"nested-looking undefined", "$(A$(B))", "$(A$(B))"},
		{"nested-looking name ends at first paren", "$(A$(B)", "$(A$(B)"},
		{"empty name", "$()", "empty-name"},
		{"reference then paren", "$(FOO))", "foo)"},
		{"multibyte", "ü$(FOO)ß", "üfooß"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Expand(tt.in, mapLookup(vars)); got != tt.want {
				t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestExpandUndefinedEmptyName(t *testing.T) {
	if got := Expand("$()", noLookup); got != "$()" {
		t.Errorf(`Expand("$()") = %q, want "$()"`, got)
	}
}

func TestEnv(t *testing.T) {
	var e Env
	if got := e.List(); len(got) != 0 {
		t.Errorf("zero Env List() = %q, want empty", got)
	}
	if v, ok := e.Lookup("X"); ok || v != "" {
		t.Errorf("zero Env Lookup(X) = %q, %v", v, ok)
	}
	e.Set("B", "1")
	e.Set("A", "2")
	e.Set("C", "3")
	e.Set("B", "4") // redefinition keeps B's place, takes the new value
	e.Set("EMPTY", "")
	if d := cmp.Diff([]string{"B=4", "A=2", "C=3", "EMPTY="}, e.List(), cmpOpts); d != "" {
		t.Errorf("List() mismatch (-want +got):\n%s", d)
	}
	for _, tt := range []struct {
		name, want string
		ok         bool
	}{{"B", "4", true}, {"A", "2", true}, {"EMPTY", "", true}, {"D", "", false}} {
		if v, ok := e.Lookup(tt.name); v != tt.want || ok != tt.ok {
			t.Errorf("Lookup(%q) = %q, %v, want %q, %v", tt.name, v, ok, tt.want, tt.ok)
		}
	}
}

// TestEnvDependentVariables follows kubelet: each env value is expanded against the variables defined
// before it, in order.
func TestEnvDependentVariables(t *testing.T) {
	var e Env
	for _, kv := range [][2]string{
		{"HOST", "10.200.1.10"},
		{"URL", "http://$(HOST):$(PORT)/"}, // PORT is not defined yet
		{"PORT", "80"},
		{"URL2", "http://$(HOST):$(PORT)/"},
		{"HOST", "override-$(HOST)"},
	} {
		e.Set(kv[0], Expand(kv[1], e.Lookup))
	}
	want := []string{"HOST=override-10.200.1.10", "URL=http://10.200.1.10:$(PORT)/", "PORT=80", "URL2=http://10.200.1.10:80/"}
	if d := cmp.Diff(want, e.List(), cmpOpts); d != "" {
		t.Errorf("List() mismatch (-want +got):\n%s", d)
	}
}

func TestServiceLinkEnv(t *testing.T) {
	ip := netip.MustParseAddr
	tests := []struct {
		name  string
		svc   string
		ip    netip.Addr
		ports []ServicePort
		want  []string
		bug   string
	}{
		{
			// The order and names are kubelet's (pkg/kubelet/envvars FromServices + makeLinkVariables).
			name: "two ports", svc: "my-svc", ip: ip("10.200.1.10"),
			ports: []ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "dns", Port: 53, Protocol: "UDP"}},
			want: []string{
				"MY_SVC_SERVICE_HOST=10.200.1.10",
				"MY_SVC_SERVICE_PORT=80",
				"MY_SVC_SERVICE_PORT_HTTP=80",
				"MY_SVC_SERVICE_PORT_DNS=53",
				"MY_SVC_PORT=tcp://10.200.1.10:80",
				"MY_SVC_PORT_80_TCP=tcp://10.200.1.10:80",
				"MY_SVC_PORT_80_TCP_PROTO=tcp",
				"MY_SVC_PORT_80_TCP_PORT=80",
				"MY_SVC_PORT_80_TCP_ADDR=10.200.1.10",
				"MY_SVC_PORT_53_UDP=udp://10.200.1.10:53",
				"MY_SVC_PORT_53_UDP_PROTO=udp",
				"MY_SVC_PORT_53_UDP_PORT=53",
				"MY_SVC_PORT_53_UDP_ADDR=10.200.1.10",
			},
		},
		{
			name: "kubernetes", svc: "kubernetes", ip: ip("10.200.1.1"),
			ports: []ServicePort{{Name: "https", Port: 443, Protocol: "TCP"}},
			want: []string{
				"KUBERNETES_SERVICE_HOST=10.200.1.1",
				"KUBERNETES_SERVICE_PORT=443",
				"KUBERNETES_SERVICE_PORT_HTTPS=443",
				"KUBERNETES_PORT=tcp://10.200.1.1:443",
				"KUBERNETES_PORT_443_TCP=tcp://10.200.1.1:443",
				"KUBERNETES_PORT_443_TCP_PROTO=tcp",
				"KUBERNETES_PORT_443_TCP_PORT=443",
				"KUBERNETES_PORT_443_TCP_ADDR=10.200.1.1",
			},
		},
		{
			name: "unnamed port and dashed port name", svc: "web-pods-svc", ip: ip("10.200.1.55"),
			ports: []ServicePort{{Port: 8080, Protocol: "TCP"}, {Name: "metrics-port", Port: 9090, Protocol: "SCTP"}},
			want: []string{
				"WEB_PODS_SVC_SERVICE_HOST=10.200.1.55",
				"WEB_PODS_SVC_SERVICE_PORT=8080",
				"WEB_PODS_SVC_SERVICE_PORT_METRICS_PORT=9090",
				"WEB_PODS_SVC_PORT=tcp://10.200.1.55:8080",
				"WEB_PODS_SVC_PORT_8080_TCP=tcp://10.200.1.55:8080",
				"WEB_PODS_SVC_PORT_8080_TCP_PROTO=tcp",
				"WEB_PODS_SVC_PORT_8080_TCP_PORT=8080",
				"WEB_PODS_SVC_PORT_8080_TCP_ADDR=10.200.1.55",
				"WEB_PODS_SVC_PORT_9090_SCTP=sctp://10.200.1.55:9090",
				"WEB_PODS_SVC_PORT_9090_SCTP_PROTO=sctp",
				"WEB_PODS_SVC_PORT_9090_SCTP_PORT=9090",
				"WEB_PODS_SVC_PORT_9090_SCTP_ADDR=10.200.1.55",
			},
		},
		{
			// kubelet uses net.JoinHostPort: IPv6 hosts are bracketed in the URLs only.
			name: "IPv6 cluster IP", svc: "v6", ip: ip("fd00:10:200:1::a"),
			ports: []ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}},
			want: []string{
				"V6_SERVICE_HOST=fd00:10:200:1::a",
				"V6_SERVICE_PORT=80",
				"V6_SERVICE_PORT_HTTP=80",
				"V6_PORT=tcp://[fd00:10:200:1::a]:80",
				"V6_PORT_80_TCP=tcp://[fd00:10:200:1::a]:80",
				"V6_PORT_80_TCP_PROTO=tcp",
				"V6_PORT_80_TCP_PORT=80",
				"V6_PORT_80_TCP_ADDR=fd00:10:200:1::a",
			},
		},
		{name: "headless (no cluster IP)", svc: "headless", ports: []ServicePort{{Port: 80, Protocol: "TCP"}}},
		{name: "no ports", svc: "noports", ip: ip("10.200.1.9")},
		{
			// kubelet treats an empty protocol as TCP. The apiserver defaults Service port protocols, so this
			// only matters for callers that do not go through it.
			name: "empty protocol is TCP", svc: "p", ip: ip("10.200.1.2"),
			ports: []ServicePort{{Port: 80}},
			want: []string{
				"P_SERVICE_HOST=10.200.1.2",
				"P_SERVICE_PORT=80",
				"P_PORT=tcp://10.200.1.2:80",
				"P_PORT_80_TCP=tcp://10.200.1.2:80",
				"P_PORT_80_TCP_PROTO=tcp",
				"P_PORT_80_TCP_PORT=80",
				"P_PORT_80_TCP_ADDR=10.200.1.2",
			},
			bug: "env.go:94-100 (ServiceLinkEnv) does not default an empty Protocol to TCP as kubelet's makeLinkVariables does (latent: the apiserver always sets it)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, kv := range ServiceLinkEnv(tt.svc, tt.ip, tt.ports) {
				got = append(got, kv[0]+"="+kv[1])
			}
			if d := cmp.Diff(tt.want, got, cmpOpts); d != "" {
				if tt.bug != "" {
					t.Skipf("BUG: %s; mismatch (-want +got):\n%s", tt.bug, d)
				}
				t.Errorf("ServiceLinkEnv(%q) mismatch (-want +got):\n%s", tt.svc, d)
			}
		})
	}
}

func FuzzExpand(f *testing.F) {
	for _, s := range []string{"", "plain", "$(FOO)", "$$", "$$(FOO)", "$(FOO", "$", "$(A$(B))", "$()", "a$$$b", "$(x)$(yy)$$$(z", "\xff$(\x00)"} {
		f.Add(s)
	}
	// defined defines every name of even length; the value mentions the name and contains '$' and parens
	// to make sure values are never re-expanded or re-escaped.
	defined := func(name string) (string, bool) {
		if len(name)%2 == 1 {
			return "", false
		}
		return "<$(" + name + ")$$>", true
	}
	// same writes back what an undefined reference leaves, so it must not change anything.
	same := func(name string) (string, bool) { return "$(" + name + ")", true }
	f.Fuzz(func(t *testing.T, s string) {
		none := Expand(s, noLookup)
		_ = Expand(s, defined) // must not panic

		if got := Expand(s, same); got != none {
			t.Errorf("Expand(%q) with an identity lookup = %q, with nothing defined = %q", s, got, none)
		}
		if len(none) > len(s) {
			t.Errorf("Expand(%q) with nothing defined grew the input to %q", s, none)
		}
		if !strings.Contains(s, "$") {
			if none != s {
				t.Errorf("Expand(%q) = %q, want the input unchanged (no '$')", s, none)
			}
			if again := Expand(none, noLookup); again != none {
				t.Errorf("Expand not idempotent on %q: %q then %q", s, none, again)
			}
		}
		if !strings.Contains(s, "(") {
			// Without references only "$$" escapes act, left to right.
			if want := strings.ReplaceAll(s, "$$", "$"); none != want {
				t.Errorf("Expand(%q) = %q, want %q", s, none, want)
			}
		}
		// A reference to a defined name is replaced by its value, wherever it sits after plain text.
		if !strings.ContainsAny(s, "$()") {
			if got, want := Expand(s+"$(NAME)"+s, defined), s+"<$(NAME)$$>"+s; got != want {
				t.Errorf("Expand(%q) = %q, want %q", s+"$(NAME)"+s, got, want)
			}
		}
	})
}

func ExampleExpand() {
	env := map[string]string{"NODE_NAME": "myk8s-worker"}
	fmt.Println(Expand("--hostname-override=$(NODE_NAME) $(UNSET) $$(NODE_NAME)", mapLookup(env)))
	// Output: --hostname-override=myk8s-worker $(UNSET) $(NODE_NAME)
}
