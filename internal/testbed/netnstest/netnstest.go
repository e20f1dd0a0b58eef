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

// Add creates the network namespaces named (with `ip netns add`), each deleted when the test ends.
// It skips the test if one cannot be created (no namespace support here).
func Add(t testing.TB, names ...string) {
	t.Helper()
	for _, ns := range names {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Skipf("cannot create a network namespace: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
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
func NFTOnPath(t *testing.T, ns string) {
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
