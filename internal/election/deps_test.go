package election

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package pure: standard library only, nothing that does I/O or talks to
// Kubernetes, and no go statements.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"cmp": true, "crypto/sha256": true, "encoding/binary": true, "net/netip": true,
		"slices": true, "time": true,
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
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %q; the election package must stay pure (standard library, no I/O, no Kubernetes)", f, path)
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: go statement; the election package starts no goroutines", fset.Position(g.Pos()))
			}
			return true
		})
	}
}
