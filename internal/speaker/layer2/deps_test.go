package layer2

import (
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestWireFilesDoNoIO keeps the wire formats pure: the files that build and
// parse frames import nothing that opens sockets or touches the system.
func TestWireFilesDoNoIO(t *testing.T) {
	forbidden := map[string]bool{
		"github.com/mdlayher/packet": true,
		"github.com/mdlayher/socket": true,
		"golang.org/x/sys/unix":      true,
		"syscall":                    true,
		"os":                         true,
		"os/exec":                    true,
		"log/slog":                   true,
	}
	for _, file := range []string{"arp.go", "ndp.go", "ether.go", "filter.go"} {
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
				t.Errorf("%s imports %q; wire formats must stay free of I/O", file, path)
			}
		}
	}
}
