package traces

import (
	"bufio"
	"encoding/json"
	"strconv"

	"github.com/kvsim/kvsim/internal/jsonerr"
)

// MooncakeBlockSize is the number of tokens behind each Mooncake hash id
// (FAST'25 traces: 512).
const MooncakeBlockSize = 512

// mooncakeLine is one line of a Mooncake trace:
//
//	{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...],
//	 "session_id": id, "delay": ms}
//
// session_id and delay are optional (multi-turn variants of the format).
type mooncakeLine struct {
	hashLine
	SessionID json.RawMessage `json:"session_id"`
	Delay     json.RawMessage `json:"delay"`
}

// hashLine holds the fields of a line that the Mooncake and Bailian
// formats share: the arrival, the lengths and the block hash ids.
type hashLine struct {
	Timestamp    json.RawMessage `json:"timestamp"`
	InputLength  *int            `json:"input_length"`
	OutputLength *int            `json:"output_length"`
	HashIDs      []uint64        `json:"hash_ids"`
}

// require reports the first of the shared fields that the line lacks;
// at says what the timestamp counts ("seconds since the trace start").
func (h *hashLine) require(l jsonLine, at string) error {
	return l.require(
		want{"timestamp", !isNull(h.Timestamp), at},
		want{"input_length", h.InputLength != nil, wantCount},
		want{"output_length", h.OutputLength != nil, wantCount},
		want{"hash_ids", h.HashIDs != nil, wantHashes},
	)
}

// record returns the record that the shared fields describe: the
// timestamp counts units of ns nanoseconds (as at says), and each hash id
// stands for blockSize tokens. The fields must be present (require).
func (h *hashLine) record(l jsonLine, at string, ns float64, blockSize int) (Record, error) {
	arrival, err := numberToNs(h.Timestamp, ns)
	if err != nil {
		return Record{}, l.bad("timestamp", "expected %s, found %s", at, string(h.Timestamp))
	}
	return Record{
		Arrival:   arrival,
		InputLen:  *h.InputLength,
		OutputLen: *h.OutputLength,
		Blocks:    h.HashIDs,
		BlockSize: blockSize,
	}, nil
}

var mooncakeNames = map[string]string{
	"input_len":  "input_length",
	"output_len": "output_length",
	"arrival":    "timestamp",
	"think_time": "delay",
	"blocks":     "hash_ids",
}

type mooncakeFormat struct {
	n        int   // records returned so far
	last     int64 // previous arrival (ns)
	sessions *sessionChain
	scan     mooncakeScratch // the scanner's working space
	slow     bool            // decode with encoding/json only (tests)
}

func newMooncake(br *bufio.Reader, path string) *jsonlDecoder {
	return newJSONL(br, path, &mooncakeFormat{sessions: newSessionChain()})
}

func (d *mooncakeFormat) record(l jsonLine) (Record, error) {
	var m mooncakeLine
	if d.slow || !scanMooncake(l.data, &m, &d.scan) {
		var err error
		if m, err = unmarshalMooncake(l.data); err != nil {
			return Record{}, jsonError(l.path, l.line, l.data, err)
		}
	}
	const at = "milliseconds since the trace start"
	if err := m.require(l, at); err != nil {
		return Record{}, err
	}
	rec, err := m.record(l, at, 1e6, MooncakeBlockSize)
	if err != nil {
		return Record{}, err
	}
	rec.ID = strconv.Itoa(d.n)
	bad := l.bad
	if !isNull(m.Delay) {
		ns, err := numberToNs(m.Delay, 1e6)
		if err != nil {
			return Record{}, bad("delay", "expected milliseconds, found %s", string(m.Delay))
		}
		rec.ThinkTime = ns
	}
	if len(m.SessionID) > 0 && string(m.SessionID) != "null" {
		s, ok := scalarString(m.SessionID)
		if !ok {
			return Record{}, bad("session_id", "expected a string or integer, found %s", jsonerr.Kind(m.SessionID))
		}
		rec.Session = s
	}
	if err := l.check(&rec, mooncakeNames); err != nil {
		return Record{}, err
	}
	if rec.Arrival < d.last {
		return Record{}, bad("timestamp", "expected a time >= the previous record's (%s ms), found %s ms", fmtMs(d.last), string(m.Timestamp))
	}
	d.last = rec.Arrival
	if rec.Session != "" {
		rec.Turn, rec.Parent = d.sessions.add(rec.Session, rec.ID)
	}
	d.n++
	return rec, nil
}

// unmarshalMooncake decodes a line with encoding/json.
func unmarshalMooncake(data []byte) (mooncakeLine, error) {
	var m mooncakeLine
	err := json.Unmarshal(data, &m)
	return m, err
}

// mooncakeScratch is the scanner's working space: the lengths m points to
// (valid until the next line) and the hash ids being read.
type mooncakeScratch struct {
	in, out int
	ids     []uint64
}

// scanMooncake decodes a line into m as json.Unmarshal would, or returns
// false when the line is outside the scanner's subset (see scanner); m is
// then partly filled and must not be used.
func scanMooncake(data []byte, m *mooncakeLine, sc *mooncakeScratch) bool {
	s := newScanner(data)
	return s.object(func(key []byte) uint32 {
		switch string(key) {
		case "timestamp":
			m.Timestamp = s.number()
			return 1 << 0
		case "input_length":
			m.InputLength = s.intTo(&sc.in)
			return 1 << 1
		case "output_length":
			m.OutputLength = s.intTo(&sc.out)
			return 1 << 2
		case "hash_ids":
			m.HashIDs = s.uint64s(&sc.ids)
			return 1 << 3
		case "session_id":
			m.SessionID = s.scalar()
			return 1 << 4
		case "delay":
			m.Delay = s.number()
			return 1 << 5
		}
		return 0
	})
}
