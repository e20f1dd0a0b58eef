package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"
)

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"debug", slog.LevelDebug, false},
		{"info", slog.LevelInfo, false},
		{"", slog.LevelInfo, false},
		{"warn", slog.LevelWarn, false},
		{"warning", slog.LevelWarn, false},
		{"error", slog.LevelError, false},
		{"DEBUG", slog.LevelDebug, false},
		{" Info ", slog.LevelInfo, false},
		// MetalLB's --log-level values.
		{"all", LevelAll, false},
		{"none", LevelNone, false},
		{"trace", 0, true},
		{"4", 0, true},
		{"info+2", 0, true}, // slog's own offsets are not flag values
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseLevel(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseLevel(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("ParseLevel(%q) = %v, want %v", tt.in, got, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), "all, debug, info, warn, error, none") {
				t.Errorf("error %q does not list the accepted values", err)
			}
		})
	}
}

func TestParseFormat(t *testing.T) {
	tests := []struct {
		in      string
		want    Format
		wantErr bool
	}{
		{"text", FormatText, false},
		{"", FormatText, false},
		{"json", FormatJSON, false},
		{"JSON", FormatJSON, false},
		{"logfmt", "", true},
		{"yaml", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseFormat(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseFormat(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseFormat(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestParseNamesFlag checks that Parse's errors name the flag at fault.
func TestParseNamesFlag(t *testing.T) {
	if _, _, err := Parse(&bytes.Buffer{}, "loud", "text"); err == nil || !strings.HasPrefix(err.Error(), "--log-level: ") {
		t.Errorf("bad level: err = %v", err)
	}
	if _, _, err := Parse(&bytes.Buffer{}, "info", "xml"); err == nil || !strings.HasPrefix(err.Error(), "--log-format: ") {
		t.Errorf("bad format: err = %v", err)
	}
}

func TestKlogVerbosity(t *testing.T) {
	for _, tt := range []struct {
		level slog.Level
		want  int
	}{{LevelAll, 10}, {slog.LevelDebug, 4}, {slog.LevelInfo, 0}, {slog.LevelError, 0}, {LevelNone, 0}} {
		if got := KlogVerbosity(tt.level); got != tt.want {
			t.Errorf("KlogVerbosity(%v) = %d, want %d", tt.level, got, tt.want)
		}
	}
}

// records decodes one JSON object per line, dropping the time (not deterministic) and the source.
func records(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not one JSON object a line: %q: %v", line, err)
		}
		delete(r, "time")
		out = append(out, r)
	}
	return out
}

// TestInstallRoutesKlog checks that once installed, klog's output (what client-go logs) and the log
// package's go through the one slog handler, as JSON with --log-format=json, and that klog's verbose
// messages follow the level.
func TestInstallRoutesKlog(t *testing.T) {
	state := klog.CaptureState()
	defer state.Restore()
	def := slog.Default()
	defer slog.SetDefault(def)
	logFlags := log.Flags()
	defer log.SetFlags(logFlags)

	tests := []struct {
		level string
		want  []map[string]any
	}{
		{"info", []map[string]any{
			{"level": "INFO", "msg": "plain klog"},
			{"level": "INFO", "msg": "structured klog", "service": "default/svc1"},
			{"level": "ERROR", "msg": "klog error", "err": "boom", "node": "w1"},
			{"level": "INFO", "msg": "the log package"},
		}},
		{"debug", []map[string]any{
			{"level": "INFO", "msg": "plain klog"},
			{"level": "INFO", "msg": "structured klog", "service": "default/svc1"},
			{"level": "DEBUG", "msg": "klog V(4)"},
			{"level": "ERROR", "msg": "klog error", "err": "boom", "node": "w1"},
			{"level": "INFO", "msg": "the log package"},
		}},
		{"error", []map[string]any{
			{"level": "ERROR", "msg": "klog error", "err": "boom", "node": "w1"},
		}},
		{"none", nil},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			var b bytes.Buffer
			l, level, err := Parse(&b, tt.level, "json")
			if err != nil {
				t.Fatal(err)
			}
			Install(l, level)
			klog.Info("plain klog")
			klog.InfoS("structured klog", "service", "default/svc1")
			klog.V(4).InfoS("klog V(4)")
			klog.V(5).InfoS("klog V(5)")
			klog.ErrorS(errors.New("boom"), "klog error", "node", "w1")
			klog.Flush()
			log.SetFlags(0)
			log.Print("the log package")
			if diff := cmp.Diff(tt.want, records(t, &b)); diff != "" {
				t.Errorf("records (-want +got):\n%s\nraw:\n%s", diff, b.String())
			}
		})
	}
}
