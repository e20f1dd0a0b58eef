package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestProbeCmdsAddr: the lab's probe commands refuse an --addr that is not an address (and
// connprobe a missing one) with the flag's name, before probing anything; a good one reaches the
// command's own checks.
func TestProbeCmdsAddr(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmd     func() *cobra.Command
		args    []string
		wantErr string
	}{
		{"probe: not an address", probeCmd, []string{"--addr", "10.0.0.300"}, "--addr: "},
		{"connprobe: not an address", connprobeCmd, []string{"--addr", "web"}, "--addr: "},
		{"connprobe: no address", connprobeCmd, nil, "--addr: "},
		{"connprobe: an address, then its own checks", connprobeCmd, []string{"--addr", "127.0.0.1", "--every", "0"}, "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd()
			cmd.SetArgs(tc.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
