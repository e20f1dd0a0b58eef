package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestMetricsBindAddress checks that every role serving metrics names the address
// --metrics-bind-address (kube-proxy's name), and that the controller's and the speaker's old
// --metrics-addr still sets it, with a deprecation warning and hidden from the help.
func TestMetricsBindAddress(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cmd   func() *cobra.Command
		def   string
		alias bool
	}{
		{"controller", controllerCmd, ":7472", true},
		{"speaker", speakerCmd, ":7473", true},
		{"proxy", proxyCmd, "127.0.0.1:10249", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := tt.cmd()
			f := cmd.Flags().Lookup("metrics-bind-address")
			if f == nil {
				t.Fatal("no --metrics-bind-address")
			}
			if f.DefValue != tt.def {
				t.Errorf("default %q, want %q", f.DefValue, tt.def)
			}
			for _, args := range [][]string{{"--metrics-bind-address=127.0.0.1:9"}, {"--metrics-addr=127.0.0.1:9"}} {
				cmd := tt.cmd()
				var stderr bytes.Buffer
				cmd.Flags().SetOutput(&stderr)
				if err := cmd.ParseFlags(args); err != nil {
					t.Fatalf("%v: %v", args, err)
				}
				if got := cmd.Flags().Lookup("metrics-bind-address").Value.String(); got != "127.0.0.1:9" {
					t.Errorf("%v: --metrics-bind-address = %q", args, got)
				}
				if deprecated := strings.Contains(stderr.String(), "--metrics-addr has been deprecated, use --metrics-bind-address"); deprecated != strings.HasPrefix(args[0], "--metrics-addr") {
					t.Errorf("%v: deprecation warning %q", args, stderr.String())
				}
			}
			var help bytes.Buffer
			cmd.SetOut(&help)
			_ = cmd.Help()
			if strings.Contains(help.String(), "--metrics-addr") {
				t.Errorf("help shows the deprecated --metrics-addr:\n%s", help.String())
			}
		})
	}
}
