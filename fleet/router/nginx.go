package router

import (
	"cmp"
	"hash/crc32"
	"slices"
	"strconv"
)

// This file holds nginx's two upstream balancers, so that a fleet behind a
// real nginx can be simulated exactly (docs/model.md, "nginx as the
// router"). Both follow nginx's C sources (ngx_http_upstream_round_robin.c
// and ngx_http_upstream_hash_module.c, unchanged in this respect from 1.12
// to 1.27) for servers of weight 1, no backup servers and no failures.

// smoothRR is nginx's smooth weighted round robin
// (ngx_http_upstream_get_peer) with every weight 1: each available
// replica's current weight grows by its effective weight (1), the
// replica with the largest current weight wins (the first in upstream
// order on ties), and the winner's current weight falls by the sum of
// the effective weights added. With equal weights it cycles through the
// available replicas in order. cur is the per-replica current weight,
// nginx's peer->current_weight; it is one state per nginx worker process.
type smoothRR struct{ cur []int }

func newSmoothRR(replicas int) *smoothRR { return &smoothRR{cur: make([]int, replicas)} }

// pick returns the replica among cand (in index order, not empty).
func (s *smoothRR) pick(cand []int) int {
	best := -1
	for _, i := range cand {
		s.cur[i]++
		if best < 0 || s.cur[i] > s.cur[best] {
			best = i
		}
	}
	s.cur[best] -= len(cand)
	return best
}

// ketamaPoint is one point of nginx's consistent-hash ring.
type ketamaPoint struct {
	hash    uint32
	replica int
}

// ketama is nginx's `hash KEY consistent` ring
// (ngx_http_upstream_init_chash): 160 points per server of weight 1,
// sorted by hash, equal hashes kept once.
type ketama struct{ points []ketamaPoint }

// ketamaPointsPerWeight is nginx's number of ring points per unit of
// server weight (npoints = weight * 160), Cache::Memcached::Fast's.
const ketamaPointsPerWeight = 160

// ketamaBase returns the bytes nginx hashes for a server name before the
// point counter: the host, a zero byte, then the port. The port is the
// name's trailing run of digits after its last ':' (none if the name does
// not end so, and "unix:PATH" names are all host).
func ketamaBase(name string) []byte {
	host, port := name, ""
	if len(name) >= 5 && equalFoldASCII(name[:5], "unix:") {
		host = name[5:]
	} else {
		for j := len(name) - 1; j >= 0; j-- {
			c := name[j]
			if c == ':' {
				host, port = name[:j], name[j+1:]
				break
			}
			if c < '0' || c > '9' {
				break
			}
		}
	}
	b := make([]byte, 0, len(name)+1+4)
	b = append(b, host...)
	b = append(b, 0)
	return append(b, port...)
}

func equalFoldASCII(a, b string) bool {
	for i := range len(a) {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return len(a) == len(b)
}

// ketamaPoints returns server name's 160 points: point j is the CRC-32
// (IEEE) of ketamaBase(name) followed by point j-1's value as four
// little-endian bytes (0 for the first point), as nginx builds them on a
// little-endian machine.
func ketamaPoints(name string) []uint32 {
	base := ketamaBase(name)
	buf := append(slices.Clip(base), 0, 0, 0, 0)
	out := make([]uint32, ketamaPointsPerWeight)
	var prev uint32
	for j := range out {
		n := len(base)
		buf[n], buf[n+1], buf[n+2], buf[n+3] = byte(prev), byte(prev>>8), byte(prev>>16), byte(prev>>24)
		prev = crc32.ChecksumIEEE(buf)
		out[j] = prev
	}
	return out
}

// newKetama builds the ring of the replicas' server names (names[i] is
// replica i's, as written in nginx's `server` line). Two points with one
// hash keep the lower replica's: nginx sorts with qsort, which leaves the
// order of equal hashes unspecified, then keeps the first.
func newKetama(names []string) *ketama {
	pts := make([]ketamaPoint, 0, len(names)*ketamaPointsPerWeight)
	for i, n := range names {
		for _, h := range ketamaPoints(n) {
			pts = append(pts, ketamaPoint{h, i})
		}
	}
	slices.SortFunc(pts, func(a, b ketamaPoint) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.replica, b.replica))
	})
	pts = slices.CompactFunc(pts, func(a, b ketamaPoint) bool { return a.hash == b.hash })
	return &ketama{pts}
}

// lookup returns the replica for key: the CRC-32 of the key, the first
// point whose hash is at or above it (past the last point: the first
// point), then the next points clockwise until one's replica is
// available (nginx's hp->hash++ on a down server). At least one replica
// must be available.
func (k *ketama) lookup(key string, available []bool) int {
	h := crc32.ChecksumIEEE([]byte(key))
	i, _ := slices.BinarySearchFunc(k.points, h, func(p ketamaPoint, h uint32) int { return cmp.Compare(p.hash, h) })
	for range k.points {
		if r := k.points[i%len(k.points)].replica; available[r] {
			return r
		}
		i++
	}
	panic("router: ketama lookup with no available replica")
}

// DefaultUpstreams returns the server names router.upstreams defaults to
// for n replicas: "127.0.0.1:8001", "127.0.0.1:8002", and so on.
func DefaultUpstreams(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "127.0.0.1:" + strconv.Itoa(8001+i)
	}
	return out
}
