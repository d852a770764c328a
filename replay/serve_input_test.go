package replay

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/traces"
)

// A bad request body is answered 400 with what was expected and found, by
// key path or byte offset, never with a Go type.
func TestServeBadBodies(t *testing.T) {
	url, _ := startServer(t, 100000, 0)
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"not an object", "/generate", `[1,2]`, "invalid JSON body: expected an object, found an array"},
		{"ids a string", "/generate", `{"input_ids":"x"}`, "input_ids: expected an array of token ids (integers), found a string"},
		{"id a string", "/generate", `{"input_ids":[1,"x"]}`, "input_ids: expected an array of token ids (integers), found an array holding a string"},
		{"id a fraction", "/generate", `{"input_ids":[1,2.5]}`, "input_ids: expected an array of token ids (integers), found an array holding 2.5"},
		{"text a number", "/generate", `{"text":5}`, "text: expected a string (batches are not supported), found 5"},
		{"max_new_tokens", "/generate", `{"text":"a","sampling_params":{"max_new_tokens":"x"}}`, "invalid JSON body: sampling_params.max_new_tokens: expected an integer, found a string"},
		{"sampling_params", "/generate", `{"text":"a","sampling_params":3}`, "invalid JSON body: sampling_params: expected an object, found a number"},
		{"stream", "/generate", `{"text":"a","stream":"yes"}`, "invalid JSON body: stream: expected true or false, found a string"},
		{"syntax", "/generate", `{"text":"a",}`, "invalid JSON body: at byte 13: invalid character '}' looking for beginning of object key string"},
		{"truncated", "/generate", `{"text":"a"`, "invalid JSON body: at byte 11: the document ends before its JSON value does"},
		{"empty", "/generate", ``, "invalid JSON body: empty body"},
		{"messages", "/v1/chat/completions", `{"messages":"hi"}`, "invalid JSON body: messages: expected an array of objects, found a string"},
		{"role", "/v1/chat/completions", `{"messages":[{"role":1,"content":"hi"}]}`, "invalid JSON body: messages.role: expected a string, found a number"},
		{"content", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, "messages[0].content: expected a string or a list of text parts, found 5"},
		{"max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":1.5}`, "invalid JSON body: max_tokens: expected an integer, found 1.5"},
		{"prompt", "/v1/completions", `{"prompt":{}}`, "prompt: expected an array of token ids (integers), found an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := httpDo(t, "POST", url+tc.path, tc.body)
			if code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", code, body)
			}
			var e struct {
				Message string `json:"message"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			if e.Message != tc.want {
				t.Errorf("message\n got %s\nwant %s", e.Message, tc.want)
			}
			for _, w := range []string{"Go value", "replay.", "struct", "int64", "[]", "json:"} {
				if strings.Contains(e.Message, w) {
					t.Errorf("message names %q", w)
				}
			}
		})
	}
}

// bigText is a {"text": ...} body of about n bytes: n/2 one-letter words.
func bigText(n int) []byte {
	return []byte(`{"text":"` + strings.Repeat("a ", n/2) + `"}`)
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A text prompt longer than the server could ever take is refused before
// it is tokenized: serving it allocates about twice its body (the body and
// the decoded text), not a string and a token per word (it used to be
// ~20x: strings.Fields' slice of 16-byte headers, then the tokens).
func TestServeHugeTextPromptMemory(t *testing.T) {
	_, srv := startServer(t, 20000, 0)
	h := srv.Handler()
	const size = 8 << 20
	body := bigText(size)
	for _, path := range []string{"/generate", "/v1/completions", "/v1/chat/completions"} {
		t.Run(path, func(t *testing.T) {
			b := body
			switch path {
			case "/v1/completions":
				b = bytes.Replace(body, []byte(`"text"`), []byte(`"prompt"`), 1)
			case "/v1/chat/completions":
				b = append(append([]byte(`{"messages":[{"role":"user","content":`), body[8:len(body)-1]...), "}]}"...)
			}
			rec := httptest.NewRecorder()
			n := allocated(func() {
				h.ServeHTTP(rec, httptest.NewRequest("POST", path, bytes.NewReader(b)))
			})
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "exceeds the KV pool of 20000 tokens") {
				t.Fatalf("status %d: %.300s", rec.Code, rec.Body.String())
			}
			t.Logf("%s: %d MiB allocated for a %d MiB body", path, n>>20, size>>20)
			if limit := uint64(3 * size); n > limit {
				t.Errorf("one request of %d MiB allocated %d MiB, want at most %d MiB", size>>20, n>>20, limit>>20)
			}
		})
	}
}

// The text tokenizer splits as strings.Fields does and hashes each word
// with FNV-1a, allocating nothing when dst has room.
func TestTextTokens(t *testing.T) {
	v := traces.DefaultVocab
	for _, s := range []string{"", "  ", "hello there  world", "a\tb\nc\r\nd\v\fe", "x\u00a0y\u2003z\u3000w", "é è\u0085ê", "bad \xff utf8", "<|user|>"} {
		want := []int32{}
		for _, w := range strings.Fields(s) {
			h := uint32(2166136261)
			for _, c := range []byte(w) {
				h ^= uint32(c)
				h *= 16777619
			}
			want = append(want, v.Lo+int32(h%uint32(v.Hi-v.Lo)))
		}
		got := textTokens([]byte(s), v, []int32{})
		if len(got) != len(want) || countWords([]byte(s)) != len(want) {
			t.Fatalf("textTokens(%q): %d tokens, countWords %d, want %d", s, len(got), countWords([]byte(s)), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("textTokens(%q)[%d] = %d, want %d", s, i, got[i], want[i])
			}
		}
	}
	text := []byte(strings.Repeat("some words here ", 100))
	dst := make([]int32, 0, 300)
	if a := testing.AllocsPerRun(10, func() { textTokens(text, v, dst[:0]) }); a != 0 {
		t.Errorf("textTokens with room allocates %v times", a)
	}
}

// A text prompt kept by capture costs its bytes, not a slice per word.
func TestCaptureParseMemory(t *testing.T) {
	const size = 8 << 20
	body := bigText(size)
	chat := append(append([]byte(`{"messages":[{"role":"user","content":`), body[8:len(body)-1]...), "}]}"...)
	for _, tc := range []struct {
		api   API
		body  []byte
		limit uint64 // the text, decoded once (and for chat, copied once)
	}{
		{APISGLang, body, 3 * size / 2},
		{APIOpenAIChat, chat, 5 * size / 2},
	} {
		var in capturedInput
		n := allocated(func() { in = parseCaptured(tc.api, tc.body) })
		if in.textWords != size/2 {
			t.Fatalf("%v: textWords = %d, want %d", tc.api, in.textWords, size/2)
		}
		if n > tc.limit {
			t.Errorf("%v: parsing a %d MiB text request allocated %d MiB, want at most %d MiB", tc.api, size>>20, n>>20, tc.limit>>20)
		}
	}
}
