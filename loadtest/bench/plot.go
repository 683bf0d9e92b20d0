package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// line is one named series of a plot.
type line struct {
	name   string
	xs, ys []float64
}

// chart describes a line plot.
type chart struct {
	title, xLabel, yLabel string
	logX                  bool
	lines                 []line
}

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
}

const (
	plotW, plotH                       = 960, 560
	marginL, marginR, marginT, marginB = 80, 30, 40, 60
)

// writePNG draws c into a PNG file.
func (c chart) writePNG(path string) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	fill(img, img.Bounds(), color.RGBA{0xff, 0xff, 0xff, 0xff})
	x0, x1, y0, y1 := c.bounds()
	tx := func(x float64) int {
		lo, hi := x0, x1
		if c.logX {
			x, lo, hi = math.Log10(max(x, 1e-3)), math.Log10(lo), math.Log10(hi)
		}
		return marginL + int((x-lo)/(hi-lo)*float64(plotW-marginL-marginR))
	}
	ty := func(y float64) int {
		return plotH - marginB - int((y-y0)/(y1-y0)*float64(plotH-marginT-marginB))
	}
	grey := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	black := color.RGBA{0, 0, 0, 0xff}
	// grid and tick labels
	for _, v := range c.xTicks(x0, x1) {
		x := tx(v)
		drawLine(img, x, marginT, x, plotH-marginB, grey)
		label(img, x-3*len(fmtNum(v)), plotH-marginB+16, fmtNum(v), black)
	}
	for i := 0; i <= 5; i++ {
		v := y0 + (y1-y0)*float64(i)/5
		y := ty(v)
		drawLine(img, marginL, y, plotW-marginR, y, grey)
		s := fmtNum(v)
		label(img, marginL-8-7*len(s), y+4, s, black)
	}
	drawLine(img, marginL, plotH-marginB, plotW-marginR, plotH-marginB, black)
	drawLine(img, marginL, marginT, marginL, plotH-marginB, black)
	label(img, marginL, 14, c.title, black)
	label(img, plotW/2-3*len(c.xLabel), plotH-18, c.xLabel, black)
	label(img, 8, marginT-6, c.yLabel, black)
	for i, l := range c.lines {
		col := palette[i%len(palette)]
		for j := 1; j < len(l.xs); j++ {
			a0, b0 := tx(l.xs[j-1]), ty(l.ys[j-1])
			a1, b1 := tx(l.xs[j]), ty(l.ys[j])
			drawLine(img, a0, b0, a1, b1, col)
			drawLine(img, a0, b0+1, a1, b1+1, col)
		}
		ly := marginT + 16 + 18*i
		fill(img, image.Rect(plotW-marginR-200, ly-8, plotW-marginR-180, ly-4), col)
		label(img, plotW-marginR-172, ly, l.name, black)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func (c chart) bounds() (x0, x1, y0, y1 float64) {
	x0, x1, y0, y1 = math.Inf(1), math.Inf(-1), 0, math.Inf(-1)
	for _, l := range c.lines {
		for i := range l.xs {
			x0, x1 = min(x0, l.xs[i]), max(x1, l.xs[i])
			y1 = max(y1, l.ys[i])
		}
	}
	if math.IsInf(x0, 0) {
		return 0, 1, 0, 1
	}
	if c.logX {
		x0 = math.Pow(10, math.Floor(math.Log10(max(x0, 1e-3))))
		x1 = math.Pow(10, math.Ceil(math.Log10(max(x1, 1e-3))))
	} else {
		x0, x1 = 0, niceCeil(x1)
	}
	if x1 <= x0 {
		x1 = x0 + 1
	}
	if y1 <= y0 {
		y1 = y0 + 1
	}
	return x0, x1, y0, niceCeil(y1)
}

// niceCeil rounds v up to 5 steps of 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	step := v / 5
	p := math.Pow(10, math.Floor(math.Log10(step)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= step {
			return 5 * m * p
		}
	}
	return v
}

func (c chart) xTicks(x0, x1 float64) []float64 {
	var out []float64
	if c.logX {
		for v := x0; v <= x1*1.001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	for i := 0; i <= 5; i++ {
		out = append(out, x0+(x1-x0)*float64(i)/5)
	}
	return out
}

func fmtNum(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e7:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func label(img *image.RGBA, x, y int, s string, col color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(col), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, col color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, col)
		}
	}
}

// drawLine is Bresenham's line, clipped by SetRGBA to the image.
func drawLine(img *image.RGBA, x0, y0, x1, y1 int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.SetRGBA(x0, y0, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
