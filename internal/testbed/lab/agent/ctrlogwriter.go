package agent

import (
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ctrLogWriter records one container run's stdout and stderr: CRI entries (ctrlog.go) in the run's own
// file, for containerLogs, and the raw bytes appended to the container's combined log that the lab has
// always kept (logs/<node>/pods/<ns>_<pod>_<container>.log, read by tests and people).
type ctrLogWriter struct {
	now  func() time.Time
	done chan struct{} // closed once both streams reached EOF and the files are closed

	mu   sync.Mutex // guards writes to the files
	file *os.File
	raw  *os.File
}

// openCtrLog creates run's log file in dir (removing the run before the previous one: the kubelet
// keeps the current and the previous run) and returns the write ends to give the process as stdout and
// stderr; the caller closes them once the process started.
func openCtrLog(dir string, run int, rawPath string, now func() time.Time) (w *ctrLogWriter, stdout, stderr *os.File, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, nil, err
	}
	if run >= 2 {
		_ = os.Remove(logPath(dir, run-2))
	}
	f, err := os.OpenFile(logPath(dir, run), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, nil, err
	}
	w = &ctrLogWriter{now: now, done: make(chan struct{}), file: f}
	if rawPath != "" {
		if err := os.MkdirAll(filepath.Dir(rawPath), 0o755); err == nil {
			w.raw, _ = os.OpenFile(rawPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		w.close()
		return nil, nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		w.close()
		return nil, nil, nil, err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.copy(outR, "stdout") }()
	go func() { defer wg.Done(); w.copy(errR, "stderr") }()
	go func() { wg.Wait(); w.close(); close(w.done) }()
	return w, outW, errW, nil
}

func (w *ctrLogWriter) close() {
	w.file.Close()
	if w.raw != nil {
		w.raw.Close()
	}
}

// copy reads one stream until every writer closed it, writing each line as it completes.
func (w *ctrLogWriter) copy(r *os.File, stream string) {
	defer r.Close()
	buf := make([]byte, 32*1024)
	var pending []byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w.mu.Lock()
			if w.raw != nil {
				_, _ = w.raw.Write(buf[:n])
			}
			w.mu.Unlock()
			pending = append(pending, buf[:n]...)
		}
		eof := err != nil
		lines, partial, rest := splitOutput(pending, eof)
		if len(lines) > 0 {
			now := w.now()
			var out []byte
			for i, l := range lines {
				out = append(out, marshalEntry(logEntry{Time: now, Stream: stream, Partial: partial[i], Content: l})...)
			}
			w.mu.Lock()
			_, _ = w.file.Write(out)
			w.mu.Unlock()
		}
		pending = append(pending[:0], rest...)
		if eof { // EOF, or a read error: either way the stream is over
			return
		}
	}
}
