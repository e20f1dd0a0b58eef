package arch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/ironlb/ironlb/"

type kind string

const (
	api         kind = "api"
	core        kind = "core"
	adapter     kind = "adapter"
	role        kind = "role"
	testbed     kind = "test bed"
	composition kind = "composition"
	tool        kind = "tool" // hack/...: build-time generators, never linked into the binary
	manifests   kind = "manifests"
)

// layer is where a package sits. Role is the folder of the role it belongs to ("" outside roles).
type layer struct {
	kind kind
	role string
}

// house is the map of the repository: every package falls under its longest matching prefix. A
// package that matches nothing fails the test, so that a new folder gets a place here first.
var house = []struct {
	prefix string
	layer  layer
}{
	{"api/", layer{kind: api}},
	{"cmd/", layer{kind: composition}},
	{"config", layer{kind: manifests}},
	{"hack/", layer{kind: tool}},
	{"internal/ociimage", layer{kind: testbed}}, // ironlb's OCI image builder: make image (hack/image) and the lab's --runtime=runc
	{"test/", layer{kind: testbed}},
	{"internal/arch", layer{kind: testbed}},
	{"internal/cli", layer{kind: composition}},
	{"internal/testbed/", layer{kind: testbed}},
	{"internal/testbed/attack", layer{kind: testbed}}, // the lab's attacker: forged, captured and replayed packets

	{"internal/allocator", layer{kind: core}},
	{"internal/election", layer{kind: core}},
	{"internal/config", layer{kind: core}},
	{"internal/bgpconfig", layer{kind: core}},
	{"internal/bfdprofile", layer{kind: core}},
	{"internal/adscope", layer{kind: core}}, // what an advertisement covers: speakers' models and ironlb status share it
	{"internal/version", layer{kind: core}}, // the build's version and commit (linker-stamped), read by the CLI

	{"internal/kube", layer{kind: adapter}},
	{"internal/kube/kubenode", layer{kind: core}}, // facts of a Node object two roles read: API types only
	{"internal/liveness", layer{kind: adapter}},
	{"internal/metallbmetrics", layer{kind: adapter}}, // MetalLB's metrics, which the controller and the speaker both export
	{"internal/logging", layer{kind: adapter}},        // the process's slog logger from --log-level/--log-format, klog routed into it

	{"internal/controller", layer{kind: role, role: "controller"}},
	{"internal/speaker", layer{kind: role, role: "speaker"}},
	{"internal/speaker/layer2", layer{kind: adapter, role: "speaker"}},
	{"internal/speaker/bfd", layer{kind: adapter, role: "speaker"}},
	{"internal/speaker/bgp", layer{kind: adapter, role: "speaker"}},
	{"internal/proxy", layer{kind: role, role: "proxy"}},
	{"internal/proxy/nftrules", layer{kind: core, role: "proxy"}},
	{"internal/proxy/convert", layer{kind: core, role: "proxy"}},
	{"internal/proxy/trace", layer{kind: core, role: "proxy"}},
	{"internal/proxy/nftapply", layer{kind: adapter, role: "proxy"}},
	{"internal/proxy/conntrack", layer{kind: adapter, role: "proxy"}},
	{"internal/proxy/healthcheck", layer{kind: adapter, role: "proxy"}},
	// explain does no I/O either, but it makes the knftables Fake it traces through, which a core may not.
	{"internal/proxy/explain", layer{kind: adapter, role: "proxy"}},
	{"internal/proxy/nftrules/nftrulestest", layer{kind: testbed}}, // random models for tests and benchmarks
	{"internal/testbed/fuzzbytes", layer{kind: testbed}},           // fuzz input as decisions, for the cores' fuzz targets
	{"internal/status", layer{kind: role, role: "status"}},
}

// noIO is what no core may depend on, even indirectly: the Kubernetes client, sockets and
// netlink, the kernel's nftables, GoBGP and gRPC, Prometheus. An entry ending in "/" names every
// package under it; any other names one package.
var noIO = []string{
	"k8s.io/client-go/", "github.com/osrg/gobgp/", "google.golang.org/grpc", "google.golang.org/grpc/",
	"github.com/vishvananda/", "github.com/google/nftables", "github.com/google/nftables/", "github.com/mdlayher/",
	"golang.org/x/sys/unix", "github.com/prometheus/",
}

// matches says whether dep is named by entry (see noIO). net/netip is plain values, never I/O.
func matches(dep, entry string) bool {
	if dep == "net/netip" {
		return false
	}
	if strings.HasSuffix(entry, "/") {
		return strings.HasPrefix(dep, entry)
	}
	return dep == entry
}

// strict lists, for the cores that a newcomer reads first, everything their own files may import.
var strict = map[string][]string{
	"internal/allocator":  {"cmp", "encoding/binary", "errors", "fmt", "math", "math/bits", "net/netip", "slices", "sort", "strings"},
	"internal/election":   {"cmp", "crypto/sha256", "encoding/binary", "net/netip", "slices", "time"},
	"internal/bfdprofile": {"errors", "fmt", "time"},
	"internal/proxy/nftrules": {"cmp", "crypto/sha256", "encoding/base32", "encoding/binary", "errors", "fmt", "hash/fnv",
		"maps", "net/netip", "reflect", "slices", "strconv", "strings", "time", "sigs.k8s.io/knftables"},
	"internal/bgpconfig": {"cmp", "errors", "fmt", "net/netip", "slices", "strconv", "strings", "time",
		"k8s.io/apimachinery/pkg/apis/meta/v1", "k8s.io/apimachinery/pkg/labels",
		module + "api/v1beta1", module + "api/v1beta2", module + "internal/election", module + "internal/bfdprofile", module + "internal/adscope"},
	"internal/adscope": {"slices", "k8s.io/apimachinery/pkg/labels"},
}

// forbiddenCalls are calls a core may not make although it imports their package: nftrules uses
// knftables' types, but the caller owns the Interface that runs nft.
var forbiddenCalls = map[string][]string{
	"internal/proxy/nftrules": {"knftables.New", "knftables.NewFake"},
}

// noDeps adds, for some cores, what they may not depend on even indirectly beyond noIO.
var noDeps = map[string][]string{
	// The rule builder is plain data: no Kubernetes package at all, no network stack.
	"internal/proxy/nftrules": {"k8s.io/", "net", "net/"},
}

// pureFiles are the files of adapters that hold a pure part (a wire format, a state machine, a
// plan): they import none of forbidden, and, with noClock, read no clock (they are driven by the
// times they are given).
var pureFiles = []struct {
	pkg       string
	files     []string // nil: every file but except
	except    []string
	forbidden []string
	noClock   bool
	stdlib    bool // the standard library only
}{
	{pkg: "internal/speaker/layer2", files: []string{"arp.go", "ndp.go", "ether.go", "filter.go"},
		forbidden: []string{"github.com/mdlayher/packet", "github.com/mdlayher/socket", "golang.org/x/sys/unix", "syscall", "os", "os/exec", "log/slog"}},
	// The link tracker reads the kernel's link notifications as plain numbers; link_linux.go subscribes.
	{pkg: "internal/speaker/layer2", files: []string{"link.go"},
		forbidden: []string{"github.com/vishvananda/netlink", "golang.org/x/sys/unix", "syscall", "os", "os/exec", "net", "log/slog"}, noClock: true},
	{pkg: "internal/speaker/bfd", files: []string{"packet.go", "session.go"},
		forbidden: []string{"golang.org/x/sys/unix", "syscall", "os", "os/exec", "net", "log/slog", "runtime"}, noClock: true},
	{pkg: "internal/testbed/lab", files: []string{"config.go", "plan.go"}, stdlib: true},
	// The kubelet API's requests, client rule and container-log format and selection; kubeletapi.go serves.
	{pkg: "internal/testbed/lab/agent", files: []string{"kubeletreq.go", "ctrlog.go"}, stdlib: true, noClock: true},
	// The hostPort rules (the node's table from its Pods' hostPorts); hostport.go runs nft.
	{pkg: "internal/testbed/lab/agent", files: []string{"hostportrules.go"},
		forbidden: []string{"os", "os/exec", "net", "syscall", "log/slog", "golang.org/x/sys/unix"}, noClock: true},
	{pkg: "internal/testbed/attack", files: []string{"forge.go", "wire.go"},
		forbidden: []string{"golang.org/x/sys/unix", "syscall", "os", "os/exec", "github.com/mdlayher/packet"}, noClock: true},
	{pkg: "internal/bfdprofile", noClock: true},
	{pkg: "internal/liveness", files: []string{"detector.go", "echo.go", "wire.go", "auth.go"},
		forbidden: []string{"golang.org/x/sys/unix", "syscall", "os", "os/exec", "log/slog", "runtime", "crypto/rand", "math/rand", "math/rand/v2"}, noClock: true},
	// The benchmarks' pictures: data in, SVG bytes out; the benchmarks save and load the files.
	{pkg: "internal/testbed/bench/benchplot", forbidden: []string{"os", "os/exec", "net", "syscall", "log/slog",
		"math/rand", "math/rand/v2", module + "internal/testbed/lab"}, noClock: true},
	// `ironlb status` decides and prints from objects; only load.go talks to the API.
	{pkg: "internal/status", except: []string{"load.go"}, forbidden: []string{"k8s.io/client-go/", "net/http", "os"}},
}

type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
	Standard   bool
}

// load lists every package of the module, with one `go list` for all the tests.
func load(t *testing.T) map[string]*pkg {
	t.Helper()
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	listed.once.Do(func() { listed.pkgs, listed.err = list() })
	if listed.err != nil {
		t.Fatal(listed.err)
	}
	return listed.pkgs
}

var listed struct {
	once sync.Once
	pkgs map[string]*pkg
	err  error
}

func list() (map[string]*pkg, error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m: %w", err)
	}
	cmd := exec.Command("go", "list", "-e", "-json", "./...")
	cmd.Dir = strings.TrimSpace(string(root))
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = &p
	}
	if len(pkgs) < 20 {
		return nil, fmt.Errorf("go list found %d packages; is this the module root?", len(pkgs))
	}
	return pkgs, nil
}

// where places a module package by its longest matching prefix.
func where(path string) (layer, bool) {
	best := -1
	var l layer
	for _, h := range house {
		if (path == strings.TrimSuffix(h.prefix, "/") || strings.HasPrefix(path, h.prefix) &&
			(strings.HasSuffix(h.prefix, "/") || len(path) == len(h.prefix) || path[len(h.prefix)] == '/')) && len(h.prefix) > best {
			best, l = len(h.prefix), h.layer
		}
	}
	return l, best >= 0
}

// ours returns the module-relative paths of the module packages among paths.
func ours(paths []string) []string {
	var out []string
	for _, p := range paths {
		if rel, ok := strings.CutPrefix(p, module); ok {
			out = append(out, rel)
		}
	}
	return out
}

func TestEveryPackageHasAPlace(t *testing.T) {
	for path := range load(t) {
		if _, ok := where(path); !ok {
			t.Errorf("%s is in no layer: give it a row in house (layers_test.go)", path)
		}
	}
}

func TestRolesImportNoOtherRole(t *testing.T) {
	for path, p := range load(t) {
		from, _ := where(path)
		shared := from.role == "" && (from.kind == api || from.kind == core || from.kind == adapter)
		if from.role == "" && !shared {
			continue
		}
		for _, imp := range ours(p.Imports) {
			to, _ := where(imp)
			switch {
			case to.role == "" || to.role == from.role:
			case shared:
				t.Errorf("%s (%s, shared by the roles) imports %s (role %s)", path, from.kind, imp, to.role)
			default:
				t.Errorf("%s (role %s) imports %s (role %s): a model two roles share belongs outside both", path, from.role, imp, to.role)
			}
		}
	}
}

func TestTheAPIImportsOnlyTheAPI(t *testing.T) {
	for path, p := range load(t) {
		if l, _ := where(path); l.kind != api {
			continue
		}
		for _, imp := range ours(p.Imports) {
			if to, _ := where(imp); to.kind != api {
				t.Errorf("%s (API types) imports %s (%s)", path, imp, to.kind)
			}
		}
		for _, b := range bannedDeps(p, noIO) {
			t.Errorf("%s (API types) depends on %s", path, b)
		}
	}
}

func TestCoresImportOnlyCoresAndTheAPI(t *testing.T) {
	for path, p := range load(t) {
		if l, _ := where(path); l.kind != core {
			continue
		}
		for _, imp := range ours(p.Imports) {
			if to, _ := where(imp); to.kind != core && to.kind != api {
				t.Errorf("%s (core) imports %s (%s): a core imports cores and API types only", path, imp, to.kind)
			}
		}
		for _, b := range bannedDeps(p, append(noIO, noDeps[path]...)) {
			t.Errorf("%s (core) depends on %s, which does I/O", path, b)
		}
	}
}

func TestCoresStartNoGoroutines(t *testing.T) {
	for path, p := range load(t) {
		if l, _ := where(path); l.kind != core {
			continue
		}
		inspect(t, p, func(fset *token.FileSet, n ast.Node) {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: go statement in a core (%s): the caller owns the goroutines", fset.Position(g.Pos()), path)
			}
		})
	}
}

func TestStrictCores(t *testing.T) {
	pkgs := load(t)
	for path, allowed := range strict {
		p, ok := pkgs[path]
		if !ok {
			t.Errorf("%s: no such package (strict)", path)
			continue
		}
		for _, imp := range p.Imports {
			if !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %q; it may import only %v", path, imp, allowed)
			}
		}
	}
}

func TestForbiddenCalls(t *testing.T) {
	pkgs := load(t)
	for path, calls := range forbiddenCalls {
		p, ok := pkgs[path]
		if !ok {
			t.Errorf("%s: no such package (forbiddenCalls)", path)
			continue
		}
		inspect(t, p, func(fset *token.FileSet, n ast.Node) {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && slices.Contains(calls, x.Name+"."+sel.Sel.Name) {
					t.Errorf("%s: %s calls %s.%s", fset.Position(sel.Pos()), path, x.Name, sel.Sel.Name)
				}
			}
		})
	}
}

// inspect calls visit on every node of the package's Go files.
func inspect(t *testing.T, p *pkg, visit func(*token.FileSet, ast.Node)) {
	t.Helper()
	fset := token.NewFileSet()
	for _, f := range p.GoFiles {
		file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			visit(fset, n)
			return true
		})
	}
}

// bannedDeps returns, for each entry (see noIO) that names one of the package's dependencies, the
// first such dependency and the entry.
func bannedDeps(p *pkg, entries []string) []string {
	var out []string
	for _, e := range entries {
		if i := slices.IndexFunc(p.Deps, func(dep string) bool { return matches(dep, e) }); i >= 0 {
			out = append(out, fmt.Sprintf("%s (%s)", p.Deps[i], e))
		}
	}
	return out
}

func TestPureFiles(t *testing.T) {
	pkgs := load(t)
	for _, pf := range pureFiles {
		p, ok := pkgs[pf.pkg]
		if !ok {
			t.Errorf("%s: no such package (pureFiles)", pf.pkg)
			continue
		}
		files := pf.files
		if files == nil {
			files = slices.DeleteFunc(slices.Clone(p.GoFiles), func(f string) bool { return slices.Contains(pf.except, f) })
		}
		for _, f := range files {
			src, file := parse(t, filepath.Join(p.Dir, f))
			if len(file.Imports) == 0 && pf.stdlib {
				t.Errorf("%s/%s: no imports found; is this the right file?", pf.pkg, f)
			}
			for _, imp := range file.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range pf.forbidden {
					if matches(path, bad) {
						t.Errorf("%s/%s imports %q; this file must stay free of I/O", pf.pkg, f, path)
					}
				}
				if first, _, _ := strings.Cut(path, "/"); pf.stdlib && strings.Contains(first, ".") {
					t.Errorf("%s/%s imports %q, which is not in the standard library", pf.pkg, f, path)
				}
			}
			if pf.noClock {
				for _, clock := range []string{"time.Now(", "time.Since(", "time.Until(", "time.Sleep(", "time.After(", "time.NewTimer("} {
					if bytes.Contains(src, []byte(clock)) {
						t.Errorf("%s/%s calls %s; it is driven by the times it is given", pf.pkg, f, clock)
					}
				}
			}
		}
	}
}

func TestTheProductImportsNoTestBed(t *testing.T) {
	for path, p := range load(t) {
		if l, _ := where(path); l.kind == testbed || l.kind == composition || l.kind == tool {
			continue
		}
		for _, imp := range ours(p.Imports) {
			if to, _ := where(imp); to.kind == testbed {
				t.Errorf("%s imports %s, which is the test bed", path, imp)
			}
		}
	}
}

func TestTheBinaryLinksNoTesting(t *testing.T) {
	p, ok := load(t)["cmd/ironlb"]
	if !ok {
		t.Fatal("cmd/ironlb: not found")
	}
	for _, dep := range p.Deps {
		if dep == "testing" || strings.HasPrefix(dep, "testing/") {
			t.Errorf("cmd/ironlb links %s", dep)
		}
	}
}

func parse(t *testing.T, name string) ([]byte, *ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return src, file
}
