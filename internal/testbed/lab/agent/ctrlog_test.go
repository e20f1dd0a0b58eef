package agent

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

var logT0 = time.Date(2026, 11, 26, 18, 0, 0, 123456789, time.UTC)

func TestLogEntryRoundTrip(t *testing.T) {
	for _, e := range []logEntry{
		{Time: logT0, Stream: "stdout", Content: []byte("hello world")},
		{Time: logT0, Stream: "stderr", Partial: true, Content: []byte("a part ")},
		{Time: logT0, Stream: "stdout", Content: []byte{}},
		{Time: logT0, Stream: "stdout", Content: []byte("  spaces  kept ")},
	} {
		line := marshalEntry(e)
		if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
			t.Fatalf("marshalEntry(%+v) = %q: want one line", e, line)
		}
		got, err := parseEntry(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			t.Fatalf("parseEntry(%q): %v", line, err)
		}
		if !got.Time.Equal(e.Time) || got.Stream != e.Stream || got.Partial != e.Partial || !bytes.Equal(got.Content, e.Content) {
			t.Errorf("round trip of %+v = %+v", e, got)
		}
	}
	if got := string(marshalEntry(logEntry{Time: logT0, Stream: "stdout", Content: []byte("x")})); got != "2026-11-26T18:00:00.123456789Z stdout F x\n" {
		t.Errorf("CRI line = %q", got)
	}
}

func TestParseEntryRejects(t *testing.T) {
	for _, line := range []string{"", "nonsense", "2026-11-26T18:00:00Z stdout", "yesterday stdout F x",
		"2026-11-26T18:00:00Z stdin F x", "2026-11-26T18:00:00Z stdout X x"} {
		if _, err := parseEntry([]byte(line)); !errors.Is(err, errBadLogLine) {
			t.Errorf("parseEntry(%q) err = %v, want errBadLogLine", line, err)
		}
	}
}

func FuzzParseEntry(f *testing.F) {
	f.Add([]byte("2026-11-26T18:00:00.1Z stdout F hello"))
	f.Add([]byte("2026-11-26T18:00:00Z stderr P "))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := parseEntry(line)
		if err != nil {
			return
		}
		again, err := parseEntry(bytes.TrimSuffix(marshalEntry(e), []byte("\n")))
		if err != nil || !bytes.Equal(again.Content, e.Content) || again.Partial != e.Partial || again.Stream != e.Stream {
			t.Errorf("%q parsed to %+v; its rendering parses to %+v, %v", line, e, again, err)
		}
	})
}

func TestSplitOutput(t *testing.T) {
	long := strings.Repeat("x", maxLogLine)
	type out struct {
		Lines   []string
		Partial []bool
		Rest    string
	}
	for _, tt := range []struct {
		name string
		in   string
		eof  bool
		want out
	}{
		{"nothing", "", false, out{}},
		{"two lines", "a\nb\n", false, out{[]string{"a", "b"}, []bool{false, false}, ""}},
		{"line and a half", "a\nbc", false, out{[]string{"a"}, []bool{false}, "bc"}},
		{"half at EOF is partial", "a\nbc", true, out{[]string{"a", "bc"}, []bool{false, true}, ""}},
		{"empty line", "\n", false, out{[]string{""}, []bool{false}, ""}},
		{"a line of exactly the limit", long + "\n", false, out{[]string{long}, []bool{false}, ""}},
		{"longer than the limit is split", long + "yz\n", false, out{[]string{long, "yz"}, []bool{true, false}, ""}},
		{"the limit without newline is partial", long + "y", false, out{[]string{long}, []bool{true}, "y"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lines, partial, rest := splitOutput([]byte(tt.in), tt.eof)
			got := out{Partial: partial, Rest: string(rest)}
			for _, l := range lines {
				got.Lines = append(got.Lines, string(l))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// testLog is a log file: stdout lines one..five a second apart, stderr "oops" between two and three, a
// partial stdout entry completed by the next.
func testLog() []byte {
	var b []byte
	add := func(sec int, stream string, partial bool, s string) {
		b = append(b, marshalEntry(logEntry{Time: logT0.Add(time.Duration(sec) * time.Second), Stream: stream, Partial: partial, Content: []byte(s)})...)
	}
	add(0, "stdout", false, "one")
	add(1, "stdout", false, "two")
	add(1, "stderr", false, "oops")
	add(2, "stdout", false, "three")
	add(3, "stdout", true, "fo")
	add(3, "stdout", false, "ur")
	add(4, "stdout", false, "five")
	return b
}

func TestRenderLog(t *testing.T) {
	data := testLog()
	for _, tt := range []struct {
		name       string
		sel        logSelection
		timestamps bool
		want       string
	}{
		{name: "everything", want: "one\ntwo\noops\nthree\nfour\nfive\n"},
		{name: "tail 2 counts entries", sel: logSelection{TailLines: ptr.To[int64](2)}, want: "ur\nfive\n"},
		{name: "tail 3", sel: logSelection{TailLines: ptr.To[int64](3)}, want: "four\nfive\n"},
		{name: "tail 0", sel: logSelection{TailLines: ptr.To[int64](0)}, want: ""},
		{name: "tail more than there is", sel: logSelection{TailLines: ptr.To[int64](100)}, want: "one\ntwo\noops\nthree\nfour\nfive\n"},
		{name: "since", sel: logSelection{Since: logT0.Add(2 * time.Second)}, want: "three\nfour\nfive\n"},
		{name: "since between entries", sel: logSelection{Since: logT0.Add(1500 * time.Millisecond)}, want: "three\nfour\nfive\n"},
		{name: "since the future", sel: logSelection{Since: logT0.Add(time.Hour)}, want: ""},
		{name: "tail then since", sel: logSelection{TailLines: ptr.To[int64](4), Since: logT0.Add(3 * time.Second)}, want: "four\nfive\n"},
		{name: "stderr only", sel: logSelection{Stream: "Stderr"}, want: "oops\n"},
		{name: "stdout only", sel: logSelection{Stream: "Stdout"}, want: "one\ntwo\nthree\nfour\nfive\n"},
		{name: "timestamps", sel: logSelection{TailLines: ptr.To[int64](1)}, timestamps: true, want: "2026-11-26T18:00:04.123456789Z five\n"},
		{name: "timestamps on each part", sel: logSelection{TailLines: ptr.To[int64](3)}, timestamps: true,
			want: "2026-11-26T18:00:03.123456789Z fo2026-11-26T18:00:03.123456789Z ur\n2026-11-26T18:00:04.123456789Z five\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, consumed := renderLog(data, tt.sel, tt.timestamps)
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			if consumed != len(data) {
				t.Errorf("consumed %d of %d bytes", consumed, len(data))
			}
		})
	}
}

func TestRenderLogStopsAtAnUnfinishedLine(t *testing.T) {
	data := append(testLog(), "2026-11-26T18:00:05Z stdout F six"...) // being written
	got, consumed := renderLog(data, logSelection{TailLines: ptr.To[int64](1)}, false)
	if string(got) != "" || consumed != len(testLog()) {
		t.Errorf("tail 1 of a file ending in half a line = %q, consumed %d; want nothing, consumed %d", got, consumed, len(testLog()))
	}
	got, _ = renderLog(append(data, '\n'), logSelection{TailLines: ptr.To[int64](1)}, false)
	if string(got) != "six\n" {
		t.Errorf("tail 1 after the line completed = %q", got)
	}
}

func TestRenderLogSkipsMalformedLines(t *testing.T) {
	data := append([]byte("garbage\n"), testLog()...)
	got, _ := renderLog(data, logSelection{Stream: "Stderr"}, false)
	if string(got) != "oops\n" {
		t.Errorf("got %q", got)
	}
}

func TestLimitedWriter(t *testing.T) {
	for _, tt := range []struct {
		name   string
		limit  int64
		writes []string
		want   string
		err    bool
	}{
		{"unlimited", -1, []string{"abc", "def"}, "abcdef", false},
		{"within", 10, []string{"abc", "def"}, "abcdef", false},
		{"exact", 6, []string{"abc", "def"}, "abcdef", false},
		{"cut inside a write", 4, []string{"abc", "def"}, "abcd", true},
		{"nothing after the limit", 3, []string{"abc", "def"}, "abc", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			lw := &limitedWriter{w: &b, n: tt.limit}
			var err error
			for _, s := range tt.writes {
				if _, err = lw.Write([]byte(s)); err != nil {
					break
				}
			}
			if b.String() != tt.want || (err != nil) != tt.err {
				t.Errorf("wrote %q, err %v; want %q, error %v", b.String(), err, tt.want, tt.err)
			}
			if err != nil && !errors.Is(err, errLimitReached) {
				t.Errorf("err = %v, want errLimitReached", err)
			}
		})
	}
}
