package bfd

import (
	"errors"
	"fmt"
	"os"
	"strconv"

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

// SetProcessNice sets the nice value of every thread of this process; threads started later
// inherit it from the thread that starts them. A realtime protocol loop (Config.Realtime) still
// needs Go's other runtime threads now and then (to get a processor back after a long system call,
// for garbage collection), and on a saturated machine threads of normal priority wait tens of
// milliseconds for a CPU. With two busy loops per CPU on two CPUs, the loop ran up to 50–70 ms
// late at nice 0, and up to 17–25 ms at nice -10 (runs of 30–120 s). Negative values need
// CAP_SYS_NICE. It tries every thread and returns the first error.
func SetProcessNice(nice int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("bfd: listing threads: %w", err)
	}
	var errs []error
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("bfd: setting nice %d: %w", nice, errs[0])
	}
	return nil
}
