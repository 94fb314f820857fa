// Command chart draws the isolation chart from the CSV that
// tests/bench/isolation writes: records/s written per partition over time,
// raw kgo above korder, the fault window shaded.
package main

import (
	"bufio"
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type series struct {
	t    []float64
	rate map[int][]float64 // partition -> records/s, one per t
}

func main() {
	in := flag.String("in", "isolation.csv", "CSV written by tests/bench/isolation")
	out := flag.String("out", "isolation.png", "PNG to write")
	flag.Parse()
	modes, order, faultStart, faultEnd, err := read(*in)
	if err != nil {
		fail(err)
	}
	ymax := 0.0
	for _, s := range modes {
		for _, rs := range s.rate {
			for _, r := range rs {
				ymax = max(ymax, r)
			}
		}
	}

	const w, h = 8 * vg.Inch, 6 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(order), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(10)}
	plots := make([][]*plot.Plot, len(order))
	for i, mode := range order {
		p, err := panel(mode, modes[mode], faultStart, faultEnd, ymax)
		if err != nil {
			fail(err)
		}
		plots[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(*out)
	if err != nil {
		fail(err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		fail(err)
	}
	if err := f.Close(); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "chart: wrote %s\n", *out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chart:", err)
	os.Exit(1)
}

func panel(mode string, s *series, faultStart, faultEnd, ymax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = mode + ": records/s written per partition (partition 0 fails in the shaded window)"
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "records/s (thousands)"
	top := ymax / 1000 * 1.05
	p.Add(plotter.NewGrid())

	shade, err := plotter.NewPolygon(plotter.XYs{{X: faultStart, Y: 0}, {X: faultEnd, Y: 0}, {X: faultEnd, Y: top}, {X: faultStart, Y: top}})
	if err != nil {
		return nil, err
	}
	shade.Color = color.NRGBA{R: 255, G: 190, B: 190, A: 120}
	shade.LineStyle.Width = 0
	p.Add(shade)

	parts := make([]int, 0, len(s.rate))
	for part := range s.rate {
		parts = append(parts, part)
	}
	slices.Sort(parts)
	mean := make(plotter.XYs, len(s.t))
	for i, t := range s.t {
		sum := 0.0
		for _, part := range parts[1:] {
			sum += s.rate[part][i]
		}
		mean[i] = plotter.XY{X: t, Y: sum / float64(len(parts)-1) / 1000}
	}
	for _, part := range parts[1:] {
		l, err := plotter.NewLine(xys(s.t, s.rate[part]))
		if err != nil {
			return nil, err
		}
		l.Color = color.RGBA{R: 170, G: 170, B: 200, A: 255}
		l.Width = vg.Points(0.6)
		p.Add(l)
	}
	ml, err := plotter.NewLine(mean)
	if err != nil {
		return nil, err
	}
	ml.Color = color.RGBA{R: 30, G: 70, B: 200, A: 255}
	ml.Width = vg.Points(2.2)
	p.Add(ml)
	p.Legend.Add(fmt.Sprintf("partitions 1-%d, mean per partition", parts[len(parts)-1]), ml)
	p0, err := plotter.NewLine(xys(s.t, s.rate[0]))
	if err != nil {
		return nil, err
	}
	p0.Color = color.RGBA{R: 210, G: 30, B: 30, A: 255}
	p0.Width = vg.Points(2.2)
	p.Add(p0)
	p.Legend.Add("partition 0 (the failing one)", p0)
	p.Y.Min, p.Y.Max = 0, top
	p.X.Min, p.X.Max = 0, s.t[len(s.t)-1]
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	return p, nil
}

func xys(t, r []float64) plotter.XYs {
	out := make(plotter.XYs, len(t))
	for i := range t {
		out[i] = plotter.XY{X: t[i], Y: r[i] / 1000}
	}
	return out
}

// read parses the CSV: comment lines carry the fault window.
func read(path string) (modes map[string]*series, order []string, faultStart, faultEnd float64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	defer f.Close()
	var body strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# fault_start_s="); ok {
			faultStart, _ = strconv.ParseFloat(v, 64)
		} else if v, ok := strings.CutPrefix(line, "# fault_end_s="); ok {
			faultEnd, _ = strconv.ParseFloat(v, 64)
		} else if !strings.HasPrefix(line, "#") {
			body.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, 0, 0, err
	}
	r := csv.NewReader(strings.NewReader(body.String()))
	if _, err := r.Read(); err != nil { // header
		return nil, nil, 0, 0, err
	}
	modes = make(map[string]*series)
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, 0, 0, err
		}
		t, err1 := strconv.ParseFloat(rec[1], 64)
		part, err2 := strconv.Atoi(rec[2])
		rate, err3 := strconv.ParseFloat(rec[3], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, nil, 0, 0, fmt.Errorf("bad row %q", rec)
		}
		s := modes[rec[0]]
		if s == nil {
			s = &series{rate: make(map[int][]float64)}
			modes[rec[0]] = s
			order = append(order, rec[0])
		}
		if part == 0 {
			s.t = append(s.t, t)
		}
		s.rate[part] = append(s.rate[part], rate)
	}
	if len(order) == 0 {
		return nil, nil, 0, 0, fmt.Errorf("%s: no rows", path)
	}
	return modes, order, faultStart, faultEnd, nil
}
