package engine

// Event is something an online simulation reports about one request: a
// token streamed (Tokens is the request's count so far; the first token is
// the TTFT instant) or the request's end (Done, with its Result).
type Event struct {
	ID     string
	Time   Time
	Tokens int64
	// CachedTokens is the request's cached_tokens (known from its first
	// admission on), carried by every event as SGLang's meta_info does.
	CachedTokens int64
	Done         bool
	Result       RequestResult // set when Done
}
