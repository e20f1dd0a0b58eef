package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the kubelet API's pure part: which endpoint a request names, its options, and whether its
// client may call it. kubeletapi.go serves the decisions.

// endpoint is a kubelet API endpoint the agent serves.
type endpoint string

const (
	epHealthz     endpoint = "healthz"
	epPods        endpoint = "pods"
	epLogs        endpoint = "containerLogs"
	epExec        endpoint = "exec"
	epPortForward endpoint = "portForward"
)

// kubeletRequest is one parsed kubelet API request.
type kubeletRequest struct {
	Endpoint  endpoint
	Namespace string
	Pod       string
	UID       string // optional pod UID in exec and portForward paths
	Container string
	Command   []string // exec
	Log       logOptions
}

// errNotFound is a path the agent does not serve (404); errBadRequest wraps a served path's bad input (400).
var (
	errNotFound     = errors.New("not found")
	errBadRequest   = errors.New("bad request")
	errNotSupported = errors.New("not supported by the lab's node agent")
)

// parseKubeletRequest maps method, path and query to an endpoint, as the kubelet's routes do:
//
//	GET  /healthz, /pods
//	GET  /containerLogs/{namespace}/{pod}/{container}?follow&previous&timestamps&tailLines&limitBytes&sinceSeconds&sinceTime&stream
//	GET|POST /exec/{namespace}/{pod}[/{uid}]/{container}?command=...&input=1&output=1&error=1&tty=1
//	GET|POST /portForward/{namespace}/{pod}[/{uid}]
//
// /attach and /run answer errNotSupported; anything else errNotFound.
func parseKubeletRequest(method, path string, q url.Values) (kubeletRequest, error) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for _, p := range parts {
		if p == "" {
			return kubeletRequest{}, errNotFound
		}
	}
	get := method == http.MethodGet || method == http.MethodHead
	getOrPost := get || method == http.MethodPost
	var r kubeletRequest
	switch parts[0] {
	case "healthz":
		if len(parts) != 1 || !get {
			return r, errNotFound
		}
		return kubeletRequest{Endpoint: epHealthz}, nil
	case "pods":
		if len(parts) != 1 || !get {
			return r, errNotFound
		}
		return kubeletRequest{Endpoint: epPods}, nil
	case "containerLogs":
		if len(parts) != 4 || !get {
			return r, errNotFound
		}
		opts, err := parseLogOptions(q)
		if err != nil {
			return r, err
		}
		return kubeletRequest{Endpoint: epLogs, Namespace: parts[1], Pod: parts[2], Container: parts[3], Log: opts}, nil
	case "exec":
		if (len(parts) != 4 && len(parts) != 5) || !getOrPost {
			return r, errNotFound
		}
		r = kubeletRequest{Endpoint: epExec, Namespace: parts[1], Pod: parts[2], Container: parts[len(parts)-1]}
		if len(parts) == 5 {
			r.UID = parts[3]
		}
		r.Command = q["command"]
		if len(r.Command) == 0 {
			return kubeletRequest{}, fmt.Errorf("%w: exec needs at least one command parameter", errBadRequest)
		}
		return r, nil
	case "portForward":
		if (len(parts) != 3 && len(parts) != 4) || !getOrPost {
			return r, errNotFound
		}
		r = kubeletRequest{Endpoint: epPortForward, Namespace: parts[1], Pod: parts[2]}
		if len(parts) == 4 {
			r.UID = parts[3]
		}
		return r, nil
	case "attach", "run":
		return r, fmt.Errorf("/%s: %w", parts[0], errNotSupported)
	}
	return r, errNotFound
}

// logOptions are the containerLogs query parameters (PodLogOptions' wire names).
type logOptions struct {
	Follow     bool
	Previous   bool
	Timestamps bool
	TailLines  *int64    // nil: all lines
	LimitBytes *int64    // nil: no limit
	Since      time.Time // zero: from the start; from sinceSeconds (relative to now) or sinceTime
	SinceSecs  int64     // sinceSeconds as given; Since is resolved by the caller's clock
	Stream     string    // "" or "All", "Stdout", "Stderr"
}

func parseLogOptions(q url.Values) (logOptions, error) {
	var o logOptions
	var err error
	boolean := func(name string) bool {
		v := q.Get(name)
		if v == "" {
			return false
		}
		b, perr := strconv.ParseBool(v)
		if perr != nil && err == nil {
			err = fmt.Errorf("%w: %s=%q is not a boolean", errBadRequest, name, v)
		}
		return b
	}
	integer := func(name string, min int64) *int64 {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < min {
			if err == nil {
				err = fmt.Errorf("%w: %s=%q must be an integer >= %d", errBadRequest, name, v, min)
			}
			return nil
		}
		return &n
	}
	o.Follow, o.Previous, o.Timestamps = boolean("follow"), boolean("previous"), boolean("timestamps")
	o.TailLines = integer("tailLines", 0)
	o.LimitBytes = integer("limitBytes", 1)
	if s := integer("sinceSeconds", 1); s != nil {
		o.SinceSecs = *s
	}
	if v := q.Get("sinceTime"); v != "" {
		t, perr := time.Parse(time.RFC3339, v)
		if perr != nil && err == nil {
			err = fmt.Errorf("%w: sinceTime=%q is not RFC 3339", errBadRequest, v)
		}
		o.Since = t
	}
	if o.SinceSecs > 0 && !o.Since.IsZero() && err == nil {
		err = fmt.Errorf("%w: at most one of sinceSeconds or sinceTime may be specified", errBadRequest)
	}
	switch s := q.Get("stream"); s {
	case "", "All":
	case "Stdout", "Stderr":
		o.Stream = s
	default:
		if err == nil {
			err = fmt.Errorf("%w: stream=%q must be All, Stdout or Stderr", errBadRequest, s)
		}
	}
	if o.Stream != "" && o.TailLines != nil && err == nil {
		err = fmt.Errorf("%w: tailLines cannot be combined with a single stream", errBadRequest)
	}
	return o, err
}

// previousRun is the run whose log previous=true reads, as the kubelet picks the container's
// lastState: while the container waits to restart (CrashLoopBackOff) that is the latest run, which just
// ended; otherwise the run before the latest. ok is false when there is none.
func previousRun(latest int, backingOff bool) (run int, ok bool) {
	switch {
	case backingOff:
		return latest, true
	case latest > 0:
		return latest - 1, true
	}
	return 0, false
}

// clientDecision says why a client may or may not call the kubelet API.
type clientDecision string

const (
	clientAllowed         clientDecision = "allowed"
	clientUnauthenticated clientDecision = "no client certificate from the lab's CA"
	clientForbidden       clientDecision = "not in group system:masters nor the apiserver's kubelet client"
)

// authorizeClient decides on the verified client chain (TLS verified it against the lab CA, so an empty
// chain means no acceptable certificate): the apiserver's kubelet client (apiserverUser, the common name
// of its certificate) and system:masters may call every endpoint, as kubeadm's
// kube-apiserver-kubelet-client and the kubelet-api-admin role may.
func authorizeClient(verified [][]*x509.Certificate, apiserverUser string) (user string, d clientDecision) {
	if len(verified) == 0 || len(verified[0]) == 0 {
		return "", clientUnauthenticated
	}
	subj := verified[0][0].Subject
	if subj.CommonName == apiserverUser || slices.Contains(subj.Organization, "system:masters") {
		return subj.CommonName, clientAllowed
	}
	return subj.CommonName, clientForbidden
}
