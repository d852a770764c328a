package replaytest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Do sends a request of method to url with body (for a test, under its
// context) and returns the answer's status and body; a transport error
// fails the test.
func Do(t testing.TB, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}
