package allocator

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package pure: standard library only, and nothing that does I/O, talks to
// Kubernetes or starts goroutines on its own.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"cmp": true, "encoding/binary": true, "errors": true, "fmt": true, "math": true, "math/bits": true,
		"net/netip": true, "slices": true, "sort": true, "strings": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %q; the allocator must stay pure (standard library, no I/O, no Kubernetes)", f, path)
			}
		}
	}
}
