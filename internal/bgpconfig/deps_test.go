package bgpconfig

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package pure: no GoBGP, no client-go, nothing that does I/O, and no go
// statements. The API types, apimachinery's label selectors, the election model and
// bfdprofile are its only non-standard imports.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"cmp": true, "errors": true, "fmt": true, "net/netip": true, "slices": true, "strconv": true,
		"strings": true, "time": true,
		"k8s.io/apimachinery/pkg/apis/meta/v1":         true,
		"k8s.io/apimachinery/pkg/labels":               true,
		"github.com/ironlb/ironlb/api/v1beta1":         true,
		"github.com/ironlb/ironlb/api/v1beta2":         true,
		"github.com/ironlb/ironlb/internal/election":   true,
		"github.com/ironlb/ironlb/internal/bfdprofile": true,
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
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %q; bgpconfig must stay pure", f, path)
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: go statement; bgpconfig starts no goroutines", fset.Position(g.Pos()))
			}
			return true
		})
	}
}

// TestNoHeavyDeps checks the transitive imports: the package must not pull in GoBGP or client-go
// (through the API types or anything else).
func TestNoHeavyDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/osrg/gobgp", "k8s.io/client-go", "google.golang.org/grpc"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("bgpconfig depends on %s", dep)
			}
		}
	}
}
