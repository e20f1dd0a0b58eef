// Package proc starts helper processes (FRR daemons, test binaries) from tests so that they die with the
// test binary, whatever happens to the test.
package proc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// spawner is a goroutine locked to its thread for the life of the test binary: processes started
// there with Pdeathsig die with the test binary, not with whichever thread happened to fork them
// (Pdeathsig follows the forking thread, and Go ends threads whose locked goroutine exits).
var spawner = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

// StartKilledWithUs starts cmd so that it is killed if the test binary dies (as long as it keeps its
// credentials: a daemon that drops privileges clears the signal and must be stopped by cleanup).
func StartKilledWithUs(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error)
	spawner() <- func() { errc <- cmd.Start() }
	return <-errc
}
