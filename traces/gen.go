package traces

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Generators build synthetic token-id traces like SGLang's HiCache
// benchmarks (benchmark/hicache/, see the spec's section 7). Each takes an
// explicit seed; the same config gives the same records. Prompts are exact
// token ids drawn from a Vocab; outputs are generated too (OutputTokens),
// so that a later turn's prompt contains the earlier turns' outputs.

// streamGen is the PCG stream of the generators.
const streamGen = 0x6b76_7369_6d5f_676e // "kvsim_gn"

// Arrival processes of the generators.
const (
	ArrivalPoisson = "poisson" // exponential gaps of mean 1/rate
	ArrivalUniform = "uniform" // gaps uniform in [0, 2/rate)
)

// ChatConfig configures the multi-turn chat generator, as
// bench_multiturn.py builds it: every client starts with its own prompt of
// RequestLength tokens; turn k's prompt is turn k-1's prompt, then turn
// k-1's OutputLength output tokens, then a new question of SubQuestionLength
// tokens. Different clients share nothing.
type ChatConfig struct {
	Clients int // number of clients (>= 1; bench default 256)
	Rounds  int // turns per client (>= 1; bench default 5)
	// RequestLength is the first prompt's length in tokens (>= 1; 512).
	RequestLength int
	// OutputLength is each turn's output in tokens (>= 1; 64).
	OutputLength int
	// SubQuestionLength is each later question's length; 0 means
	// RequestLength.
	SubQuestionLength int
	// Rate is the request rate in requests per second (> 0), or +Inf to
	// send everything at time 0.
	Rate float64
	// Distribution is ArrivalPoisson (default) or ArrivalUniform.
	Distribution string
	// Order is "random" (default: each round's clients in a seeded random
	// order, like the bench's random ready queue) or "fifo" (client order).
	Order string
	Seed  uint64
	Vocab Vocab
}

// Validate reports every problem of the config at once.
func (c *ChatConfig) Validate() error {
	var errs []error
	positive(&errs, "clients", c.Clients)
	positive(&errs, "rounds", c.Rounds)
	positive(&errs, "request-length", c.RequestLength)
	positive(&errs, "output-length", c.OutputLength)
	if c.SubQuestionLength < 0 || c.SubQuestionLength > MaxGenLength {
		errs = append(errs, fmt.Errorf("sub-question-length: must be from 0 to %d (got %d)", MaxGenLength, c.SubQuestionLength))
	}
	checkTokens(&errs, "--clients, --rounds or the lengths", func() float64 {
		q := c.SubQuestionLength
		if q == 0 {
			q = c.RequestLength
		}
		return float64(c.Clients) * ChatTokens(c.Rounds, c.RequestLength, c.OutputLength+q)
	})
	checkArrivals(&errs, c.Rate, c.Distribution)
	if c.Order != "" && c.Order != "random" && c.Order != "fifo" {
		errs = append(errs, fmt.Errorf("order: must be random or fifo (got %q)", c.Order))
	}
	errs = append(errs, c.Vocab.Validate()) // nil when valid: errors.Join drops it
	return errors.Join(errs...)
}

// Bounds of the generators, which build the whole trace in memory: a
// length or count is at most MaxGenLength, and the prompts of a trace hold
// at most MaxGenTokens token ids together (1 GiB of them).
const (
	MaxGenLength = 1 << 24
	MaxGenTokens = 1 << 28
)

// positive checks a length or count: from 1 to MaxGenLength.
func positive(errs *[]error, name string, v int) {
	if v < 1 || v > MaxGenLength {
		*errs = append(*errs, fmt.Errorf("%s: must be from 1 to %d (got %d)", name, MaxGenLength, v))
	}
}

// positives checks a list of lengths or counts named name: at least one
// (each one a what), each from 1 to MaxGenLength.
func positives(errs *[]error, name, what string, vs []int) {
	if len(vs) == 0 {
		*errs = append(*errs, fmt.Errorf("%s: must list at least one %s", name, what))
	}
	for i, v := range vs {
		positive(errs, fmt.Sprintf("%s[%d]", name, i), v)
	}
}

// checkTokens adds CheckGenTokens's error for the tokens that n counts,
// if the config has no error yet (n may assume valid lengths).
func checkTokens(errs *[]error, flags string, n func() float64) {
	if len(*errs) == 0 {
		if err := CheckGenTokens(n(), flags); err != nil {
			*errs = append(*errs, err)
		}
	}
}

// CheckGenTokens reports a generated trace whose prompts would hold more
// than MaxGenTokens token ids together (tokens is their count, computed in
// floating point so that it cannot overflow), naming the flags to lower.
func CheckGenTokens(tokens float64, flags string) error {
	if tokens > MaxGenTokens {
		return fmt.Errorf("the trace's prompts would hold %.3g token ids together, over the %d a generated trace may hold: lower %s", tokens, MaxGenTokens, flags)
	}
	return nil
}

// ChatTokens is the prompt tokens of rounds turns of one conversation that
// starts with first tokens and adds grow tokens a turn (each turn's prompt
// holds the whole conversation so far), for CheckGenTokens.
func ChatTokens(rounds, first, grow int) float64 {
	r := float64(rounds)
	return r*float64(first) + float64(grow)*r*(r-1)/2
}

func checkArrivals(errs *[]error, rate float64, d string) {
	if !(rate > 0) {
		*errs = append(*errs, fmt.Errorf("rate: must be > 0 requests/s or inf (got %v)", rate))
	}
	if d != "" && d != ArrivalPoisson && d != ArrivalUniform {
		*errs = append(*errs, fmt.Errorf("distribution: must be poisson or uniform (got %q)", d))
	}
}

// arrivals yields send times (ns) of a rate-limited process.
type arrivals struct {
	rng  *rand.Rand
	rate float64
	dist string
	t    float64 // seconds
}

// newArrivals returns the send times of a generator seeded with seed, on
// a random stream of their own.
func newArrivals(seed uint64, rate float64, dist string) *arrivals {
	return &arrivals{rng: rand.New(rand.NewPCG(seed, streamGen+1)), rate: rate, dist: dist}
}

func (a *arrivals) next() int64 {
	at := int64(math.Round(a.t * 1e9))
	if !math.IsInf(a.rate, 1) {
		if a.dist == ArrivalUniform {
			a.t += a.rng.Float64() * 2 / a.rate
		} else {
			a.t += a.rng.ExpFloat64() / a.rate
		}
	}
	return at
}

func randTokens(rng *rand.Rand, v Vocab, n int) []int32 {
	out := make([]int32, n)
	span := uint64(v.Hi - v.Lo)
	for i := range out {
		out[i] = v.Lo + int32(rng.Uint64N(span))
	}
	return out
}

// conversation builds the turns of one chat: prompt k = prompt k-1 +
// output k-1 + question k.
type conversation struct {
	name   string
	prompt []int32
	turn   int
	last   string
}

func (c *conversation) nextTurn(rng *rand.Rand, v Vocab, question, output int) Record {
	q := randTokens(rng, v, question)
	c.prompt = append(c.prompt, q...)
	c.turn++
	rec := Record{
		ID:           c.name + "/" + strconv.Itoa(c.turn),
		Session:      c.name,
		Turn:         c.turn,
		Parent:       c.last,
		InputLen:     len(c.prompt),
		Tokens:       append([]int32(nil), c.prompt...),
		OutputLen:    output,
		OutputTokens: randTokens(rng, v, output),
		Sampling:     &Sampling{IgnoreEOS: true},
	}
	c.prompt = append(c.prompt, rec.OutputTokens...)
	c.last = rec.ID
	return rec
}

// GenerateChat builds the multi-turn chat trace. Records are in send order,
// round by round; turn k+1 of a client names turn k as Parent, so a
// replayer can hold it until turn k has completed (the bench sends a turn
// only after the previous one returned, and caps the requests in flight;
// the trace gives the send times and the dependencies, the replayer the
// gating).
func GenerateChat(c ChatConfig) ([]Record, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, streamGen))
	sub := c.SubQuestionLength
	if sub == 0 {
		sub = c.RequestLength
	}
	convs := make([]*conversation, c.Clients)
	for i := range convs {
		convs[i] = &conversation{name: "c" + strconv.Itoa(i)}
	}
	arr := newArrivals(c.Seed, c.Rate, c.Distribution)
	var recs []Record
	order := make([]int, c.Clients)
	for round := range c.Rounds {
		for i := range order {
			order[i] = i
		}
		if c.Order != "fifo" {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for _, i := range order {
			q := sub
			if round == 0 {
				q = c.RequestLength
			}
			rec := convs[i].nextTurn(rng, c.Vocab, q, c.OutputLength)
			rec.Arrival = arr.next()
			recs = append(recs, rec)
		}
	}
	return recs, nil
}

// RoundRobinConfig configures conversations sent round-robin, as
// bench_serving.py --enable-multiturn sends them: when a turn completes the
// conversation's next turn joins the end of the queue, so the order is A1,
// B1, C1, A2, B2, C2, ... and conversations with more rounds go on alone.
type RoundRobinConfig struct {
	// Rounds holds each conversation's number of turns (each >= 1).
	Rounds []int
	// QuestionLength is each turn's new question in tokens (>= 1).
	QuestionLength int
	// OutputLength is each turn's output in tokens (>= 1).
	OutputLength int
	Rate         float64 // requests/s (> 0, or +Inf)
	Distribution string  // ArrivalPoisson (default) or ArrivalUniform
	Seed         uint64
	Vocab        Vocab
}

// Validate reports every problem of the config at once.
func (c *RoundRobinConfig) Validate() error {
	var errs []error
	positives(&errs, "rounds", "conversation", c.Rounds)
	positive(&errs, "question-length", c.QuestionLength)
	positive(&errs, "output-length", c.OutputLength)
	checkTokens(&errs, "the rounds or the lengths", func() (n float64) {
		for _, r := range c.Rounds {
			n += ChatTokens(r, c.QuestionLength, c.QuestionLength+c.OutputLength)
		}
		return n
	})
	checkArrivals(&errs, c.Rate, c.Distribution)
	errs = append(errs, c.Vocab.Validate()) // nil when valid: errors.Join drops it
	return errors.Join(errs...)
}

// GenerateRoundRobin builds the round-robin conversation trace.
func GenerateRoundRobin(c RoundRobinConfig) ([]Record, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, streamGen))
	arr := newArrivals(c.Seed, c.Rate, c.Distribution)
	convs := make([]*conversation, len(c.Rounds))
	for i := range convs {
		convs[i] = &conversation{name: convName(i)}
	}
	var recs []Record
	for round := 0; ; round++ {
		sent := false
		for i, conv := range convs {
			if round >= c.Rounds[i] {
				continue
			}
			rec := conv.nextTurn(rng, c.Vocab, c.QuestionLength, c.OutputLength)
			rec.Arrival = arr.next()
			recs = append(recs, rec)
			sent = true
		}
		if !sent {
			return recs, nil
		}
	}
}

// convName names conversation i A, B, ..., Z, AA, AB, ...
func convName(i int) string {
	s := ""
	for i++; i > 0; i = (i - 1) / 26 {
		s = string(rune('A'+(i-1)%26)) + s
	}
	return s
}

// SharedPrefixConfig configures shared-prefix groups: each group has a
// system prompt (or document) of SystemPromptLength tokens followed by one
// of its questions of QuestionLength tokens. This is bench_serving.py's
// generated-shared-prefix dataset, and with Order "grouped" the
// --enable-shared-prefix order (A+Q1, A+Q2, B+Q1, ...).
type SharedPrefixConfig struct {
	// Questions holds each group's number of questions (each >= 1).
	Questions          []int
	SystemPromptLength int // tokens (>= 1)
	QuestionLength     int // tokens (>= 1)
	OutputLength       int // tokens (>= 1)
	// Order is "grouped" (default) or "shuffled" (a seeded permutation).
	Order        string
	Rate         float64 // requests/s (> 0, or +Inf)
	Distribution string
	Seed         uint64
	Vocab        Vocab
}

// Validate reports every problem of the config at once.
func (c *SharedPrefixConfig) Validate() error {
	var errs []error
	positives(&errs, "questions", "group", c.Questions)
	positive(&errs, "system-prompt-len", c.SystemPromptLength)
	positive(&errs, "question-len", c.QuestionLength)
	positive(&errs, "output-len", c.OutputLength)
	checkTokens(&errs, "the questions or the lengths", func() (n float64) {
		for _, q := range c.Questions {
			n += float64(q) * float64(c.SystemPromptLength+c.QuestionLength)
		}
		return n
	})
	if c.Order != "" && c.Order != "grouped" && c.Order != "shuffled" {
		errs = append(errs, fmt.Errorf("order: must be grouped or shuffled (got %q)", c.Order))
	}
	checkArrivals(&errs, c.Rate, c.Distribution)
	errs = append(errs, c.Vocab.Validate()) // nil when valid: errors.Join drops it
	return errors.Join(errs...)
}

// GenerateSharedPrefix builds the shared-prefix trace. Session is the
// group; requests do not depend on each other.
func GenerateSharedPrefix(c SharedPrefixConfig) ([]Record, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, streamGen))
	arr := newArrivals(c.Seed, c.Rate, c.Distribution)
	var recs []Record
	for g, nq := range c.Questions {
		sys := randTokens(rng, c.Vocab, c.SystemPromptLength)
		for q := range nq {
			prompt := append(append([]int32(nil), sys...), randTokens(rng, c.Vocab, c.QuestionLength)...)
			recs = append(recs, Record{
				ID:        fmt.Sprintf("%s+Q%d", convName(g), q+1),
				Session:   convName(g),
				InputLen:  len(prompt),
				Tokens:    prompt,
				OutputLen: c.OutputLength,
				Sampling:  &Sampling{IgnoreEOS: true},
			})
		}
	}
	if c.Order == "shuffled" {
		rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	}
	for i := range recs {
		recs[i].Arrival = arr.next()
	}
	return recs, nil
}

// WarmCacheConfig configures the exact shared-prefix sweep of
// bench_warm_cache.py: for each percentage p, NumPrompts prompts of
// TotalTokens tokens whose first TotalTokens*p/100 tokens (integer
// division) are one shared prefix and the rest unique.
type WarmCacheConfig struct {
	TotalTokens  int   // tokens per prompt (>= 1; bench default 70000)
	Pcts         []int // shared-prefix percentages, each in [0, 100]
	NumPrompts   int   // prompts per percentage (>= 1; default 64)
	OutputLength int   // tokens (>= 1; default 200)
	Seed         uint64
	Vocab        Vocab
}

// Validate reports every problem of the config at once.
func (c *WarmCacheConfig) Validate() error {
	var errs []error
	positive(&errs, "total-tokens", c.TotalTokens)
	positive(&errs, "num-prompts", c.NumPrompts)
	positive(&errs, "output-len", c.OutputLength)
	checkTokens(&errs, "--num-prompts, --total-tokens or the percentages", func() float64 {
		return float64(len(c.Pcts)) * float64(c.NumPrompts+1) * float64(c.TotalTokens)
	})
	if len(c.Pcts) == 0 {
		errs = append(errs, errors.New("pcts: must list at least one percentage"))
	}
	for i, p := range c.Pcts {
		if p < 0 || p > 100 {
			errs = append(errs, fmt.Errorf("pcts[%d]: must be in [0, 100] (got %d)", i, p))
		}
	}
	errs = append(errs, c.Vocab.Validate()) // nil when valid: errors.Join drops it
	return errors.Join(errs...)
}

// GenerateWarmCache builds the sweep. Each percentage is a session
// "pct=<p>": when the prefix is not empty it starts with a warm-up request
// (Kind "warmup", the prefix alone, 1 output token) that the prompts name
// as Parent; the first request of a percentage waits for (WaitFor) every
// request of the previous one. The bench flushes the server cache before
// each percentage: a replayer should flush when a new session starts. All
// arrivals are 0 (the bench sends as fast as its concurrency cap allows).
func GenerateWarmCache(c WarmCacheConfig) ([]Record, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, streamGen))
	var recs []Record
	var prev []string
	for _, p := range c.Pcts {
		session := "pct=" + strconv.Itoa(p)
		prefixLen := c.TotalTokens * p / 100
		prefix := randTokens(rng, c.Vocab, prefixLen)
		var ids []string
		parent := ""
		wait := prev
		if prefixLen > 0 {
			w := Record{ID: session + "/warmup", Session: session, Kind: "warmup", InputLen: prefixLen,
				Tokens: prefix, OutputLen: 1, WaitFor: wait, Sampling: &Sampling{IgnoreEOS: true}}
			recs = append(recs, w)
			ids = append(ids, w.ID)
			parent, wait = w.ID, nil
		}
		for i := range c.NumPrompts {
			prompt := append(append([]int32(nil), prefix...), randTokens(rng, c.Vocab, c.TotalTokens-prefixLen)...)
			r := Record{ID: session + "/" + strconv.Itoa(i), Session: session, Parent: parent, WaitFor: wait,
				InputLen: len(prompt), Tokens: prompt, OutputLen: c.OutputLength, Sampling: &Sampling{IgnoreEOS: true}}
			wait = nil
			recs = append(recs, r)
			ids = append(ids, r.ID)
		}
		prev = ids
	}
	return recs, nil
}

// ParseIntList parses "2,3,4" (a single number is a list of one).
func ParseIntList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("expected a comma-separated list of integers, found %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("expected a comma-separated list of integers, found %q", s)
	}
	return out, nil
}
