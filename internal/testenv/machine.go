package testenv

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Parallel runs fn(0..n-1) on workers goroutines and returns the first error; it stops handing out work
// after an error or once ctx ends. Scale runs create thousands of objects this way: one at a time, the
// round trips alone would take minutes.
func Parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// LoadAverage is the machine's load average as /proc/loadavg gives it ("1.02 0.87 0.66"), recorded with
// every scale figure: the machine has 2 cores and other jobs may share them.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
