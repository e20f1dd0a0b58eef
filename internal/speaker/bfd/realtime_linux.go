package bfd

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// rtPriority is the SCHED_FIFO priority of the protocol loop: above every normal task, below the
// kernel's interrupt threads (50).
const rtPriority = 10

// setRealtime gives the calling thread, which must be locked to its goroutine, a timer slack of
// 1 ns (ppoll wakes on time rather than up to 50 µs late) and SCHED_FIFO priority. Threads it
// creates do not inherit the policy (SCHED_FLAG_RESET_ON_FORK). The timer slack is best effort.
func setRealtime() error {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	attr := unix.SchedAttr{
		Size:     unix.SizeofSchedAttr,
		Policy:   unix.SCHED_FIFO,
		Priority: rtPriority,
		Flags:    unix.SCHED_FLAG_RESET_ON_FORK,
	}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return fmt.Errorf("sched_setattr SCHED_FIFO %d: %w", rtPriority, err)
	}
	return nil
}
