package llamacpp

// Chunk is one slot's share of a llama_decode call, in the call's batch
// order (the server adds the generating slots' tokens first, then prompt
// chunks, each in slot order).
type Chunk struct {
	Slot   int   // the slot: llama.cpp's sequence id
	New    int64 // tokens the call evaluates for the slot: 1 for a generating slot
	Cached int64 // tokens of the slot already in its KV before the call
	Decode bool  // a generating slot's next token (else a prompt chunk)
}

// decodeToken reports whether the chunk costs a decode token: a
// generating slot's token, or a one-token prompt chunk (a full hit's last
// token, evaluated again: one query row against the slot's context).
func (c Chunk) decodeToken() bool { return c.Decode || c.New == 1 }

// Attention is the attention work of the prompt chunks of a call as
// llama.cpp b11669 does it on the CPU with flash attention and one KV
// stream per slot (no --kv-unified):
//
//   - The call is split into micro-batches by llama_batch_allocr's
//     split_equal(ubatch, sequential): a micro-batch takes the sequence of
//     the first token not yet taken and the following sequences in batch
//     order whose ids continue it (id + 1, id + 2, ...), and the same
//     number of tokens from each: as many as the shortest has left, at
//     most ubatch / sequences (at least one; at most ubatch + 1
//     sequences, as llama.cpp stops adding them). Two 300-token prompts in slots 2 and 3
//     beside slots 0 and 1 generating make micro-batches of 4 x 1, 2 x 256
//     and 2 x 43 tokens.
//   - In a micro-batch, a sequence's rows (its tokens there) of at least
//     tile go through the tiled kernel: every tile x tile block of (query,
//     key) pairs with any key at or before a query is computed, the last
//     block of rows padded to tile. The blocks are returned in tiled, as
//     pairs (tile x tile each).
//   - Fewer rows take the per-row kernel, which skips masked keys: their
//     causal pairs (rows x keys up to each row) are returned in short.
//
// Generating slots' tokens (Decode) are left out: the decode terms of the
// cost carry them. tile 0 counts every prompt row's causal pairs in tiled.
func Attention(call []Chunk, ubatch, tile int) (tiled, short float64) {
	ubatch = max(ubatch, 1)
	left := make([]int64, len(call))
	pos := make([]int64, len(call))
	for i, c := range call {
		left[i], pos[i] = max(c.New, 0), c.Cached
	}
	first := 0
	for {
		for first < len(call) && left[first] == 0 {
			first++
		}
		if first == len(call) {
			return tiled, short
		}
		set := []int{first}
		last := call[first].Slot
		for j := first + 1; j < len(call) && len(set) <= ubatch; j++ {
			if left[j] > 0 && call[j].Slot == last+1 {
				set = append(set, j)
				last++
			}
		}
		rows := max(1, int64(ubatch/len(set)))
		for _, j := range set {
			rows = min(rows, left[j])
		}
		for _, j := range set {
			if !call[j].Decode {
				switch {
				case tile <= 0:
					tiled += causalPairs(rows, pos[j])
				case rows < int64(tile):
					short += causalPairs(rows, pos[j])
				default:
					tiled += tilePairs(rows, pos[j], int64(tile))
				}
			}
			left[j] -= rows
			pos[j] += rows
		}
	}
}

// causalPairs is the (query, key) pairs of rows queries after cached keys,
// each query seeing the keys before it and itself.
func causalPairs(rows, cached int64) float64 {
	n, c := float64(rows), float64(cached)
	return n*c + n*(n+1)/2
}

// tilePairs is the pairs the tiled kernel computes for rows queries after
// cached keys: for each block of tile queries (the last one padded), tile
// x tile pairs for every block of tile keys up to its last query.
func tilePairs(rows, cached, tile int64) float64 {
	var blocks int64
	for q := int64(0); q < rows; q += tile {
		keys := cached + min(q+tile, rows)
		blocks += (keys + tile - 1) / tile
	}
	return float64(blocks * tile * tile)
}
