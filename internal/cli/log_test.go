package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// TestLogFlags checks that every role takes --log-level and --log-format, that bad values fail
// naming the flag, and that the logger the flags build becomes the process's.
func TestLogFlags(t *testing.T) {
	state := klog.CaptureState()
	defer state.Restore()
	def := slog.Default()
	defer slog.SetDefault(def)

	for _, role := range []string{"controller", "speaker", "proxy", "lab", "trace", "status"} {
		t.Run(role, func(t *testing.T) {
			root := newRoot("ironlb")
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetArgs([]string{role, "--help"})
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"--log-level string", "--log-format string"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("%s --help lacks %q", role, want)
				}
			}
		})
	}

	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"version", "--log-level=loud"}, "--log-level: "},
		{[]string{"version", "--log-format=xml"}, "--log-format: "},
		{[]string{"version", "--log-level=none"}, ""},
		{[]string{"version", "--log-level=all", "--log-format=json"}, ""},
	} {
		root := newRoot("ironlb")
		root.SetOut(&bytes.Buffer{})
		root.SetArgs(tt.args)
		err := root.Execute()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)) {
			t.Errorf("%v: err = %v, want prefix %q", tt.args, err, tt.wantErr)
		}
	}

	// The logger built from the flags writes to the command's stderr, klog included.
	root := newRoot("ironlb")
	var stderr bytes.Buffer
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&stderr)
	root.SetArgs([]string{"version", "--log-format=json", "--log-level=debug"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	slog.Debug("from slog", "node", "w1")
	klog.V(2).InfoS("from klog", "node", "w2")
	var got []string
	for line := range strings.Lines(stderr.String()) {
		var r struct{ Level, Msg, Node string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		got = append(got, r.Level+" "+r.Msg+" "+r.Node)
	}
	// klog.V(n) arrives at slog level -n: V(2) is DEBUG+2.
	if want := "DEBUG from slog w1,DEBUG+2 from klog w2"; strings.Join(got, ",") != want {
		t.Errorf("stderr records %q, want %q", got, want)
	}
}
