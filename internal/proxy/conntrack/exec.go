package conntrack

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Deleter deletes the conntrack entries a Filter selects and returns how many it deleted.
type Deleter interface {
	Delete(ctx context.Context, f Filter) (int, error)
}

// BatchDeleter is a Deleter that deletes what any of several filters selects in one pass.
type BatchDeleter interface {
	Deleter
	DeleteAll(ctx context.Context, fs []Filter) (int, error)
}

// Runner runs a command and returns its combined output and exit code; err is only for a
// command that could not run or was killed. The seam between Exec and the operating system.
type Runner func(ctx context.Context, name string, args ...string) (out []byte, exitCode int, err error)

// Exec deletes entries by running conntrack(8) (conntrack-tools), as kube-proxy did before it
// moved to netlink.
type Exec struct {
	path string
	run  Runner
}

// NewExec finds the conntrack tool on PATH. run is the Runner (nil: os/exec).
func NewExec(run Runner) (*Exec, error) {
	path, err := exec.LookPath("conntrack")
	if err != nil {
		return nil, fmt.Errorf("conntrack tool: %w", err)
	}
	return NewExecPath(path, run), nil
}

// NewExecPath returns an Exec running the conntrack tool at path.
func NewExecPath(path string, run Runner) *Exec {
	if run == nil {
		run = osRun
	}
	return &Exec{path: path, run: run}
}

var deletedRE = regexp.MustCompile(`(\d+) flow entries have been deleted`)

// ErrConntrack wraps the failures of the conntrack tool.
var ErrConntrack = errors.New("conntrack")

// Delete runs `conntrack -D` with f's arguments. Exit status 1 with nothing deleted is not an
// error (conntrack reports "0 flow entries have been deleted" that way).
func (e *Exec) Delete(ctx context.Context, f Filter) (int, error) {
	out, code, err := e.run(ctx, e.path, f.Args()...)
	if err != nil {
		return 0, fmt.Errorf("%w %s: %w", ErrConntrack, f, err)
	}
	n, reported := 0, false
	if m := deletedRE.FindSubmatch(out); m != nil {
		n, _ = strconv.Atoi(string(m[1]))
		reported = true
	}
	switch {
	case code == 0:
		return n, nil
	case code == 1 && reported && n == 0:
		return 0, nil
	}
	return n, fmt.Errorf("%w %s: exit status %d: %s", ErrConntrack, f, code, strings.TrimSpace(string(out)))
}

func osRun(ctx context.Context, name string, args ...string) ([]byte, int, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return out, ee.ExitCode(), nil
	}
	if err != nil {
		return out, -1, err
	}
	return out, 0, nil
}

// Fake records the filters it is asked to delete. Safe for concurrent use.
type Fake struct {
	mu      sync.Mutex // guards the following fields
	filters []Filter
	// Err, if set, is returned by every Delete.
	Err error
}

// Delete records f.
func (f *Fake) Delete(_ context.Context, flt Filter) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filters = append(f.filters, flt)
	return 0, f.Err
}

// Filters returns the filters recorded so far and forgets them.
func (f *Fake) Filters() []Filter {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.filters
	f.filters = nil
	return out
}
