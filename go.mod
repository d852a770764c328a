module github.com/kvsim/kvsim

go 1.26
