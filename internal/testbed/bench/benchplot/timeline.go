package benchplot

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ARPPacket is one ARP packet for the address the client saw: an answer to its who-has, or a
// gratuitous ARP. At is relative to the timeline's zero (the power cut).
type ARPPacket struct {
	At         time.Duration
	Sender     string // the row it is drawn on: a node's name, or its MAC
	Gratuitous bool
}

// Request is one HTTP request of the client, from its start to its end (its answer, its error or its
// timeout), relative to the timeline's zero.
type Request struct {
	Start, End time.Duration
	OK         bool
}

// Mark is a labelled instant, drawn as a vertical line: the power cut, the power's return.
type Mark struct {
	At    time.Duration
	Label string
}

// Timeline draws what the client saw around one failover, between From and To: one row per ARP
// sender with a dot for each answer and a triangle for each gratuitous ARP, and a row for HTTP
// requests, each a tick at its start and a bar to its end, green when it succeeded and red when it
// failed. Events outside [From, To] are left out.
type Timeline struct {
	Title    string
	From, To time.Duration
	Senders  []string // the ARP rows, top to bottom; senders not listed follow in order of appearance
	ARP      []ARPPacket
	HTTP     []Request
	Marks    []Mark
}

// SVG renders the timeline; ErrNoData if nothing falls in the window.
func (t Timeline) SVG() ([]byte, error) {
	p, leg, n, err := t.build()
	if err != nil {
		return nil, err
	}
	return render(p, leg, n)
}

func (t Timeline) build() (*plot.Plot, plot.Legend, int, error) {
	if t.To <= t.From {
		return nil, plot.Legend{}, 0, fmt.Errorf("timeline window %s..%s: %w", t.From, t.To, ErrNoData)
	}
	in := func(d time.Duration) bool { return d >= t.From && d <= t.To }
	senders := append([]string(nil), t.Senders...)
	row := map[string]int{}
	for _, s := range senders {
		row[s] = len(row)
	}
	for _, a := range t.ARP {
		if _, ok := row[a.Sender]; !ok && in(a.At) {
			row[a.Sender] = len(row)
			senders = append(senders, a.Sender)
		}
	}
	// Rows from the top: the senders, then HTTP. y = number of rows - 1 - index.
	nrows := len(senders) + 1
	y := func(i int) float64 { return float64(nrows - 1 - i) }
	httpY := y(len(senders))

	p := newPlot(t.Title)
	p.X.Label.Text = "time since the power cut"
	p.X.Min, p.X.Max = ms(t.From), ms(t.To)
	p.X.Tick.Marker = linTimeTicks{}
	p.Y.Min, p.Y.Max = -0.6, float64(nrows)-0.4
	ticks := []plot.Tick{{Value: httpY, Label: "HTTP requests"}}
	for i, s := range senders {
		ticks = append(ticks, plot.Tick{Value: y(i), Label: "ARP from " + s})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Tick.Length = 0
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{Y: 0xDD}
	grid.Horizontal.Color = color.Gray{Y: 0xEE}
	p.Add(grid)

	leg := newLegend()
	entries := 0
	var reply, garp plotter.XYs
	for _, a := range t.ARP {
		if !in(a.At) {
			continue
		}
		pt := plotter.XY{X: ms(a.At), Y: y(row[a.Sender])}
		if a.Gratuitous {
			pt.Y += 0.18 // above the answers' dots, so both are seen when they coincide
			garp = append(garp, pt)
		} else {
			reply = append(reply, pt)
		}
	}
	arpStyle := Style{Color: 0}
	for _, g := range []struct {
		pts   plotter.XYs
		name  string
		shape draw.GlyphDrawer
		c     color.Color
	}{
		{reply, "ARP answer to the client's who-has (every 20 ms)", draw.CircleGlyph{}, arpStyle.color()},
		{garp, "gratuitous ARP", draw.TriangleGlyph{}, palette[4]},
	} {
		if len(g.pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(g.pts)
		if err != nil {
			return nil, plot.Legend{}, 0, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: g.c, Radius: vg.Points(2.6), Shape: g.shape}
		p.Add(sc)
		leg.Add(g.name, sc)
		entries++
	}

	okReq := &bars{style: draw.LineStyle{Color: okColor, Width: vg.Points(1.2)}}
	failReq := &bars{style: draw.LineStyle{Color: failColor, Width: vg.Points(1.2)}}
	var nok, nfail int
	for _, r := range t.HTTP {
		if !in(r.Start) {
			continue
		}
		// Requests overlap (one starts every 20 ms, a failed one lasts its 250 ms timeout): failed
		// ones are spread over 4 lanes below the successful ones so each is seen.
		b, lane := okReq, 0
		if !r.OK {
			b, lane = failReq, 1+nfail%4
			nfail++
		} else {
			nok++
		}
		b.add(ms(r.Start), min(ms(r.End), ms(t.To)), httpY+0.15-0.1*float64(lane))
	}
	if nok > 0 {
		p.Add(okReq)
		leg.Add(fmt.Sprintf("HTTP request that succeeded (%d), start to end", nok), okReq)
		entries++
	}
	if nfail > 0 {
		p.Add(failReq)
		leg.Add(fmt.Sprintf("HTTP request that failed (%d), start to error or timeout", nfail), failReq)
		entries++
	}
	if entries == 0 {
		return nil, plot.Legend{}, 0, ErrNoData
	}
	marks := &vlines{style: draw.LineStyle{Color: markColor, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(2), vg.Points(2)}}}
	for _, m := range t.Marks {
		if in(m.At) {
			marks.marks = append(marks.marks, Mark{At: m.At, Label: m.Label})
		}
	}
	if len(marks.marks) > 0 {
		marks.text = p.X.Tick.Label
		p.Add(marks)
	}
	return p, leg, entries, nil
}

// bars draws horizontal bars, each with a short vertical tick at its start.
type bars struct {
	style draw.LineStyle
	segs  [][3]float64 // x0, x1, y
}

func (b *bars) add(x0, x1, y float64) { b.segs = append(b.segs, [3]float64{x0, x1, y}) }

// Plot implements plot.Plotter.
func (b *bars) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	for _, s := range b.segs {
		x0, x1, y := tx(s[0]), tx(s[1]), ty(s[2])
		c.StrokeLines(b.style, c.ClipLinesX([]vg.Point{{X: x0, Y: y}, {X: x1, Y: y}})...)
		c.StrokeLines(b.style, c.ClipLinesX([]vg.Point{{X: x0, Y: y - vg.Points(3)}, {X: x0, Y: y + vg.Points(3)}})...)
	}
}

// Thumbnail implements plot.Thumbnailer.
func (b *bars) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(b.style, c.Min.X, y, c.Max.X, y)
	c.StrokeLine2(b.style, c.Min.X, y-vg.Points(3), c.Min.X, y+vg.Points(3))
}

// vlines draws labelled vertical lines across the plot.
type vlines struct {
	style draw.LineStyle
	text  draw.TextStyle
	marks []Mark
}

// Plot implements plot.Plotter.
func (v *vlines) Plot(c draw.Canvas, p *plot.Plot) {
	tx, _ := p.Transforms(&c)
	for _, m := range v.marks {
		x := tx(ms(m.At))
		c.StrokeLine2(v.style, x, c.Min.Y, x, c.Max.Y)
		sty := v.text
		sty.XAlign, sty.YAlign = draw.XLeft, draw.YTop
		c.FillText(sty, vg.Point{X: x + vg.Points(3), Y: c.Max.Y - vg.Points(2)}, m.Label)
	}
}
