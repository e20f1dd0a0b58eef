// Package netnstest gives tests throwaway network namespaces: created under a name the test picks,
// removed when the test ends (t.Cleanup, on every path), with commands run inside them. Tests using
// it skip unless run as root with the tools they name. Every address such a test configures lives
// inside its namespaces; the root namespace is not touched.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Require skips the test unless it runs as root and every tool is on PATH.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
}

// Add creates the network namespaces named (with `ip netns add`), each deleted when the test ends
// (a namespace that cannot be deleted fails the test). It skips the test if one cannot be created
// (no namespace support here).
func Add(t testing.TB, names ...string) {
	t.Helper()
	for _, ns := range names {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Skipf("cannot create a network namespace: %v: %s", err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("deleting network namespace %s: %v: %s", ns, err, out)
			}
		})
	}
}

// Output runs the command args in network namespace ns and returns its combined output.
func Output(ns string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %v: %s", ns, args, err, out)
	}
	return string(out), nil
}

// Run runs the command args in network namespace ns, failing the test if it fails, and returns its
// combined output.
func Run(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := Output(ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// NFTOnPath points PATH's nft at network namespace ns for the rest of the test, through a wrapper
// script in a temporary folder, so that what runs nft from PATH (knftables) programs the namespace.
// Tests using it cannot run in parallel (it sets PATH).
func NFTOnPath(t testing.TB, ns string) {
	t.Helper()
	nft, err1 := exec.LookPath("nft")
	ip, err2 := exec.LookPath("ip")
	if err1 != nil || err2 != nil {
		t.Skip("needs nft and ip")
	}
	dir := t.TempDir()
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %s netns exec %s %s \"$@\"\n", ip, ns, nft)
	if err := os.WriteFile(filepath.Join(dir, "nft"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// Sysctl returns a function setting the sysctl key (slash-separated, as in /proc/sys) to value in
// network namespace ns, the form the appliers take.
func Sysctl(ns string) func(key, value string) error {
	return func(key, value string) error {
		_, err := Output(ns, "sysctl", "-qw", strings.ReplaceAll(key, "/", ".")+"="+value)
		return err
	}
}

// Enter moves the calling goroutine, locked to its thread for good, into network namespace ns (made
// by `ip netns add`): for a goroutine that keeps working there (a watcher, a reopened socket). The
// thread never returns to its namespace and ends with the goroutine; no other goroutine runs on it.
// Unlike the other functions here it may be called from any goroutine: it reports, not fails.
func Enter(ns string) error {
	runtime.LockOSThread() // never unlocked
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	return nil
}

// In runs f with the calling goroutine's thread inside network namespace ns (made by `ip netns add`),
// so that the sockets f opens belong to it; the thread returns to its own namespace after. Other
// goroutines are not affected. f may fail the test.
func In(t testing.TB, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("setns %s: %v", ns, err)
	}
	defer func() {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			panic(fmt.Sprintf("cannot return to the original network namespace: %v", err)) // the thread is unusable
		}
	}()
	f()
}

// End is one end of a veth pair: its namespace, its name, its MAC ("" for the kernel's) and its
// addresses with their prefix lengths ("192.0.2.1/24", "2001:db8::1/64").
type End struct {
	NS, Name, MAC string
	Addrs         []string
}

// Veth joins two namespaces with a veth pair, a's end in a.NS and b's in b.NS, gives each end its
// addresses (IPv6 ones without duplicate address detection, usable at once) and sets both ends up.
// It fails the test if a step fails.
func Veth(t testing.TB, a, b End) {
	t.Helper()
	args := []string{"ip", "link", "add", a.Name}
	if a.MAC != "" {
		args = append(args, "address", a.MAC)
	}
	args = append(args, "type", "veth", "peer", "name", b.Name)
	if b.MAC != "" {
		args = append(args, "address", b.MAC)
	}
	Run(t, a.NS, append(args, "netns", b.NS)...)
	for _, e := range []End{a, b} {
		for _, addr := range e.Addrs {
			cmd := []string{"ip", "addr", "add", addr, "dev", e.Name}
			if strings.Contains(addr, ":") {
				cmd = append(cmd, "nodad")
			}
			Run(t, e.NS, cmd...)
		}
	}
	Run(t, a.NS, "ip", "link", "set", a.Name, "up")
	Run(t, b.NS, "ip", "link", "set", b.Name, "up")
}

// Do is In for a function that returns its error: it runs fn with the calling goroutine's thread
// inside network namespace ns and fails the test, naming ns, if fn returns an error.
func Do(t testing.TB, ns string, fn func() error) {
	t.Helper()
	In(t, ns, func() {
		if err := fn(); err != nil {
			t.Fatalf("in namespace %s: %v", ns, err)
		}
	})
}
