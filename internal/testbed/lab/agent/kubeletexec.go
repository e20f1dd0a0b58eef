package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/ironlb/ironlb/internal/testbed/lab"
)

// execSpec is how a container's process was started: exec runs beside it with the same settings.
type execSpec struct {
	Spec   lab.ExecSpec // env, capabilities, user, working directory (its Argv is the container's)
	Cgroup lab.Cgroup   // the run's cgroup: exec'd processes join it and die with the container
	Runc   *runcExec    // set for a runc container (runc.go): exec is `runc exec`
}

// execRunner runs commands in a container's namespaces: `nsenter -t <pid> -n -m -u` enters the
// container's network, mount and UTS namespaces (the agent gives containers no PID or IPC namespace),
// and `<self> lab nsinit` then applies the container's capabilities, user and working directory and
// execs the command with the container's environment, as it did for the container itself.
type execRunner struct {
	Self    string   // the ironlb binary (or a test binary that runs lab.NSInit)
	NSEnter string   // path of nsenter
	Progs   Programs // the local programs images map to (execArgv)
}

// execArgv maps an exec'd command to the local program when the container's image has it, as the
// container's own command is mapped (`kubectl exec <agnhost pod> -- /agnhost ...` runs the lab's
// agnhost); any other command runs from the host's file system, which is the container's (sh, nc, curl).
func execArgv(p Programs, image string, argv []string) []string {
	if mapped, err := Argv(p, image, argv, nil); err == nil {
		return mapped
	}
	return argv
}

// exitCode is a finished process's exit code as a shell reports it (128+n for a signal).
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// command builds the process for argv in run's namespaces; cg (may be nil) is the cgroup to start in.
func (x execRunner) command(run ctrRun, argv []string, cg *os.File) (*exec.Cmd, error) {
	spec := run.Exec.Spec
	spec.NetNS, spec.Hostname, spec.MountNS, spec.Mounts = "", "", false, nil // entered by nsenter
	spec.Argv = execArgv(x.Progs, run.Image, argv)
	cmd, err := lab.Command(x.Self, spec, cg)
	if err != nil {
		return nil, err
	}
	cmd.Path = x.NSEnter
	cmd.Args = append([]string{"nsenter", "-t", strconv.Itoa(run.PID), "-n", "-m", "-u", "--"}, cmd.Args...)
	return cmd, nil
}

// exec runs argv in run's container with the streams given (any may be nil), a terminal if tty, and
// returns a utilexec.ExitError for a non-zero exit so remotecommand reports the code to the client.
func (x execRunner) exec(ctx context.Context, run ctrRun, argv []string, in io.Reader, out, errw io.WriteCloser,
	tty bool, resize <-chan remotecommand.TerminalSize) error {
	if run.Exec.Runc != nil {
		return x.attach(ctx, run.Exec.Runc.command(argv, tty), in, out, errw, tty, resize)
	}
	if err := waitExeced(ctx, run.PID, 5*time.Second); err != nil {
		return err
	}
	var cg *os.File
	if run.Exec.Cgroup != "" && run.Exec.Cgroup.Exists() {
		f, err := run.Exec.Cgroup.Open()
		if err == nil {
			defer f.Close()
			cg = f
		}
	}
	cmd, err := x.command(run, argv, cg)
	if err != nil {
		return err
	}
	return x.attach(ctx, cmd, in, out, errw, tty, resize)
}

// attach runs cmd with the session's streams and reports its exit as exec does.
func (x execRunner) attach(ctx context.Context, cmd *exec.Cmd, in io.Reader, out, errw io.WriteCloser,
	tty bool, resize <-chan remotecommand.TerminalSize) error {
	var err error
	var ptmx *os.File
	outDone := make(chan struct{})
	if tty {
		p, t, err := pty.Open()
		if err != nil {
			return fmt.Errorf("allocating a terminal: %w", err)
		}
		ptmx = p
		defer ptmx.Close()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = t, t, t
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 0
		err = cmd.Start()
		t.Close()
		if err != nil {
			return err
		}
		if in != nil {
			go func() { _, _ = io.Copy(ptmx, in) }()
		}
		go func() {
			defer close(outDone)
			if out != nil {
				_, _ = io.Copy(out, ptmx) // ends with EIO once every holder of the terminal is gone
			}
		}()
		if resize != nil { // remotecommand closes it when the session ends; v1/v2 clients have none
			go func() {
				for sz := range resize {
					_ = pty.Setsize(ptmx, &pty.Winsize{Rows: sz.Height, Cols: sz.Width})
				}
			}()
		}
	} else {
		close(outDone)
		if in != nil {
			stdin, err := cmd.StdinPipe()
			if err != nil {
				return err
			}
			go func() {
				_, _ = io.Copy(stdin, in)
				_ = stdin.Close()
			}()
		}
		if out != nil {
			cmd.Stdout = out
		}
		if errw != nil {
			cmd.Stderr = errw
		}
		// a background child that keeps stdout open must not hold the session after the command ends
		cmd.WaitDelay = time.Second
		if err := cmd.Start(); err != nil {
			return err
		}
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done(): // the client went away
			_ = cmd.Process.Kill()
		case <-stop:
		}
	}()
	err = cmd.Wait()
	if tty {
		select { // the terminal's last output; a background child may keep it open
		case <-outDone:
		case <-time.After(time.Second):
		}
	}
	if cmd.ProcessState == nil {
		return err
	}
	if code := exitCode(cmd.ProcessState); code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return err
	}
	return nil
}

// waitExeced waits until a container's process is its program rather than `lab nsinit` still setting up
// its hostname and mounts: a command entering the namespaces before that would see the node's.
func waitExeced(ctx context.Context, pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return fmt.Errorf("container process %d: %w", pid, err)
		}
		if !isNSInit(b) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("container process %d still setting up after %s", pid, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// isNSInit tells whether a /proc/<pid>/cmdline is `<self> lab nsinit`.
func isNSInit(cmdline []byte) bool {
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	return len(args) == 3 && args[1] == "lab" && args[2] == "nsinit"
}

// dialInNetNS connects to port on the loopback of a network namespace, IPv4 first, then IPv6 (an
// IPv6-only pod).
func dialInNetNS(ctx context.Context, netns string, port int32) (net.Conn, error) {
	dial := lab.Dialer(netns)
	p := strconv.Itoa(int(port))
	conn, err := dial(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err == nil {
		return conn, nil
	}
	if conn6, err6 := dial(ctx, "tcp6", net.JoinHostPort("::1", p)); err6 == nil {
		return conn6, nil
	}
	return nil, fmt.Errorf("connecting to port %d in the pod: %w", port, err)
}
