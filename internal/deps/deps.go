// Package deps pins the project's chosen modules in go.mod while the packages
// that use them are being written in parallel. It is deleted once every
// module here is imported by real code.
package deps

import (
	_ "github.com/emirpasic/gods/trees/redblacktree"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/pelletier/go-toml/v2"
	_ "gonum.org/v1/gonum/stat"
	_ "pgregory.net/rapid"
)
