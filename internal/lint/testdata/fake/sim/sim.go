package sim

import (
	"math/rand/v2"
	"time"
)

func Run(done func()) {
	_ = time.Now()
	go done()
	time.AfterFunc(time.Second, done)
	time.NewTicker(time.Second).Stop()
	_ = rand.IntN(3)
	_ = time.Duration(3) * time.Millisecond
	_ = time.Tick(time.Second)
	time.NewTimer(time.Second).Stop()
}
