package router

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// fataler is what the helpers need of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

func nginxRouter(t fataler, p Policy, names []string) *Router {
	t.Helper()
	cfg := Default()
	cfg.Policy = p
	cfg.Nginx.Upstreams = names
	r, err := New(cfg, len(names), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func routeTo(t fataler, r *Router, session string) Decision {
	t.Helper()
	d, err := r.Route(&Request{Session: session})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(d.Replica); err != nil {
		t.Fatal(err)
	}
	return d
}

// probeUpstreams are the servers of the nginx 1.22.1 (Debian bookworm)
// probe whose answers TestNginxHashVectors holds: an upstream block
// `hash $http_x_session_id consistent;` over these three server lines,
// each server answering with its own name.
var probeUpstreams = []string{"127.0.0.1:18081", "127.0.0.1:18082", "127.0.0.1:18083"}

// TestNginxHashVectors: the servers real nginx chose for these
// X-Session-Id values (measured; e2e/nginx.sh checks 2,000 more keys
// against a live nginx), and nginx's round robin for requests without the
// header, which keyed requests in between do not disturb.
func TestNginxHashVectors(t *testing.T) {
	want := map[string]int{
		"s0": 2, "s1": 1, "s2": 1, "s3": 1, "s4": 0, "s5": 1,
		"s6": 1, "s7": 1, "s8": 0, "s9": 0, "conv0": 2, "conv1": 0,
	}
	r := nginxRouter(t, NginxHash, probeUpstreams)
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if d := routeTo(t, r, k); d.Replica != want[k] || d.Reason != Ketama {
			t.Errorf("session %q: %+v, nginx chose %s", k, d, probeUpstreams[want[k]])
		}
	}
	for i, w := range []int{0, 1, 2, 0} {
		if d := routeTo(t, r, ""); d.Replica != w || d.Reason != SmoothRR {
			t.Errorf("keyless request %d: %+v, nginx chose %s", i, d, probeUpstreams[w])
		}
		routeTo(t, r, "s"+strconv.Itoa(i)) // keyed requests leave the round robin alone
	}
}

// TestKetamaBase: the bytes nginx hashes for a server name: host, a zero
// byte, the port (the trailing digits after the last colon).
func TestKetamaBase(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"127.0.0.1:8081", "127.0.0.1\x008081"},
		{"backend.example", "backend.example\x00"},
		{"[::1]:80", "[::1]\x0080"},
		{"unix:/run/llama.sock", "/run/llama.sock\x00"},
		{"UNIX:/s", "/s\x00"},
		{"host:8a1", "host:8a1\x00"},
		{"host:", "host\x00"},
	} {
		if got := string(ketamaBase(c.name)); got != c.want {
			t.Errorf("ketamaBase(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if n := len(newKetama(probeUpstreams).points); n != 3*ketamaPointsPerWeight {
		t.Errorf("ring of 3 servers has %d points, want %d", n, 3*ketamaPointsPerWeight)
	}
}

// TestPropNginxRoundRobin: with every replica available, request k goes
// to replica k mod n; an unavailable replica is never chosen and gets no
// weight, the current weights sum to zero, and among the replicas
// available throughout a stretch of requests the counts never differ by
// more than one (smooth).
func TestPropNginxRoundRobin(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "replicas")
		r := nginxRouter(rt, NginxRoundRobin, DefaultUpstreams(n))
		for k := range 3 * n {
			if d := routeTo(rt, r, ""); d.Replica != k%n || d.Reason != SmoothRR {
				rt.Fatalf("request %d: %+v, want replica %d", k, d, k%n)
			}
		}
		off := rapid.IntRange(0, n-1).Draw(rt, "unavailable")
		if n > 1 {
			r.SetAvailable(off, false)
		}
		count := make([]int, n)
		for range rapid.IntRange(1, 40).Draw(rt, "requests") {
			d := routeTo(rt, r, "")
			if n > 1 && d.Replica == off {
				rt.Fatalf("unavailable replica %d chosen", off)
			}
			// nginx's invariant with every weight 1: a pick adds one to each
			// candidate and takes their number from the winner, so the
			// current weights always sum to zero.
			sum := 0
			for _, c := range r.swrr.cur {
				sum += c
			}
			if sum != 0 {
				rt.Fatalf("current weights %v sum to %d", r.swrr.cur, sum)
			}
			count[d.Replica]++
			lo, hi := 1<<30, 0
			for i, c := range count {
				if n > 1 && i == off {
					continue
				}
				lo, hi = min(lo, c), max(hi, c)
			}
			if hi-lo > 1 {
				rt.Fatalf("counts %v differ by more than one", count)
			}
		}
	})
}

func drawNames(rt *rapid.T, label string, lo, hi int) []string {
	return rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z0-9.]{1,12}(:[0-9]{1,5})?`), lo, hi, rapid.ID[string]).Draw(rt, label)
}

// TestPropNginxHashSticky: a key goes to one server whatever the order of
// the upstream lines and however often it is asked (the ring depends on
// the names only); when a server becomes unavailable only its keys move.
func TestPropNginxHashSticky(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		names := drawNames(rt, "names", 1, 6)
		perm := rapid.Permutation(names).Draw(rt, "order")
		a, b := nginxRouter(rt, NginxHash, names), nginxRouter(rt, NginxHash, perm)
		keys := rapid.SliceOfNDistinct(rapid.StringN(1, 12, -1), 1, 30, rapid.ID[string]).Draw(rt, "keys")
		home := map[string]string{}
		for range 2 {
			for _, k := range keys {
				x, y := names[routeTo(rt, a, k).Replica], perm[routeTo(rt, b, k).Replica]
				if x != y {
					rt.Fatalf("key %q: %s with upstreams %v, %s with %v", k, x, names, y, perm)
				}
				if h, ok := home[k]; ok && h != x {
					rt.Fatalf("key %q went to %s, then to %s", k, h, x)
				}
				home[k] = x
			}
		}
		if len(names) < 2 {
			return
		}
		gone := rapid.IntRange(0, len(names)-1).Draw(rt, "unavailable")
		a.SetAvailable(gone, false)
		for _, k := range keys {
			got := names[routeTo(rt, a, k).Replica]
			if got == names[gone] || home[k] != names[gone] && got != home[k] {
				rt.Fatalf("%s unavailable: key %q moved from %s to %s", names[gone], k, home[k], got)
			}
		}
	})
}

// TestNginxHashRemap: adding a server line moves only keys that now land
// on the new server, about 1/(N+1) of them (within a factor of 1.5 with
// nginx's 160 points per server and 20,000 keys).
func TestNginxHashRemap(t *testing.T) {
	const keys = 20000
	all := make([]bool, 33)
	for i := range all {
		all[i] = true
	}
	for _, n := range []int{1, 2, 3, 4, 7, 8, 15, 16, 31} {
		names := make([]string, n+1)
		for i := range names {
			names[i] = "10.0.0." + strconv.Itoa(i+1) + ":8080"
		}
		before, after := newKetama(names[:n]), newKetama(names)
		checkRemap(t, n, keys, func(k string) int { return before.lookup(k, all) }, func(k string) int { return after.lookup(k, all) })
	}
}

// TestNginxUpstreamsChecked: router.upstreams must name every replica
// once, and names must be distinct and not empty.
func TestNginxUpstreamsChecked(t *testing.T) {
	cfg := Default()
	cfg.Policy = NginxHash
	cfg.Nginx.Upstreams = []string{"a:1", "b:2"}
	if _, err := New(cfg, 3, Deps{}); err == nil || !strings.Contains(err.Error(), "router.upstreams: 2 server names for 3 replicas") {
		t.Errorf("New with 2 names for 3 replicas: %v", err)
	}
	cfg.Nginx.Upstreams = []string{"a:1", "", "a:1"}
	err := cfg.Validate()
	for _, want := range []string{"router.upstreams: entry 1 is empty", `router.upstreams: "a:1" is entries 0 and 2; names must be distinct`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
	}
	cfg.Nginx.Upstreams = nil
	r, err := New(cfg, 2, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if d := routeTo(t, r, "k"); d.Reason != Ketama {
		t.Errorf("default upstreams: %+v", d)
	}
}
