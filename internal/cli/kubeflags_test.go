package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ironlb/ironlb/internal/testbed/testenv"
)

// TestKubectlFlags checks that status and trace find the cluster as kubectl does: --kubeconfig,
// else $KUBECONFIG; its current context unless --context names another; --server overriding the
// context's. The kubeconfig has two contexts: "lab" (a real apiserver) and "down" (nothing listens),
// the current one; a command that reached "down" fails naming its address.
func TestKubectlFlags(t *testing.T) {
	env := testenv.Start(t)
	crds, _ := filepath.Glob("../../config/crd/bases/*.yaml")
	for _, f := range crds {
		if out, err := env.Kubectl("apply", "--server-side", "-f", f); err != nil {
			t.Fatalf("installing %s: %v\n%s", f, err, out)
		}
	}
	if out, err := env.Kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	lab := kc.Contexts[kc.CurrentContext]
	kc.Contexts = map[string]*clientcmdapi.Context{
		"lab":  lab,
		"down": {Cluster: "down", AuthInfo: lab.AuthInfo},
	}
	const down = "127.0.0.1:1"
	kc.Clusters["down"] = &clientcmdapi.Cluster{Server: "https://" + down, InsecureSkipTLSVerify: true}
	kc.CurrentContext = "down"
	path := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}

	trace := []string{"trace", "--from", "10.10.1.5", "--to", "10.96.0.10:53", "--proto", "udp"}
	tests := []struct {
		name       string
		env        string // $KUBECONFIG
		args       []string
		reachesLab bool
	}{
		{"status: current context", "", []string{"status", "--kubeconfig", path}, false},
		{"status: --context", "", []string{"status", "--kubeconfig", path, "--context", "lab"}, true},
		{"status: $KUBECONFIG", path, []string{"status", "--context=lab"}, true},
		{"status: --server overrides the context's", "", []string{"status", "--kubeconfig", path, "--context", "lab", "--server", "https://" + down}, false},
		{"trace: current context", "", append(trace, "--kubeconfig", path), false},
		{"trace: --context", "", append(trace, "--kubeconfig", path, "--context", "lab"), true},
		{"trace: $KUBECONFIG", path, append(trace, "--context", "lab"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			root := newRoot("ironlb")
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append(tt.args, "--request-timeout=5s"))
			err := root.Execute()
			reachedDown := err != nil && strings.Contains(err.Error(), down)
			if tt.reachesLab {
				// trace may still fail (an empty cluster has no node owning --from), never on the connection.
				if reachedDown || err != nil && tt.args[0] == "status" {
					t.Errorf("%v: %v\n%s", tt.args, err, out.String())
				}
			} else if !reachedDown {
				t.Errorf("%v: err = %v, want a failure to reach %s", tt.args, err, down)
			}
		})
	}

	// Unknown context: the error names it.
	root := newRoot("ironlb")
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"status", "--kubeconfig", path, "--context", "nosuch"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("--context nosuch: %v", err)
	}
}

// TestKubectlFlagsHelp checks that status and trace offer kubectl's connection flags, and status its
// own --namespace (the configuration namespace, metallb-system by default, not the context's).
func TestKubectlFlagsHelp(t *testing.T) {
	for _, cmd := range []string{"status", "trace"} {
		root := newRoot("ironlb")
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs([]string{cmd, "--help"})
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"--kubeconfig string", "--context string", "--cluster string", "--user string",
			"-s, --server string", "--token string", "--as string", "--insecure-skip-tls-verify", "--request-timeout string"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s --help lacks %q", cmd, want)
			}
		}
		if ns := strings.Contains(out.String(), "--namespace"); ns != (cmd == "status") {
			t.Errorf("%s --help: --namespace offered: %v", cmd, ns)
		}
	}
}
