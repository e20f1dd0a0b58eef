package netnstest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestVeth joins two throwaway namespaces with a veth pair and pings across it, over IPv4 and
// IPv6 (the addresses live in the namespaces only).
func TestVeth(t *testing.T) {
	Require(t, "ip", "ping")
	a, b := fmt.Sprintf("ironlb-nstest-%d-a", os.Getpid()), fmt.Sprintf("ironlb-nstest-%d-b", os.Getpid())
	Add(t, a, b)
	Veth(t, End{NS: a, Name: "va", MAC: "02:00:00:00:01:0a", Addrs: []string{"192.0.2.1/24", "2001:db8:1::1/64"}},
		End{NS: b, Name: "vb", Addrs: []string{"192.0.2.2/24", "2001:db8:1::2/64"}})
	if out := Run(t, a, "ip", "link", "show", "va"); !strings.Contains(out, "02:00:00:00:01:0a") || !strings.Contains(out, "UP") {
		t.Errorf("va:\n%s", out)
	}
	for _, dst := range []string{"192.0.2.2", "2001:db8:1::2"} {
		if out, err := Output(a, "ping", "-c", "1", "-W", "5", dst); err != nil {
			t.Errorf("ping %s: %v\n%s", dst, err, out)
		}
	}
}

// TestEnterAndIn: a goroutine that entered a namespace, and a function run by In, see the
// namespace's network stack; the test's thread is back in its own after In.
func TestEnterAndIn(t *testing.T) {
	Require(t, "ip")
	ns := fmt.Sprintf("ironlb-nstest-%d-e", os.Getpid())
	Add(t, ns)
	want := inode(t, "/run/netns/"+ns)
	got := make(chan uint64, 1)
	go func() {
		if err := Enter(ns); err != nil {
			t.Error(err)
			got <- 0
			return
		}
		got <- inode(t, "/proc/thread-self/ns/net")
	}()
	if g := <-got; g != want {
		t.Errorf("after Enter: namespace %d, want %d", g, want)
	}
	own := inode(t, "/proc/self/ns/net")
	In(t, ns, func() {
		if g := inode(t, "/proc/thread-self/ns/net"); g != want {
			t.Errorf("in In: namespace %d, want %d", g, want)
		}
	})
	Do(t, ns, func() error {
		if g := inode(t, "/proc/thread-self/ns/net"); g != want {
			return fmt.Errorf("namespace %d, want %d", g, want)
		}
		return nil
	})
	errc := make(chan error, 1)
	go func() { errc <- Enter("ironlb-nstest-does-not-exist") }() // its thread ends with it
	if err := <-errc; err == nil {
		t.Error("Enter into no namespace: no error")
	}
	if g := inode(t, "/proc/self/ns/net"); g != own {
		t.Errorf("the process's namespace changed: %d, was %d", g, own)
	}
}

func inode(t *testing.T, path string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Error(err)
		return 0
	}
	return st.Ino
}
