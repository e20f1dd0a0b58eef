package e2e

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These run last: they take the shared lab down and check nothing remains, then interrupt and kill
// `lab up` half-way and check that nothing remains either.

func TestLabDownLeavesNothing(t *testing.T) {
	out := run(t, ironlb, "lab", "down")
	t.Log(strings.TrimSpace(out))
	if left := leftovers(); len(left) > 0 {
		t.Fatalf("after lab down: %s", strings.Join(left, "\n"))
	}
	if out := run(t, ironlb, "lab", "down"); !strings.Contains(out, "no lab is up") {
		t.Errorf("a second lab down should say there is no lab, got %q", out)
	}
}

// startUp starts `lab up` and waits until the control plane is being started (the apiserver's log exists),
// so an interruption lands half-way.
func startUp(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(ironlb, "lab", "up")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(stateDir + "/logs/myk8s-control-plane/kube-apiserver.log"); err == nil {
			return cmd
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	t.Fatal("lab up did not reach the control plane in 30s")
	return nil
}

func TestInterruptedUpCleansUp(t *testing.T) {
	cmd := startUp(t)
	_ = cmd.Process.Signal(os.Interrupt) // Ctrl-C
	err := cmd.Wait()
	if err == nil {
		t.Errorf("interrupted lab up exited 0")
	}
	if left := leftovers(); len(left) > 0 {
		t.Fatalf("after Ctrl-C of lab up: %s", strings.Join(left, "\n"))
	}
}

func TestKilledUpThenDownCleansUp(t *testing.T) {
	cmd := startUp(t)
	_ = cmd.Process.Kill() // a crash: no cleanup ran
	_ = cmd.Wait()
	if left := leftovers(); len(left) == 0 {
		t.Fatalf("a killed lab up should leave a half-present lab for lab down to clean")
	}
	run(t, ironlb, "lab", "down")
	if left := leftovers(); len(left) > 0 {
		t.Fatalf("after lab down of a killed lab up: %s", strings.Join(left, "\n"))
	}
}
