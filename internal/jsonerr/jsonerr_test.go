package jsonerr

import (
	"encoding/json"
	"strings"
	"testing"
)

type inner struct {
	MaxNewTokens *int `json:"max_new_tokens"`
}

type body struct {
	IDs      []int64 `json:"input_ids"`
	Sampling inner   `json:"sampling_params"`
	Messages []struct {
		Role string `json:"role"`
	} `json:"messages"`
	Stream bool        `json:"stream"`
	Seed   uint64      `json:"seed"`
	Temp   float64     `json:"temperature"`
	Flags  []bool      `json:"flags"`
	Number json.Number `json:"number"`
}

// Every encoding/json error comes back in the document's terms, never
// with a Go type name.
func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"top level", `[1,2]`, "expected an object, found an array"},
		{"int slice", `{"input_ids":"x"}`, "input_ids: expected an array of integers, found a string"},
		{"int element", `{"input_ids":[1,"x"]}`, "input_ids: expected an integer, found a string"},
		{"nested", `{"sampling_params":{"max_new_tokens":"x"}}`, "sampling_params.max_new_tokens: expected an integer, found a string"},
		{"fraction", `{"sampling_params":{"max_new_tokens":1.5}}`, "sampling_params.max_new_tokens: expected an integer, found 1.5"},
		{"structs", `{"messages":"hi"}`, "messages: expected an array of objects, found a string"},
		{"bool", `{"stream":1}`, "stream: expected true or false, found a number"},
		{"uint", `{"seed":-1}`, "seed: expected an integer >= 0, found -1"},
		{"float", `{"temperature":{}}`, "temperature: expected a number, found an object"},
		{"bools", `{"flags":3}`, "flags: expected an array of true or false values, found a number"},
		{"json.Number", `{"number":true}`, "number: expected a number, found true or false"},
		{"syntax", `{"a":}`, "at byte 6: invalid character '}' looking for beginning of value"},
		{"truncated", `{"a":`, "at byte 5: the document ends before its JSON value does"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b body
			err := json.Unmarshal([]byte(tc.doc), &b)
			if err == nil {
				t.Fatal("no error")
			}
			got := Describe(err)
			if got != tc.want {
				t.Errorf("Describe(%v)\n got %s\nwant %s", err, got, tc.want)
			}
			for _, w := range []string{"Go ", "jsonerr.", "int64", "struct", "json:"} {
				if strings.Contains(got, w) {
					t.Errorf("%q names %q", got, w)
				}
			}
		})
	}
}

func TestKind(t *testing.T) {
	for raw, want := range map[string]string{`"x"`: "a string", ` [1]`: "an array", `{}`: "an object", `true`: "true or false", `null`: "null", `1.5`: "1.5", ``: "nothing"} {
		if got := Kind([]byte(raw)); got != want {
			t.Errorf("Kind(%q) = %q, want %q", raw, got, want)
		}
	}
}
