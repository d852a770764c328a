package traces

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Format names one of the trace formats kvsim reads. The zero value means
// "detect from the content".
type Format int

// The known formats. See docs/trace-formats.md for each grammar.
const (
	FormatAuto     Format = iota // detect from the content
	FormatMooncake               // Mooncake FAST'25 JSONL (512-token block hashes)
	FormatBailian                // Alibaba Qwen-Bailian JSONL (16-token block hashes)
	FormatWEKA                   // WEKA kv-cache-tester agentic sessions (one JSON document per conversation)
	FormatAzure                  // Azure LLM inference CSV (lengths only)
	FormatTokens                 // token-id JSONL (LLMServingSim style)
	FormatKVSim                  // kvsim's own JSONL with a header record
)

var formatNames = [...]string{
	FormatAuto:     "auto",
	FormatMooncake: "mooncake",
	FormatBailian:  "bailian",
	FormatWEKA:     "weka",
	FormatAzure:    "azure",
	FormatTokens:   "tokens",
	FormatKVSim:    "kvsim",
}

// String returns the name used by --format.
func (f Format) String() string {
	if f >= 0 && int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatNames lists the names ParseFormat accepts (without "auto"), in a
// fixed order for usage messages.
func FormatNames() []string { return append([]string(nil), formatNames[1:]...) }

// ParseFormat maps a --format name to a Format. The empty string and "auto"
// give FormatAuto. Unknown names return an error matching ErrUnknownFormat.
func ParseFormat(name string) (Format, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "" {
		return FormatAuto, nil
	}
	for i, s := range formatNames {
		if s == n {
			return Format(i), nil
		}
	}
	return FormatAuto, fmt.Errorf("%w %q (want one of %s)", ErrUnknownFormat, name, strings.Join(FormatNames(), ", "))
}

// Detect guesses the format from the first bytes of a trace (after
// decompression): the first record's keys for JSON, the header row for CSV.
// It needs only the first record's leading keys, so a prefix of a few KB is
// usually enough; a truncated prefix is fine. name, if not empty, is used as
// a last resort (a .csv file is Azure).
func Detect(prefix []byte, name string) (Format, error) {
	p := bytes.TrimLeft(prefix, " \t\r\n\ufeff")
	p = bytes.TrimPrefix(p, []byte("\xef\xbb\xbf"))
	if len(p) == 0 {
		return FormatAuto, fmt.Errorf("%w: empty input", ErrUnknownFormat)
	}
	if p[0] == '{' {
		if f, ok := detectJSON(p); ok {
			return f, nil
		}
		return FormatAuto, fmt.Errorf("%w: first JSON record has none of the keys that identify a format (hash_ids, chat_id, requests, input_tok_ids, kvsim_trace)", ErrUnknownFormat)
	}
	line, _, _ := bytes.Cut(p, []byte("\n"))
	line = bytes.ToLower(line)
	if bytes.Contains(line, []byte("contexttokens")) && bytes.Contains(line, []byte("generatedtokens")) {
		return FormatAzure, nil
	}
	if strings.HasSuffix(strings.ToLower(name), ".csv") {
		return FormatAzure, nil
	}
	return FormatAuto, fmt.Errorf("%w: input is neither JSON nor a CSV with ContextTokens,GeneratedTokens columns", ErrUnknownFormat)
}

// detectJSON walks the top-level keys of the first JSON object and decides as
// soon as a key identifies the format. It tolerates truncation.
func detectJSON(p []byte) (Format, bool) {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber() // a huge number (1e999) is still a token
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return FormatAuto, false
	}
	keys := map[string]bool{}
	decide := func() (Format, bool) {
		switch {
		case keys["kvsim_trace"]:
			return FormatKVSim, true
		case keys["chat_id"] || keys["parent_chat_id"]:
			return FormatBailian, true
		case keys["requests"] || keys["hash_id_scope"] || (keys["block_size"] && keys["models"]):
			return FormatWEKA, true
		case keys["input_tok_ids"] || keys["input_toks"] || keys["arrival_time_ns"]:
			return FormatTokens, true
		}
		return FormatAuto, false
	}
	for {
		t, err := dec.Token()
		if err != nil {
			break
		}
		k, ok := t.(string)
		if !ok {
			break // '}' closes the object
		}
		keys[k] = true
		if f, ok := decide(); ok {
			return f, true
		}
		if err := skipValue(dec); err != nil {
			break
		}
	}
	if f, ok := decide(); ok {
		return f, true
	}
	// Mooncake has no key of its own: timestamp + hash_ids (+ input_length).
	if keys["hash_ids"] && (keys["timestamp"] || keys["input_length"]) {
		return FormatMooncake, true
	}
	return FormatAuto, false
}

// skipValue consumes one JSON value from dec, token by token, so that a
// huge array is never held whole.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}
