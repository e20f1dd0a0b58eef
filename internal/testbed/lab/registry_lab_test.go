package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestMain lets this test binary stand in for ironlb as the lab's process starter: the lab runs
// every process as `<self> lab nsinit` (nsinit.go), and TestLabRegistry passes the test binary as
// self.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "lab" && os.Args[2] == "nsinit" {
		err := NSInit() // returns only on error
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestLabRegistry brings up the part of a lab the registry needs, as lab up does (the plan on disk,
// the bridge and its hosts, then startRegistry), under names of its own (ilbreg-*, its own cgroup,
// state directory and subnet, none of them the running lab's): the registry answers in lab status,
// PushLayout puts a two-platform index there from the client's namespace and it comes back by
// digest, the log is in the lab's logs; then Down leaves no namespace, process or file behind.
func TestLabRegistry(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates the network namespaces ilbreg-*, a cgroup, and runs the distribution registry")
	}
	if _, err := cgroupRoot(); err != nil {
		t.Skip(err)
	}
	bin := registryBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	suffix := make([]byte, 2)
	_, _ = rand.Read(suffix)
	c := DefaultConfig()
	c.Name, c.ClientName, c.Workers = "ilbreg-"+hex.EncodeToString(suffix), "ilbreg-c"+hex.EncodeToString(suffix), 0
	c.NodeCIDR, c.ClientAddr = netip.MustParsePrefix("198.18.0.0/24"), netip.MustParseAddr("198.18.0.100") // RFC 2544's test range
	c.StateDir, c.Self, c.RegistryBin = filepath.Join(t.TempDir(), "lab"), self, filepath.Dir(bin)
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	l := New(p, t.Logf)
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	if err := l.State.WritePlan(p); err != nil {
		t.Fatal(err)
	}
	if err := l.createNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.startRegistry(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.startRegistry(ctx); err != nil { // lab up on a lab that is up: left as it is
		t.Fatalf("starting the registry again: %v", err)
	}
	if err := l.RegistryPing(ctx); err != nil {
		t.Fatal(err)
	}
	if s, want := l.Status(ctx), "registry: http://198.18.0.253:5000 answering"; !strings.Contains(s, want) {
		t.Errorf("lab status lacks %q:\n%s", want, s)
	}

	idx, err := random.Index(1024, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	refs, d, err := l.PushLayout(ctx, writeTestLayout(t, idx, "v0.1.0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0].Name() != "198.18.0.253:5000/ironlb/ironlb:v0.1.0" || d != mustDigest(t, idx) {
		t.Fatalf("PushLayout = %v %s, want 198.18.0.253:5000/ironlb/ironlb:v0.1.0 %s", refs, d, mustDigest(t, idx))
	}
	got, err := remote.Index(refs[0].Context().Digest(d.String()), remote.WithTransport(l.RegistryTransport()))
	if err != nil {
		t.Fatal(err)
	}
	if mustDigest(t, got) != d {
		t.Errorf("pulled digest %s, pushed %s", mustDigest(t, got), d)
	}
	logFile := l.State.LogFile(p.Registry.Name, "registry")
	if b, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(b), "PUT /v2/ironlb/ironlb/manifests/v0.1.0") {
		t.Errorf("%s does not log the push (%v):\n%s", logFile, err, b)
	}

	cg, err := l.Cgroup(p.Registry.Name, "registry")
	if err != nil {
		t.Fatal(err)
	}
	if len(cg.Procs()) == 0 {
		t.Fatalf("no process in %s", cg)
	}
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range append(p.AllHosts(), Host{Name: p.BridgeNS}) {
		if NetNSExists(h.Name) {
			t.Errorf("namespace %s left after Down", h.Name)
		}
	}
	if cg.Exists() {
		t.Errorf("cgroup %s left after Down", cg)
	}
	if _, err := os.Stat(l.State.Dir); err == nil {
		t.Errorf("state directory %s (the registry's storage) left after Down", l.State.Dir)
	}
	if err := l.RegistryPing(ctx); err == nil {
		t.Error("the registry still answers after Down")
	}
}
