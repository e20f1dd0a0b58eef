package lab

import (
	"go/build"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestPureFilesImportOnlyStdlib keeps the topology (config.go, plan.go) free of anything but the standard
// library, so it stays a pure, root-free, easily tested function of Config (a small take on tailscale's
// depaware).
func TestPureFilesImportOnlyStdlib(t *testing.T) {
	for _, file := range []string{"config.go", "plan.go"} {
		t.Run(file, func(t *testing.T) {
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Imports) == 0 {
				t.Fatalf("%s: no imports found; is this the right file?", file)
			}
			for _, imp := range f.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				if err != nil {
					t.Fatal(err)
				}
				if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") || path == "C" {
					t.Errorf("%s imports %q, which is not in the standard library", file, path)
					continue
				}
				pkg, err := build.Import(path, "", build.FindOnly)
				if err != nil || !pkg.Goroot {
					t.Errorf("%s imports %q, which is not in GOROOT (err %v)", file, path, err)
				}
			}
		})
	}
}
