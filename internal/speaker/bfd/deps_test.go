package bfd

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPureFilesDoNoIO keeps the wire format and the state machine pure: they import nothing that
// opens sockets, reads the clock's environment or logs.
func TestPureFilesDoNoIO(t *testing.T) {
	forbidden := map[string]bool{
		"golang.org/x/sys/unix": true,
		"syscall":               true,
		"os":                    true,
		"os/exec":               true,
		"net":                   true,
		"log/slog":              true,
		"runtime":               true,
	}
	for _, file := range []string{"packet.go", "session.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if forbidden[path] {
				t.Errorf("%s imports %q; the wire format and state machine must stay free of I/O", file, path)
			}
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, clock := range []string{"time.Now(", "time.Since(", "time.Until(", "time.Sleep(", "time.After(", "time.NewTimer("} {
			if strings.Contains(string(src), clock) {
				t.Errorf("%s calls %s; the state machine is driven by the times it is given", file, clock)
			}
		}
	}
}
