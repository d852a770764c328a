package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvsim/kvsim/internal/atomicfile"

	"github.com/kvsim/kvsim/traces"
)

func init() {
	register(&command{
		name:    "trace",
		summary: "inspect, validate, convert, cut and generate request traces (stats, validate, convert, head, sample, gen)",
		run:     runTrace,
	})
}

const traceUsage = `usage: kvsim trace <subcommand> [flags] FILE...

subcommands:
  stats FILE              requests, arrivals, lengths, sessions and prefix-cache hit rates
  validate FILE           report every problem with file:line; exit 1 if there is any
  convert --to kvsim FILE convert to kvsim's trace format
  head -n N FILE          the first N requests, in kvsim format
  sample --fraction F --seed S FILE
                          a seeded sample of whole sessions, in kvsim format
  gen KIND [flags]        generate a synthetic trace in kvsim format
                          (KIND: multiturn, roundrobin, shared-prefix, warmcache)
  gen repeat --copies K FILE
                          K copies of a trace back to back in time, sharing
                          no prefix, in kvsim format

Every command that reads a trace takes --format NAME (` + "mooncake, bailian, weka, azure, tokens, kvsim" + `)
and detects the format from the content when it is omitted. FILE may be a
directory (or several files) of WEKA conversations, or - for standard input
(read once, so pipes work). .gz and .zst are read transparently. Output goes to stdout, or to --out FILE (written to a
temporary file renamed at the end).
`

func runTrace(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		io.WriteString(stderr, traceUsage)
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		io.WriteString(stdout, traceUsage)
		return exitOK
	case "stats":
		return traceStats(rest, stdout, stderr)
	case "validate":
		return traceValidate(rest, stdout, stderr)
	case "convert":
		return traceConvert(rest, stdout, stderr)
	case "head":
		return traceHead(rest, stdout, stderr)
	case "sample":
		return traceSample(rest, stdout, stderr)
	case "gen":
		return traceGen(rest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "kvsim trace: unknown subcommand %q\n\n%s", sub, traceUsage)
	return exitUsage
}

// newTraceInput returns the flag set of "kvsim trace NAME" with the
// flags of its trace input (--format, and --idle-gap-cap if gapCap).
func newTraceInput(name string, gapCap bool, stderr io.Writer) (*cmdFlags, *traceInput) {
	fs := newTraceCommand(name, stderr)
	in := new(traceInput)
	in.register(fs.FlagSet)
	if gapCap {
		in.registerGapCap(fs.FlagSet)
	}
	return fs, in
}

// newTraceCommand returns the flag set of "kvsim trace NAME"; its usage
// is the flag package's default one.
func newTraceCommand(name string, stderr io.Writer) *cmdFlags {
	name = "kvsim trace " + name
	return newCommand(name, "Usage of "+name+":\n", stderr)
}

// traceInput holds the flags shared by the commands that read a trace.
type traceInput struct {
	format string
	paths  []string
	f      traces.Format
	gapCap time.Duration  // --idle-gap-cap (0: none)
	cut    *traces.GapCut // what the cap cut, once the trace was read
}

func (in *traceInput) register(fs *flag.FlagSet) {
	fs.StringVar(&in.format, "format", "", "trace format: "+strings.Join(traces.FormatNames(), ", ")+" (default: detect)")
}

// registerGapCap adds --idle-gap-cap (convert and stats).
func (in *traceInput) registerGapCap(fs *flag.FlagSet) {
	durationVar(fs, &in.gapCap, "idle-gap-cap", 0, "cut every gap between consecutive request starts of a session family longer than this to it, shifting later times left (0: none); holds the trace in memory")
}

// check validates the format name and the number of files; it prints the
// problem and returns false on a usage error.
func (in *traceInput) check(fs *flag.FlagSet, pos []string, stderr io.Writer) bool {
	f, err := traces.ParseFormat(in.format)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --format: %v\n", fs.Name(), err)
		return false
	}
	if len(pos) == 0 {
		fmt.Fprintf(stderr, "%s: missing FILE\n", fs.Name())
		return false
	}
	if in.gapCap < 0 {
		fmt.Fprintf(stderr, "%s: --idle-gap-cap: must be >= 0 (got %v)\n", fs.Name(), in.gapCap)
		return false
	}
	in.f, in.paths = f, pos
	return true
}

// parse parses the flags and the files; when ok is false the caller
// returns code (the problem has been printed).
func (in *traceInput) parse(fs *cmdFlags, args []string) (code int, ok bool) {
	pos, code, ok := fs.parsePositional(args)
	if !ok {
		return code, false
	}
	if !in.check(fs.FlagSet, pos, fs.stderr) {
		return exitUsage, false
	}
	return exitOK, true
}

func (in *traceInput) open() (*traces.Reader, error) {
	var r *traces.Reader
	var err error
	if len(in.paths) == 1 {
		r, err = traces.Open(in.paths[0], in.f)
	} else {
		r, err = traces.OpenFiles(in.paths, in.f)
	}
	if err != nil || in.gapCap <= 0 {
		return r, err
	}
	cut, err := r.CapIdleGaps(int64(in.gapCap))
	if err != nil {
		r.Close()
		return nil, err
	}
	in.cut = &cut
	return r, nil
}

// noteCut prints what --idle-gap-cap cut, if it was given.
func (in *traceInput) noteCut(name string, stderr io.Writer) {
	if in.cut != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, gapCutNote(*in.cut))
	}
}

// output writes to stdout, or atomically to a file (internal/atomicfile):
// renamed over the target only when everything succeeded. On stdout, which
// cannot be taken back, only whole lines are passed on: a run that fails
// in the middle of a record leaves the records before it, never half of
// one.
type output struct {
	file  *atomicfile.File // nil for stdout
	lines *wholeLines      // stdout's
	w     io.Writer
}

func openOutput(path string, stdout io.Writer) (*output, error) {
	if path == "" || path == "-" {
		l := &wholeLines{w: stdout}
		return &output{lines: l, w: l}, nil
	}
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, err
	}
	return &output{file: f, w: f}, nil
}

// finish puts the file in place if err is nil, and removes it otherwise.
func (o *output) finish(err error) error {
	if o.file == nil {
		if err == nil {
			err = o.lines.flush()
		}
		return err
	}
	return o.file.Finish(err)
}

// wholeLines passes on what is written to it up to its last newline and
// keeps the rest until the next write or flush.
type wholeLines struct {
	w    io.Writer
	tail []byte
}

func (l *wholeLines) Write(p []byte) (int, error) {
	i := bytes.LastIndexByte(p, '\n')
	if i < 0 {
		l.tail = append(l.tail, p...)
		return len(p), nil
	}
	if len(l.tail) > 0 {
		if _, err := l.w.Write(l.tail); err != nil {
			return 0, err
		}
		l.tail = l.tail[:0]
	}
	if _, err := l.w.Write(p[:i+1]); err != nil {
		return 0, err
	}
	l.tail = append(l.tail, p[i+1:]...)
	return len(p), nil
}

// flush passes on the last, unterminated line.
func (l *wholeLines) flush() error {
	if len(l.tail) == 0 {
		return nil
	}
	_, err := l.w.Write(l.tail)
	l.tail = nil
	return err
}

func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "kvsim trace: %v\n", err)
	return exitFail
}

// ---- stats ----

func traceStats(args []string, stdout, stderr io.Writer) int {
	fs, in := newTraceInput("stats", true, stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	blockSize := fs.Int("token-block-size", traces.DefaultTokenBlockSize, "block size for hashing token-id traces")
	withOPT := fs.Bool("opt", true, "compute the OPT (Belady) hit rates, whose memory grows with the trace's block references; --opt=false keeps memory to the unique blocks")
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	if code, ok := in.parse(fs, args); !ok {
		return code
	}
	if *blockSize <= 0 {
		return fs.usageErr("--token-block-size: must be > 0 (got %d)", *blockSize)
	}
	st, err := traces.ComputeStats(in.open, traces.StatsOptions{TokenBlockSize: *blockSize, NoOPT: !*withOPT})
	if err != nil {
		return fail(stderr, err)
	}
	in.noteCut(fs.Name(), stderr)
	o, err := openOutput(*out, stdout)
	if err != nil {
		return fail(stderr, err)
	}
	if *asJSON {
		b, merr := json.MarshalIndent(st, "", "  ")
		if merr == nil {
			_, merr = fmt.Fprintf(o.w, "%s\n", b)
		}
		err = merr
	} else {
		err = writeStatsTable(o.w, strings.Join(in.paths, " "), st)
	}
	if err := o.finish(err); err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

func writeStatsTable(w io.Writer, name string, st *traces.Stats) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	dist := func(d traces.Dist) string {
		return fmt.Sprintf("mean %.0f\tp50 %.0f\tp90 %.0f\tp99 %.0f\tmax %d", d.Mean, d.P50, d.P90, d.P99, d.Max)
	}
	fmt.Fprintf(tw, "trace\t%s (%s)\n", name, st.Format)
	fmt.Fprintf(tw, "requests\t%d\n", st.Requests)
	fmt.Fprintf(tw, "duration\t%.1f s\n", st.DurationS)
	fmt.Fprintf(tw, "arrival rate\t%.2f req/s\n", st.ArrivalRate)
	fmt.Fprintf(tw, "input tokens\t%s\n", dist(st.Input))
	fmt.Fprintf(tw, "output tokens\t%s\n", dist(st.Output))
	fmt.Fprintf(tw, "sessions\t%d (max turn %d, %d requests with a parent)\n", st.Sessions, st.MaxTurn, st.Dependent)
	switch st.PrefixInfo {
	case "none":
		fmt.Fprintf(tw, "prefix info\tnone\n")
	default:
		fmt.Fprintf(tw, "prefix info\t%s (block size %d)\n", st.PrefixInfo, st.BlockSize)
		fmt.Fprintf(tw, "blocks\t%d total, %d unique\n", st.TotalBlocks, st.UniqueBlocks)
		fmt.Fprintf(tw, "ideal hit rate\t%.3f\n", *st.IdealHitRate)
		keys := make([]string, 0, len(st.LRUHitRate))
		for k := range st.LRUHitRate {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, _ := strconv.ParseFloat(keys[i], 64)
			b, _ := strconv.ParseFloat(keys[j], 64)
			return a < b
		})
		var parts []string
		for _, k := range keys {
			f, _ := strconv.ParseFloat(k, 64)
			parts = append(parts, fmt.Sprintf("%g%%: %.3f", f*100, st.LRUHitRate[k]))
		}
		fmt.Fprintf(tw, "LRU hit rate\t%s\n", strings.Join(parts, "\t"))
		if len(st.OPTHitRate) > 0 {
			parts = parts[:0]
			for _, k := range keys {
				f, _ := strconv.ParseFloat(k, 64)
				parts = append(parts, fmt.Sprintf("%g%%: %.3f", f*100, st.OPTHitRate[k]))
			}
			fmt.Fprintf(tw, "OPT hit rate\t%s\n", strings.Join(parts, "\t"))
		}
		fmt.Fprintf(tw, "\t(capacity as %% of unique blocks; OPT: Belady's offline optimum)\n")
	}
	if st.Note != "" {
		fmt.Fprintf(tw, "note\t%s\n", st.Note)
	}
	return tw.Flush()
}

// ---- validate ----

func traceValidate(args []string, stdout, stderr io.Writer) int {
	fs, in := newTraceInput("validate", false, stderr)
	maxShown := fs.Int("max", 0, "print at most `N` problems (0: all)")
	if code, ok := in.parse(fs, args); !ok {
		return code
	}
	r, err := in.open()
	if err != nil {
		fmt.Fprintf(stdout, "%v\n", err)
		return exitFail
	}
	defer r.Close()
	problems, n := 0, 0
	report := func(msg string) {
		problems++
		if *maxShown == 0 || problems <= *maxShown {
			fmt.Fprintln(stdout, msg)
		}
	}
	// Trace-level checks need every id seen so far (memory: one entry per
	// request).
	seen := map[string]bool{}
	where := func(rec *traces.Record) string {
		if l := r.Line(); l > 0 {
			return fmt.Sprintf("%s:%d", r.Path(), l)
		}
		return fmt.Sprintf("%s: request %q", r.Path(), rec.ID)
	}
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			report(err.Error())
			var pe *traces.ParseError
			if errors.As(err, &pe) && pe.Line > 0 {
				continue
			}
			break
		}
		n++
		if seen[rec.ID] {
			report(fmt.Sprintf("%s: id: expected a unique request id, found %q again", where(&rec), rec.ID))
		}
		if rec.Parent != "" && !seen[rec.Parent] {
			report(fmt.Sprintf("%s: parent: expected the id of an earlier request, found %q (absent or later)", where(&rec), rec.Parent))
		}
		for _, w := range rec.WaitFor {
			if !seen[w] {
				report(fmt.Sprintf("%s: wait_for: expected the id of an earlier request, found %q (absent or later)", where(&rec), w))
			}
		}
		seen[rec.ID] = true
	}
	if problems > 0 {
		fmt.Fprintf(stderr, "kvsim trace validate: %d problem(s) in %s (%d good requests read)\n", problems, strings.Join(in.paths, " "), n)
		return exitFail
	}
	fmt.Fprintf(stdout, "ok: %d requests (%s)\n", n, r.Format())
	return exitOK
}

// ---- convert, head, sample ----

// copyTrace writes the records that keep accepts, in kvsim format, and
// stops after limit records (0: no limit). An error reading the input is
// returned as it is (it names the input file and line), not as a failure
// to write the output; either way no output file is left behind.
func copyTrace(in *traceInput, outPath string, stdout io.Writer, limit int, keep func(*traces.Record) bool) error {
	r, err := in.open()
	if err != nil {
		return err
	}
	defer r.Close()
	o, err := openOutput(outPath, stdout)
	if err != nil {
		return err
	}
	var readErr error
	err = func() error {
		w, err := traces.NewWriter(o.w, r.Header())
		if err != nil {
			return err
		}
		n := 0
		for limit == 0 || n < limit {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				readErr = err
				return err
			}
			if keep != nil && !keep(&rec) {
				continue
			}
			if err := w.Write(rec); err != nil {
				return err
			}
			n++
		}
		return w.Flush()
	}()
	if err := o.finish(err); readErr == nil {
		return err
	}
	return readErr
}

func traceConvert(args []string, stdout, stderr io.Writer) int {
	fs, in := newTraceInput("convert", true, stderr)
	to := fs.String("to", "kvsim", "output format (only kvsim)")
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	if code, ok := in.parse(fs, args); !ok {
		return code
	}
	if *to != "kvsim" {
		return fs.usageErr("--to: only kvsim can be written (got %q)", *to)
	}
	if err := copyTrace(in, *out, stdout, 0, nil); err != nil {
		return fail(stderr, err)
	}
	in.noteCut(fs.Name(), stderr)
	return exitOK
}

func traceHead(args []string, stdout, stderr io.Writer) int {
	fs, in := newTraceInput("head", false, stderr)
	n := fs.Int("n", 10, "number of requests to keep")
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	if code, ok := in.parse(fs, args); !ok {
		return code
	}
	if *n < 1 {
		return fs.usageErr("-n: must be >= 1 (got %d)", *n)
	}
	if err := copyTrace(in, *out, stdout, *n, nil); err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

func traceSample(args []string, stdout, stderr io.Writer) int {
	fs, in := newTraceInput("sample", false, stderr)
	fraction := fs.Float64("fraction", 0.1, "fraction of sessions to keep, in (0, 1]")
	seed := fs.Uint64("seed", 1, "seed of the sample")
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	if code, ok := in.parse(fs, args); !ok {
		return code
	}
	if !(*fraction > 0 && *fraction <= 1) {
		return fs.usageErr("--fraction: must be in (0, 1] (got %v)", *fraction)
	}
	// A request belongs to the unit of its root: the session (or request,
	// when it has none) that its dependency chain starts from, so that
	// sub-agents and their parent conversation are kept or dropped together.
	root := map[string]string{} // request id -> unit
	keep := func(rec *traces.Record) bool {
		unit := rec.Session
		if unit == "" {
			unit = "id:" + rec.ID
		}
		if u, ok := root[rec.Parent]; ok && rec.Parent != "" {
			unit = u
		}
		root[rec.ID] = unit
		h := fnv.New64a()
		io.WriteString(h, unit)
		rng := rand.New(rand.NewPCG(h.Sum64(), *seed))
		return rng.Float64() < *fraction
	}
	if err := copyTrace(in, *out, stdout, 0, keep); err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

// ---- gen ----

const genUsage = `usage: kvsim trace gen KIND [flags] --seed S [--out FILE]

kinds:
  multiturn      multi-turn chat as SGLang's bench_multiturn.py builds it
  roundrobin     conversations sent round-robin (A1, B1, C1, A2, ...)
  shared-prefix  shared-prefix groups (A+Q1, A+Q2, B+Q1, ...)
  warmcache      bench_warm_cache.py's exact shared-prefix sweep
  repeat         K copies of a trace FILE back to back in time (--copies K),
                 hash, token, request and session ids renamed apart

Run 'kvsim trace gen KIND -h' for the flags of one kind.
`

// rateFlag parses a request rate in requests/s, or "inf".
type rateFlag float64

func (r *rateFlag) String() string { return strconv.FormatFloat(float64(*r), 'g', -1, 64) }
func (r *rateFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("expected requests per second or inf, found %q", s)
	}
	*r = rateFlag(v)
	return nil
}

// vocabFlag parses LO:HI.
type vocabFlag traces.Vocab

func (v *vocabFlag) String() string { return traces.Vocab(*v).String() }
func (v *vocabFlag) Set(s string) error {
	lo, hi, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseInt(lo, 10, 32)
	b, err2 := strconv.ParseInt(hi, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("expected LO:HI token ids, found %q", s)
	}
	*v = vocabFlag{Lo: int32(a), Hi: int32(b)}
	return traces.Vocab(*v).Validate()
}

// listFlag parses a comma-separated list of integers.
type listFlag []int

func (l *listFlag) String() string {
	var s []string
	for _, v := range *l {
		s = append(s, strconv.Itoa(v))
	}
	return strings.Join(s, ",")
}
func (l *listFlag) Set(s string) error {
	v, err := traces.ParseIntList(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

func traceGen(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			io.WriteString(stdout, genUsage)
			return exitOK
		}
		io.WriteString(stderr, genUsage)
		return exitUsage
	}
	kind := args[0]
	if kind == "repeat" {
		return traceRepeat(args[1:], stdout, stderr)
	}
	fs := newTraceCommand("gen "+kind, stderr)
	seed := fs.Uint64("seed", 1, "seed of the generator")
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	vocab := vocabFlag(traces.DefaultVocab)
	fs.Var(&vocab, "vocab", "token id range `LO:HI` (HI excluded)")
	gen := genFlags(kind, fs.FlagSet, seed, &vocab)
	if gen == nil {
		fmt.Fprintf(stderr, "kvsim trace gen: unknown kind %q\n\n%s", kind, genUsage)
		return exitUsage
	}
	pos, code, ok := fs.parsePositional(args[1:])
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return fs.usageErr("unexpected argument %q", pos[0])
	}
	recs, err := gen()
	if err != nil {
		return fs.usageErr("%v", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	var src []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "out" {
			src = append(src, "--"+f.Name+" "+f.Value.String())
		}
	})
	hdr := traces.Header{Format: "kvsim", Source: strings.TrimSpace("kvsim trace gen " + kind + " " + strings.Join(src, " "))}
	o, err := openOutput(*out, stdout)
	if err != nil {
		return fail(stderr, err)
	}
	if err := o.finish(writeRecords(o.w, hdr, recs)); err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

// genFlags adds the flags of generator kind to fs and returns the
// generator, which reads them once parsed; nil for an unknown kind.
func genFlags(kind string, fs *flag.FlagSet, seed *uint64, vocab *vocabFlag) func() ([]traces.Record, error) {
	switch kind {
	case "multiturn":
		c := traces.ChatConfig{}
		fs.IntVar(&c.Clients, "clients", 256, "number of clients")
		fs.IntVar(&c.Rounds, "rounds", 5, "turns per client")
		fs.IntVar(&c.RequestLength, "request-length", 512, "first prompt length in tokens")
		fs.IntVar(&c.OutputLength, "output-length", 64, "output tokens per turn")
		fs.IntVar(&c.SubQuestionLength, "sub-question-length", 0, "later questions' length in tokens (0: request length)")
		arrivalFlags(fs, 1, &c.Rate, &c.Distribution)
		fs.StringVar(&c.Order, "order", "random", "order of clients within a round: random or fifo")
		return func() ([]traces.Record, error) {
			c.Seed, c.Vocab = *seed, traces.Vocab(*vocab)
			return traces.GenerateChat(c)
		}
	case "roundrobin":
		c := traces.RoundRobinConfig{}
		rounds := groupList(fs, "conversations", "number of conversations (with a single --rounds value)",
			"rounds", 5, "turns per conversation: one number for all, or a list such as 2,3,4")
		fs.IntVar(&c.QuestionLength, "question-length", 256, "tokens of each turn's question")
		fs.IntVar(&c.OutputLength, "output-length", 64, "output tokens per turn")
		arrivalFlags(fs, math.Inf(1), &c.Rate, &c.Distribution)
		return func() ([]traces.Record, error) {
			c.Rounds = rounds()
			c.Seed, c.Vocab = *seed, traces.Vocab(*vocab)
			return traces.GenerateRoundRobin(c)
		}
	case "shared-prefix":
		c := traces.SharedPrefixConfig{}
		questions := groupList(fs, "groups", "number of groups (with a single --questions value)",
			"questions", 4, "questions per group: one number for all, or a list such as 2,3,4")
		fs.IntVar(&c.SystemPromptLength, "system-prompt-len", 2048, "shared system prompt (document) tokens")
		fs.IntVar(&c.QuestionLength, "question-len", 128, "tokens per question")
		fs.IntVar(&c.OutputLength, "output-len", 256, "output tokens per request")
		fs.StringVar(&c.Order, "order", "grouped", "grouped (A+Q1, A+Q2, B+Q1, ...) or shuffled")
		arrivalFlags(fs, math.Inf(1), &c.Rate, &c.Distribution)
		return func() ([]traces.Record, error) {
			c.Questions = questions()
			c.Seed, c.Vocab = *seed, traces.Vocab(*vocab)
			return traces.GenerateSharedPrefix(c)
		}
	case "warmcache":
		c := traces.WarmCacheConfig{}
		fs.IntVar(&c.TotalTokens, "total-tokens", 70000, "tokens per prompt (shared prefix + unique suffix)")
		pcts := listFlag{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 92, 95, 97, 99}
		fs.Var(&pcts, "pcts", "shared-prefix percentages")
		fs.IntVar(&c.NumPrompts, "num-prompts", 64, "prompts per percentage")
		fs.IntVar(&c.OutputLength, "output-len", 200, "output tokens per request")
		return func() ([]traces.Record, error) {
			c.Pcts, c.Seed, c.Vocab = pcts, *seed, traces.Vocab(*vocab)
			return traces.GenerateWarmCache(c)
		}
	}
	return nil
}

// arrivalFlags adds a generator's --rate (requests/s into rate, def by
// default) and --distribution (into dist) to fs.
func arrivalFlags(fs *flag.FlagSet, def float64, rate *float64, dist *string) {
	*rate = def
	fs.Var((*rateFlag)(rate), "rate", "request rate in requests/s, or inf")
	fs.StringVar(dist, "distribution", traces.ArrivalPoisson, "arrival gaps: poisson or uniform")
}

// groupList adds a per-group list flag (--list, one number for all groups
// or one per group, def by default) and the number of groups (--count) to
// fs, and returns what gives the list once parsed: the single value
// repeated count times when count is given, else the list as written.
func groupList(fs *flag.FlagSet, count, countUsage, list string, def int, listUsage string) func() []int {
	n := fs.Int(count, 0, countUsage)
	l := listFlag{def}
	fs.Var(&l, list, listUsage)
	return func() []int { return repeatList(l, *n) }
}

// writeRecords writes recs as a kvsim trace with header hdr.
func writeRecords(w io.Writer, hdr traces.Header, recs []traces.Record) error {
	tw, err := traces.NewWriter(w, hdr)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := tw.Write(r); err != nil {
			return err
		}
	}
	return tw.Flush()
}

// traceRepeat writes --copies copies of a trace back to back in time
// (traces.Repeat), reading the input once per copy.
func traceRepeat(args []string, stdout, stderr io.Writer) int {
	fs, in := newTraceInput("gen repeat", false, stderr)
	copies := fs.Int("copies", 2, "number of copies, back to back in time (1: the trace in kvsim format)")
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	if code, ok := in.parse(fs, args); !ok {
		return code
	}
	switch {
	case *copies < 1:
		return fs.usageErr("--copies: must be >= 1 (got %d)", *copies)
	case *copies > 1 && slices.Contains(in.paths, "-"):
		return fs.usageErr("--copies %d reads the trace %d times: give a file, not standard input", *copies, *copies)
	}
	o, err := openOutput(*out, stdout)
	if err != nil {
		return fail(stderr, err)
	}
	if err := o.finish(traces.Repeat(in.open, *copies, o.w)); err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

// repeatList turns a single value into n copies when n > 0.
func repeatList(l []int, n int) []int {
	if n > 0 && len(l) == 1 {
		out := make([]int, n)
		for i := range out {
			out[i] = l[0]
		}
		return out
	}
	return l
}
