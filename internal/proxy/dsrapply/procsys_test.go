package dsrapply_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ironlb/ironlb/internal/proxy/dsrapply"
)

// The sysctls go under the root the proxy is given (--proc-sys: the chart's mount of the host's
// /proc/sys/net at /host/proc/sys/net), not under the container's own /proc/sys.
func TestProcSysWriterUnderRoot(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"net/ipv4/conf/all", "net/ipv4/conf/default"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := dsrapply.ProcSysWriter(root)
	for name, value := range dsrapply.Sysctls {
		if !strings.HasPrefix(name, "net/ipv4/") {
			continue
		}
		if err := w(name, value); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(b) != value {
			t.Errorf("%s under %s: %q %v, want %q", name, root, b, err, value)
		}
	}
	// A setting under a directory the root lacks fails (the kernel has no such file either).
	if err := w("net/netfilter/nf_conntrack_tcp_loose", "1"); err == nil {
		t.Errorf("write under a missing directory: no error")
	}
}

// A read-only /proc/sys (a container that is not privileged, as containerd and the lab's runtime
// mount it) gives an error that says what to mount and which flag to pass. The read-only file
// system is a tmpfs mounted read-only in a mount namespace of this test's own thread.
func TestProcSysWriterReadOnlySaysWhatToDo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a mount namespace)")
	}
	root := t.TempDir()
	done := make(chan error, 1)
	go func() {
		// This thread is left in its own mount namespace: never unlocked, so Go ends it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- err
			return
		}
		// A tmpfs holding the file, then remounted read-only, as /proc/sys is in a container.
		if err := unix.Mount("tmpfs", root, "tmpfs", 0, ""); err != nil {
			done <- err
			return
		}
		if err := os.MkdirAll(filepath.Join(root, "net/ipv4"), 0o755); err != nil {
			done <- err
			return
		}
		if err := os.WriteFile(filepath.Join(root, "net/ipv4/ip_forward"), []byte("0"), 0o644); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			done <- err
			return
		}
		done <- dsrapply.ProcSysWriter(root)("net/ipv4/ip_forward", "1")
	}()
	err := <-done
	if err == nil {
		t.Fatal("write to a read-only root: no error")
	}
	if !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), "--proc-sys=/host/proc/sys") {
		t.Errorf("error %q: want it to say the root is read-only and what to pass", err)
	}
	// The mount was the thread's own: the test's directory is still writable here.
	if err := os.WriteFile(filepath.Join(root, "x"), nil, 0o644); err != nil {
		t.Errorf("the read-only mount leaked out of its namespace: %v", err)
	}
}
