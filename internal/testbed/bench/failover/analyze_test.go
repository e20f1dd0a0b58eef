package failover

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestAnalyze(t *testing.T) {
	ms := func(n int) int64 { return time.Unix(100, 0).Add(time.Duration(n) * time.Millisecond).UnixNano() }
	line := func(format string, args ...any) string { return strings.TrimSpace(sprintf(format, args...)) + "\n" }
	var log strings.Builder
	old, nw := "02:42:ac:12:00:05", "02:42:ac:12:00:02"
	// Before the cut (at 1000 ms): answers from the old MAC and good requests every 20 ms.
	for i := 0; i < 1000; i += 20 {
		log.WriteString(line("arp %d reply %s", ms(i), old))
		log.WriteString(line("http %d %d ok", ms(i), ms(i+2)))
	}
	// The cut: requests started 1000..1040 fail; gratuitous ARP from the new MAC at 1035.
	for i := 1005; i < 1040; i += 20 {
		log.WriteString(line("http %d %d fail", ms(i), ms(i+250)))
	}
	log.WriteString(line("arp %d garp %s", ms(1035), nw))
	for i := 1040; i < 3000; i += 20 {
		log.WriteString(line("arp %d reply %s", ms(i), nw))
		log.WriteString(line("http %d %d ok", ms(i), ms(i+2)))
	}
	// The return at 3000: the old MAC takes the address back at 3500, no gap.
	for i := 3000; i < 4600; i += 20 {
		mac := nw
		if i >= 3500 {
			mac = old
		}
		log.WriteString(line("arp %d reply %s", ms(i), mac))
		log.WriteString(line("http %d %d ok", ms(i), ms(i+2)))
	}
	ev, err := Parse(strings.NewReader(log.String()))
	if err != nil {
		t.Fatal(err)
	}
	got := Analyze(ev, time.Unix(0, ms(1000)), time.Unix(0, ms(3000)), time.Unix(0, ms(4600)), old)
	want := Trial{ARP: 35 * time.Millisecond, GARP: 35 * time.Millisecond, HTTPGap: 60 * time.Millisecond, HTTPFailed: 2,
		BackGap: 20 * time.Millisecond, BackARPGap: 20 * time.Millisecond, TakeBack: 500 * time.Millisecond, Answerers: 1}
	if got != want {
		t.Fatalf("Analyze:\n got %+v\nwant %+v", got, want)
	}
	if _, err := Parse(strings.NewReader("arp x reply 1\n")); err == nil {
		t.Fatal("malformed line accepted")
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 20; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	ds = append(ds, -1) // a trial without the event is left out
	s := Summarize(ds)
	if s.N != 20 || s.Median != 10*time.Millisecond || s.P90 != 18*time.Millisecond || s.P99 != 20*time.Millisecond || s.Max != 20*time.Millisecond {
		t.Fatalf("Summarize = %+v", s)
	}
	if (Summarize(nil) != Stats{}) {
		t.Fatal("empty input")
	}
}

func sprintf(format string, args ...any) string { return fmtSprintf(format, args...) }

var fmtSprintf = fmt.Sprintf

// An outage still running when probing stops is counted up to the last event.
func TestAnalyzeTrailingOutage(t *testing.T) {
	at := func(n int) int64 { return time.Unix(100, 0).Add(time.Duration(n) * time.Millisecond).UnixNano() }
	log := fmt.Sprintf("arp %d reply a\nhttp %d %d ok\narp %d reply b\nhttp %d %d ok\nhttp %d %d fail\nhttp %d %d fail\n",
		at(0), at(0), at(1), at(1100), at(1100), at(1101), at(1500), at(1750), at(3000), at(3250))
	ev, err := Parse(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	got := Analyze(ev, time.Unix(0, at(500)), time.Unix(0, at(1000)), time.Unix(0, at(3000)), "a")
	if got.BackGap != 1900*time.Millisecond || got.BackARPGap != 1900*time.Millisecond || got.Answerers != 0 || got.BackFailed != 2 {
		t.Fatalf("trailing outage: %+v", got)
	}
}

// A request line may carry the probe's detail (the answering host or why it failed); older logs
// have none; other kinds of line take no fifth field.
func TestParseDetail(t *testing.T) {
	ev, err := Parse(strings.NewReader("http 1 2 ok webpod1\nhttp 3 4 fail timeout\nhttp 5 6 ok\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 3 || ev[0].Detail != "webpod1" || !ev[0].OK || ev[1].Detail != "timeout" || ev[1].OK || ev[2].Detail != "" {
		t.Fatalf("parsed %+v", ev)
	}
	if _, err := Parse(strings.NewReader("arp 1 reply aa:bb extra\n")); err == nil {
		t.Fatal("an ARP line with five fields was accepted")
	}
}
