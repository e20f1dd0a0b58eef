package agent

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// planCtr is what the container planner knows of one container, in plain data.
type planCtr struct {
	Name       string
	Init       bool
	Sidecar    bool // an init container with restartPolicy Always (KEP-753)
	Running    bool
	Started    bool // its startup probe passed (or it has none)
	Terminated bool // its last run ended (also while it runs again: then Running is set too)
	ExitCode   int32
	Restarts   int32
	NextStart  time.Time // when the back-off of an exited container ends; zero: no back-off yet
}

type actionKind int

const (
	actStart   actionKind = iota // start the container (Restart: it ran before; count a restart)
	actBackOff                   // wait Delay before restarting it (CrashLoopBackOff)
	actStop                      // stop a sidecar: the Pod's regular containers are done
)

type ctrAction struct {
	Kind    actionKind
	Name    string
	Restart bool
	Delay   time.Duration
}

// containerPlan is what reconcileContainers does next.
type containerPlan struct {
	Actions  []ctrAction
	InitDone bool // the Pod is initialized (stays so once it is)
}

// IsSidecar reports whether an init container is a sidecar: restartPolicy Always (KEP-753).
func IsSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// backOff is the kubelet's restart back-off: 10 s, doubled per restart, at most 5 minutes.
func backOff(restarts int32) time.Duration {
	return min(10*time.Second<<min(restarts, 5), 5*time.Minute)
}

// restartAction is the next step for an exited container that is to restart: back off first, then start
// once the back-off has passed; nil while it waits.
func restartAction(c planCtr, now time.Time) *ctrAction {
	switch {
	case c.NextStart.IsZero():
		return &ctrAction{Kind: actBackOff, Name: c.Name, Delay: backOff(c.Restarts)}
	case now.Before(c.NextStart):
		return nil
	default:
		return &ctrAction{Kind: actStart, Name: c.Name, Restart: true}
	}
}

// regularRestarts says whether a regular container that exited with code is restarted under policy.
func regularRestarts(policy corev1.RestartPolicy, code int32) bool {
	return policy == corev1.RestartPolicyAlways || policy == corev1.RestartPolicyOnFailure && code != 0
}

// planContainers decides, as the kubelet does, what to start, restart or stop in a Pod whose containers
// are ctrs (init containers first, in the Pod's order). Until the Pod is initialized, init containers
// start one at a time in order: a regular one must exit 0 before the next starts (a failed one is
// restarted with back-off, or under restartPolicy Never fails the Pod); a sidecar (restartPolicy Always)
// must be running and started (its startup probe passed, or it has none), and it keeps running. Once
// every regular init container has completed and every sidecar has started, the Pod is initialized and
// the regular containers start. A sidecar that exits is restarted with back-off whatever the Pod's
// restartPolicy, before and after initialization; once every regular container has exited for good,
// the running sidecars are stopped and none restarts.
func planContainers(policy corev1.RestartPolicy, initDone bool, ctrs []planCtr, now time.Time) containerPlan {
	p := containerPlan{InitDone: initDone}
	add := func(a *ctrAction) {
		if a != nil {
			p.Actions = append(p.Actions, *a)
		}
	}
	if !initDone {
		for _, c := range ctrs {
			if !c.Init {
				continue
			}
			switch {
			case c.Running:
				if c.Sidecar && c.Started {
					continue // started: the next init container may start
				}
				return p // wait for it to exit (regular) or to start (sidecar)
			case c.Terminated && !c.Sidecar && c.ExitCode == 0:
				continue // completed
			case c.Terminated && !c.Sidecar && policy == corev1.RestartPolicyNever:
				return p // failed: the Pod fails
			case c.Terminated:
				add(restartAction(c, now))
				return p
			default: // never ran, or its start failed
				add(&ctrAction{Kind: actStart, Name: c.Name})
				return p
			}
		}
		p.InitDone = true
	}
	regular, done := 0, true // done: every regular container has exited and none will restart
	for _, c := range ctrs {
		if c.Init {
			continue
		}
		regular++
		if c.Running || !c.Terminated || regularRestarts(policy, c.ExitCode) {
			done = false
		}
	}
	done = done && regular > 0
	for _, c := range ctrs {
		switch {
		case c.Init && !c.Sidecar:
			// completed before the Pod was initialized
		case c.Sidecar && done:
			if c.Running {
				add(&ctrAction{Kind: actStop, Name: c.Name})
			}
		case c.Running:
		case c.Terminated && (c.Sidecar || regularRestarts(policy, c.ExitCode)):
			add(restartAction(c, now))
		case c.Terminated:
			// exited for good
		default:
			add(&ctrAction{Kind: actStart, Name: c.Name})
		}
	}
	return p
}

// stopOrder splits a terminating Pod's running containers (ctrs in the Pod's order) into those stopped
// first (the regular containers, and a regular init container still running) and the sidecars, stopped
// once those have exited, the last declared first, as the kubelet stops them (KEP-753).
func stopOrder(ctrs []planCtr) (first, sidecars []string) {
	for _, c := range ctrs {
		if !c.Running {
			continue
		}
		if c.Sidecar {
			sidecars = append([]string{c.Name}, sidecars...)
		} else {
			first = append(first, c.Name)
		}
	}
	return first, sidecars
}
