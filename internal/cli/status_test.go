package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestPluginName checks that the binary installed as kubectl-ironlb is the kubectl plugin (`kubectl
// ironlb status` runs `kubectl-ironlb status`) offering status only, and that ironlb offers status
// beside its roles.
func TestPluginName(t *testing.T) {
	tests := []struct {
		argv0      string
		use        string
		want, lack []string
	}{
		{"/usr/local/bin/kubectl-ironlb", "kubectl ironlb", []string{"status"}, []string{"lab", "controller", "speaker", "proxy"}},
		{`C:\bin\kubectl-ironlb.exe`, "kubectl ironlb", []string{"status"}, []string{"lab"}},
		{"bin/ironlb", "ironlb", []string{"status", "lab", "controller", "speaker", "proxy"}, nil},
		{"kubectl-ironlb-old", "ironlb", []string{"status", "lab"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.argv0, func(t *testing.T) {
			root := newRoot(tt.argv0)
			if root.DisplayName() != tt.use {
				t.Errorf("DisplayName() = %q, want %q", root.DisplayName(), tt.use)
			}
			has := map[string]bool{}
			for _, c := range root.Commands() {
				has[c.Name()] = true
			}
			for _, c := range tt.want {
				if !has[c] {
					t.Errorf("no %q command", c)
				}
			}
			for _, c := range tt.lack {
				if has[c] {
					t.Errorf("%q command offered", c)
				}
			}
		})
	}

	// `kubectl ironlb status --help` shows the plugin's usage and the status flags.
	root := newRoot("kubectl-ironlb")
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"status", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kubectl ironlb status [flags]", "--kubeconfig", "-n, --namespace", "-o, --output"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
	// An unknown output format fails before any API call.
	root = newRoot("kubectl-ironlb")
	root.SetArgs([]string{"status", "-o", "xml", "--kubeconfig", "/nonexistent"})
	root.SetOut(&out)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `unknown output format "xml"`) {
		t.Errorf("status -o xml: %v", err)
	}
}

// TestVersion checks that `ironlb version` and `ironlb --version` print the same line, for ironlb and
// for the kubectl plugin.
func TestVersion(t *testing.T) {
	for _, argv0 := range []string{"bin/ironlb", "/usr/local/bin/kubectl-ironlb"} {
		var outs []string
		for _, args := range [][]string{{"version"}, {"--version"}} {
			var out bytes.Buffer
			root := newRoot(argv0)
			root.SetArgs(args)
			root.SetOut(&out)
			if err := root.Execute(); err != nil {
				t.Fatalf("%s %v: %v", argv0, args, err)
			}
			outs = append(outs, out.String())
		}
		if !strings.HasPrefix(outs[0], "ironlb ") || !strings.Contains(outs[0], "(commit ") {
			t.Errorf("%s version: %q", argv0, outs[0])
		}
		if outs[0] != outs[1] {
			t.Errorf("%s: version printed %q, --version %q", argv0, outs[0], outs[1])
		}
	}
}
