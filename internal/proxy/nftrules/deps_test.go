package nftrules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the builder pure: its own files import the standard library's pure packages
// and knftables' types only, never calling knftables.New (which runs nft).
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"cmp": true, "crypto/sha256": true, "encoding/base32": true, "encoding/binary": true,
		"errors": true, "fmt": true, "hash/fnv": true, "maps": true, "net/netip": true, "reflect": true,
		"slices": true, "strconv": true, "strings": true, "time": true,
		"sigs.k8s.io/knftables": true,
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
				t.Errorf("%s imports %q; nftrules must stay pure (no I/O, no Kubernetes)", f, path)
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "knftables" && (sel.Sel.Name == "New" || sel.Sel.Name == "NewFake") {
					t.Errorf("%s: calls knftables.%s; the caller owns the Interface", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}

// TestDeps checks the whole dependency graph: no client-go or any Kubernetes package, no
// sockets, no netlink.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "net", strings.HasPrefix(dep, "net/") && dep != "net/netip",
			strings.HasPrefix(dep, "k8s.io/"), strings.HasPrefix(dep, "github.com/google/nftables"),
			strings.HasPrefix(dep, "github.com/vishvananda/"), strings.HasPrefix(dep, "github.com/mdlayher/"),
			strings.HasPrefix(dep, "golang.org/x/sys/unix"):
			t.Errorf("nftrules depends on %s", dep)
		}
	}
}
