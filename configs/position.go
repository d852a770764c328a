package configs

import (
	"errors"

	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/kvsim/kvsim/internal/fielderr"
)

// Pos is a 1-based line and column (in bytes) of a TOML document; Line 0
// means not written.
type Pos struct{ Line, Col int }

// Key is one key or table header of a TOML document, as go-toml's parser
// read it.
type Key struct {
	// Path is the key's full path: the table it is in, then its own parts;
	// an element of an array of tables ([[a]]) or of an inline array of
	// inline tables has its index (a[2].x).
	Path fielderr.Path
	// At is where the key starts, or the '[' of a table header.
	At Pos
	// Header is set for a [table] or [[array of tables]] header (and for
	// an array of tables itself, at its first header).
	Header bool
	// Implied is set for a table that a dotted key or a header's path
	// implies (a for a.b = 1 or [a.b]), listed where it is first written.
	Implied bool
	// Inline is set for a key inside a value: of an inline table, or an
	// element of an inline array that is an inline table.
	Inline bool
}

// ScanKeys lists every key of a TOML document in file order: table
// headers, keys (a dotted key, a.b.c = 1, lists a, a.b and a.b.c, at the
// key's start) and the keys of inline tables, also inside arrays. It uses
// go-toml's own parser, so it reads every construct go-toml decodes:
// dotted and quoted keys, inline tables and arrays of tables. The error is
// go-toml's parse error, if any; the keys before it are returned.
func ScanKeys(data []byte) ([]Key, error) {
	s := scanner{arrays: map[string]int{}}
	s.p.Reset(data)
	var table fielderr.Path
	for s.p.NextExpression() {
		e := s.p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, first := s.keyParts(e.Key())
			at := s.header(first)
			path := s.resolve(parts, at)
			if e.Kind == unstable.ArrayTable {
				name := path.String()
				if s.arrays[name] == 0 {
					s.add(Key{Path: path, At: at, Header: true}) // the array itself: its first table
				}
				path = path.At(s.arrays[name])
				s.arrays[name]++
			}
			s.add(Key{Path: path, At: at, Header: true})
			table = path
		case unstable.KeyValue:
			s.keyValue(table, e, false)
		}
	}
	return s.keys, s.p.Error()
}

// scanner holds ScanKeys' state.
type scanner struct {
	p      unstable.Parser
	keys   []Key
	seen   map[string]bool
	arrays map[string]int // elements of each array of tables so far, by path
}

// add records k, once per path: a table implied by several dotted keys is
// where it is first written.
func (s *scanner) add(k Key) {
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	name := k.Path.String()
	if s.seen[name] {
		return
	}
	s.seen[name] = true
	s.keys = append(s.keys, k)
}

// resolve turns a header's key parts into a path, entering the last
// element of every array of tables on the way ([[a]] then [a.b] is
// a[last].b), and records the tables it implies.
func (s *scanner) resolve(parts []string, at Pos) fielderr.Path {
	var path fielderr.Path
	for i, k := range parts {
		path = path.Key(k)
		if n := s.arrays[path.String()]; n > 0 && i < len(parts)-1 {
			path = path.At(n - 1)
		}
		if i < len(parts)-1 {
			s.add(Key{Path: path, At: at, Implied: true})
		}
	}
	return path
}

// keyValue records a key = value expression under table, and the keys of
// its value's inline tables; inline says it is inside a value.
func (s *scanner) keyValue(table fielderr.Path, e *unstable.Node, inline bool) {
	parts, first := s.keyParts(e.Key())
	at := s.pos(first)
	path := table
	for i, k := range parts {
		path = path.Key(k)
		s.add(Key{Path: path, At: at, Implied: i < len(parts)-1, Inline: inline})
	}
	s.value(path, e.Value())
}

// value records the keys inside v, the value at path.
func (s *scanner) value(path fielderr.Path, v *unstable.Node) {
	switch v.Kind {
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			if n := it.Node(); n.Kind == unstable.KeyValue {
				s.keyValue(path, n, true)
			}
		}
	case unstable.Array:
		it := v.Children()
		for i := 0; it.Next(); {
			n := it.Node()
			if n.Kind == unstable.Comment {
				continue
			}
			elem := path.At(i)
			if n.Kind == unstable.InlineTable {
				s.add(Key{Path: elem, At: s.pos(n.Raw.Offset), Inline: true})
			}
			s.value(elem, n)
			i++
		}
	}
}

// keyParts returns a key's parts and the offset of its first.
func (s *scanner) keyParts(it unstable.Iterator) ([]string, uint32) {
	var parts []string
	var first uint32
	for it.Next() {
		n := it.Node()
		if len(parts) == 0 {
			first = n.Raw.Offset
		}
		parts = append(parts, string(n.Data))
	}
	return parts, first
}

// header is the position of the '[' of the header whose first key part
// starts at off.
func (s *scanner) header(off uint32) Pos {
	data := s.p.Data()
	for off > 0 {
		c := data[off-1]
		if c != ' ' && c != '\t' && c != '[' {
			break
		}
		off--
	}
	for int(off) < len(data) && data[off] != '[' {
		off++ // back over whitespace before the '['
	}
	return s.pos(off)
}

// pos converts a byte offset of the document to a line and column.
func (s *scanner) pos(off uint32) Pos {
	sh := s.p.Shape(unstable.Range{Offset: off, Length: 1})
	return Pos{Line: sh.Start.Line, Col: sh.Start.Column}
}

// Positions maps the key paths of a TOML document to where they are
// written ([ScanKeys]).
type Positions map[string]Pos

// KeyPositions reads where every key of data is written, once per
// document; see [ScanKeys] (whose error it returns).
func KeyPositions(data []byte) (Positions, error) {
	keys, err := ScanKeys(data)
	ps := make(Positions, len(keys))
	for _, k := range keys {
		ps[k.Path.String()] = k.At
	}
	return ps, err
}

// Find returns where path is written. An array element that is not (an
// element of a short list, a plain value) is found at its array, and a key
// not written in an array element at the element (its [[header]] or its
// '{'); anything else not written is not found.
func (ps Positions) Find(path fielderr.Path) (Pos, bool) {
	for len(path) > 0 {
		if at, ok := ps[path.String()]; ok {
			return at, true
		}
		parent := path.Parent()
		switch {
		case path[len(path)-1].Index >= 0:
		case len(parent) > 0 && parent[len(parent)-1].Index >= 0:
		default:
			return Pos{}, false
		}
		path = parent
	}
	return Pos{}, false
}

// Place returns err about the document name with ps: each field error it
// joins (errors.Join) becomes a [fielderr.At] at its key, its path first
// mapped by fileKey (the domain's vocabulary to the file's); a field error
// whose key is not written (a default, a derived value) and any other
// error get the file name only.
func (ps Positions) Place(name string, err error, fileKey func(fielderr.Path) fielderr.Path) error {
	var out []error
	for _, e := range fielderr.Flatten(err) {
		if _, ok := e.(*fielderr.At); ok {
			out = append(out, e) // placed already
			continue
		}
		fe, ok := e.(*fielderr.Error)
		if !ok {
			out = append(out, &fielderr.At{File: name, Err: e})
			continue
		}
		if fileKey != nil {
			fe = &fielderr.Error{Path: fileKey(fe.Path), Err: fe.Err}
		}
		p, _ := ps.Find(fe.Path)
		out = append(out, &fielderr.At{File: name, Line: p.Line, Col: p.Col, Err: fe})
	}
	return errors.Join(out...)
}

// fileKeys maps the key paths of the domain packages' field errors to the
// keys of a kvsim file, where the two differ: sim/hw names its sections
// hw.<type>, and the simulator's batch limits and page size are [server]
// arguments in a file. The first entry whose domain path is a prefix of an
// error's path applies.
var fileKeys = []struct{ domain, file fielderr.Path }{
	{fielderr.Key("hw", "roofline"), fielderr.Key("cost", "efficiency")},
	{fielderr.Key("hw", "fitted"), fielderr.Key("cost", "fitted")},
	{fielderr.Key("hw", "server"), fielderr.Key("server")},
	{fielderr.Key("hw", "model"), fielderr.Key("model")},
	{fielderr.Key("hw", "gpu"), fielderr.Key("gpu")},
	{fielderr.Key("scheduler", "max_running_requests"), fielderr.Key("server", "max_running_requests")},
	{fielderr.Key("scheduler", "max_prefill_tokens"), fielderr.Key("server", "max_prefill_tokens")},
	{fielderr.Key("scheduler", "chunked_prefill_size"), fielderr.Key("server", "chunked_prefill_size")},
	{fielderr.Key("cache", "page_size"), fielderr.Key("server", "page_size")},
}

// fileKey is the file's key of a domain's key path ([fileKeys]).
func fileKey(p fielderr.Path) fielderr.Path {
	for _, k := range fileKeys {
		if p.HasPrefix(k.domain) {
			return p.Replace(k.domain, k.file)
		}
	}
	return p
}
