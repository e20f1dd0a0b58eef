// Package logging builds the one logger an ironlb process writes through: log/slog, as text or JSON,
// at a level named as slog names them (debug, info, warn, error) or as MetalLB's --log-level does
// (all, debug, info, warn, error, none, so that MetalLB's flags carry over), with klog (client-go's
// logs: leader election, informers, event broadcasting) and the standard library's log package routed
// into the same handler.
//
// The roles take the logger as a Config field; the command line (internal/cli) builds it once from
// --log-level and --log-format and installs it with Install.
package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// The levels beyond slog's four, for MetalLB's --log-level values.
const (
	// LevelAll logs everything, klog's verbose messages down to V(10) included.
	LevelAll slog.Level = -10
	// LevelNone logs nothing.
	LevelNone slog.Level = 1 << 20
)

// ParseLevel parses a --log-level value, case-insensitively: debug, info, warn (or warning), error,
// and MetalLB's all and none. The error lists the accepted values.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "all":
		return LevelAll, nil
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	case "none":
		return LevelNone, nil
	}
	return 0, fmt.Errorf("log level %q is not one of %s", s, strings.Join(Levels, ", "))
}

// Levels are the --log-level values ParseLevel accepts, for help texts.
var Levels = []string{"all", "debug", "info", "warn", "error", "none"}

// Format is how log records are written.
type Format string

const (
	FormatText Format = "text" // slog's TextHandler: key=value pairs, one record a line
	FormatJSON Format = "json" // slog's JSONHandler: one JSON object a line
)

// ParseFormat parses a --log-format value: text or json, case-insensitively ("" is text).
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case "":
		return FormatText, nil
	case FormatText, FormatJSON:
		return f, nil
	}
	return "", fmt.Errorf("log format %q is not text or json", s)
}

// New returns a logger writing records at level and above to w in format (text unless FormatJSON);
// at LevelNone, one that writes nothing (logr, klog's bridge, hands errors to the handler whatever its
// level).
func New(w io.Writer, level slog.Level, format Format) *slog.Logger {
	if level >= LevelNone {
		return slog.New(slog.DiscardHandler)
	}
	opts := &slog.HandlerOptions{Level: level}
	if format == FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Parse is ParseLevel and ParseFormat together, then New: the logger --log-level and --log-format
// ask for. Errors name the flag.
func Parse(w io.Writer, level, format string) (*slog.Logger, slog.Level, error) {
	l, err := ParseLevel(level)
	if err != nil {
		return nil, 0, fmt.Errorf("--log-level: %w", err)
	}
	f, err := ParseFormat(format)
	if err != nil {
		return nil, 0, fmt.Errorf("--log-format: %w", err)
	}
	return New(w, l, f), l, nil
}

// Install makes l the process's logger: slog's default (which the log package writes through too)
// and klog's, with klog's verbosity following level (KlogVerbosity) so that V(n) messages reach the
// handler exactly when the level lets them through. It changes process-wide state: call it once, from
// main's side (tests restore klog with klog.CaptureState).
func Install(l *slog.Logger, level slog.Level) {
	slog.SetDefault(l)
	klog.SetSlogLogger(l)
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(KlogVerbosity(level)))
}

// KlogVerbosity is the klog -v matching a slog level: klog.V(n) logs through slog at level -n, so
// debug (-4) lets V(1)..V(4) through, all (-10) V(10), and info or above none of them.
func KlogVerbosity(level slog.Level) int {
	if level >= slog.LevelInfo {
		return 0
	}
	return int(-level)
}
