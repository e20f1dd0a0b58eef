package agent

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// Container logs are kept as the CRI runtimes keep them (containerd, CRI-O) and the kubelet reads them:
// one file per container run, one entry per line,
//
//	2026-11-26T18:17:09.669794202Z stdout F a full line
//	2026-11-26T18:17:09.669794202Z stderr P the first part of a long line...
//
// F ends a line (its newline is not stored), P is a part of one (a line longer than maxLogLine, or the
// output's last bytes without a newline). This file is the pure part: format, parse, split, select.

// maxLogLine is the longest entry; longer lines are split into P entries (containerd uses 16 KiB).
const maxLogLine = 16 * 1024

// logEntry is one entry of a container log file.
type logEntry struct {
	Time    time.Time
	Stream  string // "stdout" or "stderr"
	Partial bool
	Content []byte
}

var errBadLogLine = errors.New("malformed log line")

// marshalEntry renders e as one line of the log file, newline included.
func marshalEntry(e logEntry) []byte {
	tag := "F"
	if e.Partial {
		tag = "P"
	}
	b := make([]byte, 0, 40+len(e.Content))
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, ' ')
	b = append(b, e.Stream...)
	b = append(b, ' ')
	b = append(b, tag...)
	b = append(b, ' ')
	b = append(b, e.Content...)
	return append(b, '\n')
}

// parseEntry reads one line of the log file (without its newline).
func parseEntry(line []byte) (logEntry, error) {
	f := bytes.SplitN(line, []byte{' '}, 4)
	if len(f) < 3 {
		return logEntry{}, fmt.Errorf("%w: %q", errBadLogLine, line)
	}
	t, err := time.Parse(time.RFC3339Nano, string(f[0]))
	if err != nil {
		return logEntry{}, fmt.Errorf("%w: timestamp: %v", errBadLogLine, err)
	}
	e := logEntry{Time: t, Stream: string(f[1])}
	if e.Stream != "stdout" && e.Stream != "stderr" {
		return logEntry{}, fmt.Errorf("%w: stream %q", errBadLogLine, f[1])
	}
	switch string(f[2]) {
	case "F":
	case "P":
		e.Partial = true
	default:
		return logEntry{}, fmt.Errorf("%w: tag %q", errBadLogLine, f[2])
	}
	if len(f) == 4 {
		e.Content = f[3]
	}
	return e, nil
}

// splitOutput cuts a stream's pending bytes into entries' contents: each line up to its newline (not
// included) is a full entry; a run of maxLogLine bytes without one is a partial entry. What is left is
// returned as rest for the next read, unless eof, when it becomes a last partial entry.
func splitOutput(buf []byte, eof bool) (lines [][]byte, partial []bool, rest []byte) {
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		switch {
		case i >= 0 && i <= maxLogLine:
			lines, partial = append(lines, buf[:i]), append(partial, false)
			buf = buf[i+1:]
		case len(buf) >= maxLogLine:
			lines, partial = append(lines, buf[:maxLogLine]), append(partial, true)
			buf = buf[maxLogLine:]
		case eof:
			lines, partial = append(lines, buf), append(partial, true)
			buf = nil
		default:
			return lines, partial, buf
		}
	}
	return lines, partial, nil
}

// renderEntry is what containerLogs sends for one entry: the content, a newline if the entry ends a
// line, and with timestamps the entry's time (RFC 3339, nanoseconds) and a space before it.
func renderEntry(e logEntry, timestamps bool) []byte {
	var b []byte
	if timestamps {
		b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, ' ')
	}
	b = append(b, e.Content...)
	if !e.Partial {
		b = append(b, '\n')
	}
	return b
}

// logSelection applies the options that pick entries, as the kubelet's ReadLogs does: tailLines counts
// back from the end of the file first; then entries before since and entries of the other stream are
// skipped. limitBytes is applied by the writer (limitedWriter), over the whole response.
type logSelection struct {
	TailLines *int64
	Since     time.Time
	Stream    string // "", "Stdout" or "Stderr"
}

// tailStart returns the index of the first of the last n lines of data (a file of log entries); nil n
// selects all.
func tailStart(data []byte, n *int64) int {
	if n == nil {
		return 0
	}
	if *n == 0 {
		return len(data)
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	count := int64(0)
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			count++
			if count == *n {
				return i + 1
			}
		}
	}
	return 0
}

// keep says whether an entry passes the since and stream filters.
func (s logSelection) keep(e logEntry) bool {
	if !s.Since.IsZero() && e.Time.Before(s.Since) {
		return false
	}
	switch s.Stream {
	case "Stdout":
		return e.Stream == "stdout"
	case "Stderr":
		return e.Stream == "stderr"
	}
	return true
}

// renderLog turns a whole log file into the response body for sel and timestamps; it also returns how
// many bytes of data it consumed (complete lines only), from where a follower continues. Malformed lines
// are skipped.
func renderLog(data []byte, sel logSelection, timestamps bool) (out []byte, consumed int) {
	start := tailStart(data, sel.TailLines)
	consumed = start
	for consumed < len(data) {
		i := bytes.IndexByte(data[consumed:], '\n')
		if i < 0 {
			break // an entry still being written
		}
		line := data[consumed : consumed+i]
		consumed += i + 1
		e, err := parseEntry(line)
		if err != nil || !sel.keep(e) {
			continue
		}
		out = append(out, renderEntry(e, timestamps)...)
	}
	return out, consumed
}

// limitedWriter passes on at most n bytes and then reports errLimitReached.
type limitedWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64 // bytes left; < 0 means unlimited
}

var errLimitReached = errors.New("limitBytes reached")

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n < 0 {
		return l.w.Write(p)
	}
	if l.n == 0 {
		return 0, errLimitReached
	}
	short := false
	if int64(len(p)) > l.n {
		p, short = p[:l.n], true
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	if err == nil && short {
		err = errLimitReached
	}
	return n, err
}
