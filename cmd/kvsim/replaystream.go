package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/kvsim/kvsim/replay"
	"github.com/kvsim/kvsim/traces"
)

// kvsim replay streams its trace (issue 19): check reads the file once
// ahead, keeping only its first record and what the run's checks need,
// and the measured run reads it again as the pacing reaches each record
// (replay.Replayer.RunStream), writing --per-request as requests finish.
// A trace that cannot be read twice (standard input, a pipe) or whose idle
// gaps are cut (--idle-gap-cap, which holds every record) is read into
// memory as before.

// rereadable reports whether the trace at path can be read twice: a
// regular file or a directory (of WEKA files).
func rereadable(path string) bool {
	if path == "-" {
		return false
	}
	st, err := os.Stat(path)
	return err == nil && (st.Mode().IsRegular() || st.IsDir())
}

// scan reads the trace's records (the first --num-prompts of them), front
// to back, handing each to each; the first error ends it.
func (j *replayJob) scan(each func(rec *traces.Record) error) error {
	src, closeSrc, err := j.source()
	if err != nil {
		return err
	}
	defer closeSrc()
	for {
		rec, err := src.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := each(&rec); err != nil {
			return err
		}
	}
}

// prescan is check's reading of a streamed trace: the errors readRecords
// gives, the first record, whether a prompt is synthesised, and a repeated
// ID (which the run reports where the pacer of a trace in memory does).
func (j *replayJob) prescan() error {
	n := 0
	ids := map[string]bool{}
	err := j.scan(func(rec *traces.Record) error {
		if n == 0 {
			j.first = *rec
		}
		j.synth = j.synth || rec.Tokens == nil
		if ids[rec.ID] && j.dupErr == nil {
			j.dupErr = fmt.Errorf("record %d: id %q: expected unique ids, found a repeat", n, rec.ID)
		}
		ids[rec.ID] = true
		n++
		return nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s: no records", j.tracePath)
	}
	j.streamed = true
	return nil
}

// source opens the trace for reading, limited to --num-prompts records.
func (j *replayJob) source() (*limitedSource, func(), error) {
	rd, err := traces.Open(j.tracePath, j.tf)
	if err != nil {
		return nil, nil, err
	}
	return &limitedSource{rd: rd, max: j.numPrompts}, func() { rd.Close() }, nil
}

// limitedSource gives a reader's records, at most max of them (0: all).
type limitedSource struct {
	rd     *traces.Reader
	max, n int
}

// Next implements engine.Source.
func (s *limitedSource) Next() (traces.Record, error) {
	if s.max > 0 && s.n >= s.max {
		return traces.Record{}, io.EOF
	}
	rec, err := s.rd.Next()
	if err == nil {
		s.n++
	}
	return rec, err
}

// runStreamed is the measured run of a streamed trace: the records are
// read as the run goes, and --per-request (if asked for) is written as
// requests finish. refused counts the requests refused for their token
// ids.
func (j *replayJob) runStreamed(ctx context.Context, r *replay.Replayer, name string, run *replayRun, refused *int) error {
	if j.dupErr != nil {
		return j.dupErr
	}
	src, closeSrc, err := j.source()
	if err != nil {
		return err
	}
	defer closeSrc()
	var ls *lineStream
	var tw *traces.Writer
	if j.perReq != "" {
		if ls, err = createLineStream(j.perReq); err != nil {
			return err
		}
		if tw, err = traces.NewWriter(ls.w, replay.PerRequestHeader("kvsim replay "+j.tracePath+" against "+name, run.info)); err != nil {
			return ls.finish(err)
		}
	}
	sr, err := r.RunStream(ctx, src, func(rec *traces.Record, rr *replay.RequestResult) error {
		*refused += tokenRefusals([]replay.RequestResult{*rr})
		if tw == nil {
			return nil
		}
		return tw.Write(replay.PerRequestRecord(*rec, rr))
	})
	if ls != nil {
		werr := err
		if werr == nil {
			werr = sr.OutputErr
		}
		if werr == nil {
			werr = tw.Flush()
		}
		run.perReqDone = true
		run.perReqErr = ls.finish(werr)
	}
	if err != nil {
		return err
	}
	run.sum, run.interrupted = sr.Summary, sr.Interrupted
	return nil
}
