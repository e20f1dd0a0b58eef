package benchplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	update = flag.Bool("update", false, "rewrite the golden SVGs in testdata")
	pngDir = flag.String("png", "", "also write each picture as PNG into this directory, to look at")
)

func msList(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

// The fixtures are made-up numbers shaped like docs/benchmarks.md's runs; they are not measurements.
func fixtureDistribution() Distribution {
	return Distribution{
		Title:  "Failover on a power cut, 20 trials each (fixture data)",
		XLabel: "time from the power cut",
		Series: []Series{
			{Name: "ironlb: cut -> new node answers ARP", Style: Style{Color: 0}, Values: msList(28, 27, 31, 26, 29, 35, 28, 30, 25, 28, 32, 27, 29, 28, 33, 26, 30, 28, 27, 31)},
			{Name: "ironlb: longest HTTP gap", Style: Style{Color: 0, Dashed: true}, Values: msList(43, 41, 60, 40, 44, 63, 42, 59, 40, 43, 60, 41, 44, 43, 61, 40, 58, 43, 41, 60)},
			{Name: "MetalLB tuned: cut -> new node answers ARP", Style: Style{Color: 1}, Values: msList(131, 120, 197, 110, 140, 237, 125, 150, 118, 133, 190, 128, 139, 131, 170, 115, 160, 129, 122, 180)},
			{Name: "MetalLB default: cut -> new node answers ARP", Style: Style{Color: 2}, Values: msList(5607, 5400, 6364, 5200, 5700, 6959, 5550, 5900, 5300, 5620, 6200, 5480, 5690, 5610, 6100, 5250, 6000, 5590, 5500, -1)},
		},
	}
}

func fixtureTimeline() Timeline {
	t := Timeline{
		Title:   "ironlb: one power cut of myk8s-worker3 seen from mypc (fixture data)",
		From:    -200 * time.Millisecond,
		To:      400 * time.Millisecond,
		Senders: []string{"myk8s-worker3", "myk8s-worker"},
		Marks:   []Mark{{At: 0, Label: "power cut"}},
	}
	for at := -300 * time.Millisecond; at < 600*time.Millisecond; at += 20 * time.Millisecond {
		switch {
		case at < 0:
			t.ARP = append(t.ARP, ARPPacket{At: at + time.Millisecond, Sender: "myk8s-worker3"})
		case at >= 40*time.Millisecond:
			t.ARP = append(t.ARP, ARPPacket{At: at + time.Millisecond, Sender: "myk8s-worker"})
		}
		req := Request{Start: at, End: at + 3*time.Millisecond, OK: true}
		if at >= -10*time.Millisecond && at < 40*time.Millisecond {
			req = Request{Start: at, End: at + 250*time.Millisecond}
		}
		t.HTTP = append(t.HTTP, req)
	}
	t.ARP = append(t.ARP, ARPPacket{At: 29 * time.Millisecond, Sender: "myk8s-worker", Gratuitous: true},
		ARPPacket{At: 30 * time.Millisecond, Sender: "myk8s-worker", Gratuitous: true})
	return t
}

func fixtureScaling() Scaling {
	return Scaling{
		Title:  "Full sync against the number of Services (fixture data)",
		XLabel: "Services (2 endpoints each)",
		YLabel: "time",
		Curves: []Curve{
			{Name: "kube-proxy nftables: start -> rules in the kernel", Style: Style{Color: 1}, Points: []Point{
				{N: 1000, Values: msList(782, 1080, 900)}, {N: 10000, Values: msList(34500, 49100, 40000)}, {N: 30000, Values: msList(239200)}}},
			{Name: "ironlb: start -> rules in the kernel", Style: Style{Color: 0}, Points: []Point{
				{N: 1000, Values: msList(323, 381, 350)}, {N: 10000, Values: msList(2100, 3060, 2500)}, {N: 30000, Values: msList(10100)}}},
			{Name: "kube-proxy nftables: own full-sync metric", Style: Style{Color: 1, Dashed: true}, Points: []Point{
				{N: 1000, Values: msList(246, 372, 300)}, {N: 10000, Values: msList(33000, 46900, 40000)}}},
			{Name: "ironlb: own full-sync metric", Style: Style{Color: 0, Dashed: true}, Points: []Point{
				{N: 1000, Values: msList(82, 134, 100)}, {N: 10000, Values: msList(860, 1240, 900)}, {N: 30000, Values: nil}}},
		},
	}
}

type builder interface {
	SVG() ([]byte, error)
	build() (*plot.Plot, plot.Legend, int, error)
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     builder
		names []string // text each picture must show
	}{
		{"distribution", fixtureDistribution(), []string{"ironlb: cut -&gt; new node answers ARP (20)", "MetalLB tuned", "MetalLB default: cut -&gt; new node answers ARP (19; 1 never)", "fraction of trials"}},
		{"timeline", fixtureTimeline(), []string{"ARP from myk8s-worker3", "ARP from myk8s-worker", "HTTP requests", "power cut", "gratuitous ARP", "HTTP request that failed (2)"}},
		{"scaling", fixtureScaling(), []string{"kube-proxy nftables: start -&gt; rules in the kernel", "ironlb: own full-sync metric", "10k", "30k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.b.SVG()
			if err != nil {
				t.Fatal(err)
			}
			again, err := tc.b.SVG()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, again) {
				t.Fatal("two renderings of the same data differ")
			}
			checkSVG(t, got, tc.names)
			golden := filepath.Join("testdata", tc.name+".svg")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the rendering (%d bytes, want %d); look, then run with -update", golden, len(got), len(want))
			}
			if *pngDir != "" {
				p, leg, n, err := tc.b.build()
				if err != nil {
					t.Fatal(err)
				}
				b, err := renderAs(p, leg, n, func(w, h vg.Length) vg.CanvasWriterTo {
					return vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))}
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(*pngDir, tc.name+".png"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// checkSVG parses the picture as XML, checks its root is an svg element, and finds each name in its
// text (names as they are escaped in XML).
func checkSVG(t *testing.T, b []byte, names []string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	for _, n := range names {
		if !bytes.Contains(b, []byte(n)) {
			t.Errorf("no %q in the picture", n)
		}
	}
}

func TestNoData(t *testing.T) {
	for name, b := range map[string]builder{
		"distribution": Distribution{Series: []Series{{Name: "x", Values: msList(-1)}}},
		"timeline":     Timeline{From: 0, To: time.Second, ARP: []ARPPacket{{At: 2 * time.Second, Sender: "a"}}},
		"window":       Timeline{From: time.Second, To: 0},
		"scaling":      Scaling{Curves: []Curve{{Name: "x", Points: []Point{{N: 10}}}}},
	} {
		if _, err := b.SVG(); !errors.Is(err, ErrNoData) {
			t.Errorf("%s: err %v, want ErrNoData", name, err)
		}
	}
}

func TestFormat(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 20: "20 ms", 1000: "1 s", 1500: "1.5 s", 0.5: "0.5 ms"} {
		if got := FormatMS(in); got != want {
			t.Errorf("FormatMS(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int]string{1000: "1k", 30000: "30k", 1500: "1,500", 100: "100", 1234567: "1,234,567"} {
		if got := formatCount(in); got != want {
			t.Errorf("formatCount(%d) = %q, want %q", in, got, want)
		}
	}
	if got := Quantile(msList(1, 2, 3), 0.99); got != 3*time.Millisecond {
		t.Errorf("p99 of 3 = %s, want the largest", got)
	}
	if strings.Contains(FormatMS(200), "e") {
		t.Error("exponent in a label")
	}
}
