module github.com/kvsim/kvsim

go 1.26

require (
	github.com/klauspost/compress v1.20.4
	github.com/pelletier/go-toml/v2 v2.4.3
	gonum.org/v1/gonum v0.17.0
	pgregory.net/rapid v1.3.0
)
