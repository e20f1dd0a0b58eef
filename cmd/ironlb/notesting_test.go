package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestNoTesting fails if the ironlb binary links the testing package: test helpers that import it
// (internal/testbed/testenv, .../frr) are for tests only, and what the subcommands need lives in
// packages beside them that do not (internal/testbed/apiserver). It asks the go command for the
// binary's dependencies, and names the packages that import testing directly.
func TestNoTesting(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list the binary's dependencies: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps .: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps .: %v", err)
	}
	var importers []string
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		for imp := range strings.FieldsSeq(imports) {
			if imp == "testing" {
				importers = append(importers, pkg)
			}
		}
	}
	if len(importers) > 0 {
		t.Errorf("cmd/ironlb links testing, imported by %s", strings.Join(importers, ", "))
	}
}
