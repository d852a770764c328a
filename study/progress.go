package study

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress reports finished points: a bar redrawn in place on a terminal,
// one line per point otherwise (logs, CI, batch jobs).
type progress struct {
	w       io.Writer
	tty     bool
	total   int // points to run now
	skipped int
	done    int
	reqs    int64
	start   time.Time
}

func newProgress(w io.Writer, tty bool, total, skipped int) *progress {
	p := &progress{w: w, tty: tty, total: total, skipped: skipped, start: time.Now()}
	if skipped > 0 && !tty {
		fmt.Fprintf(w, "kvsim study: %d points to run, %d already done\n", total, skipped)
	}
	if tty {
		p.draw()
	}
	return p
}

// rate is simulated requests per wall-clock second; left the estimated
// time to finish.
func (p *progress) stats() (rate float64, left time.Duration) {
	el := time.Since(p.start)
	if el > 0 {
		rate = float64(p.reqs) / el.Seconds()
	}
	if p.done > 0 {
		left = time.Duration(float64(el) / float64(p.done) * float64(p.total-p.done))
	}
	return rate, left
}

func (p *progress) markDone(pt Point, rec *Record, wall time.Duration) {
	p.done++
	p.reqs += rec.Metrics.Completed + rec.Metrics.Failed
	if p.tty {
		p.draw()
		return
	}
	rate, left := p.stats()
	fmt.Fprintf(p.w, "kvsim study: point %d done in %.1fs (%s): hit rate %.4f, p99 TTFT %.0f ms [%d/%d, %s simulated req/s, %s left]\n",
		pt.Index, wall.Seconds(), formatParams(pt.Params, " "), rec.Metrics.CacheHitRate, rec.Metrics.P99TTFT,
		p.done, p.total, human(rate), clock(left))
}

func (p *progress) draw() {
	const width = 30
	n := 0
	if p.total > 0 {
		n = width * p.done / p.total
	}
	rate, left := p.stats()
	eta := "--:--"
	if p.done > 0 {
		eta = clock(left)
	}
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %d/%d points  %s simulated req/s  %s left",
		strings.Repeat("#", n), strings.Repeat(".", width-n), p.done, p.total, human(rate), eta)
}

func (p *progress) finish() {
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// clock prints a duration as m:ss or h:mm:ss.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
