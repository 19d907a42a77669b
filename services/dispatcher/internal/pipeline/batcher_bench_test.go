package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkBatcherRoundTrip measures one submit and the wait for its
// result, from several goroutines at once (as the workers submit
// look-ups), through two flush slots whose flush needs 16 KiB of stack, as
// a PostgreSQL query through pgx does: the hand-overs, the batching and the
// goroutines a flush runs on. With few submitters most batches hold one
// item, as at 1,000 deliveries/s; with many they are large.
func BenchmarkBatcherRoundTrip(b *testing.B) {
	for _, perCPU := range []int{1, 32} {
		b.Run(fmt.Sprintf("submitters=%dxGOMAXPROCS", perCPU), func(b *testing.B) { benchmarkBatcher(b, perCPU) })
	}
}

func benchmarkBatcher(b *testing.B, perCPU int) {
	b.ReportAllocs()
	bt := newBatcher(func(context.Context, []int) error { useStack(); return nil }, 1000, 0, 2, time.Minute)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { bt.run(ctx); close(done) }()
	b.SetParallelism(perCPU)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := <-bt.submit(1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	stop()
	<-done
}

//go:noinline
func useStack() byte {
	var buf [16 << 10]byte
	for i := range buf {
		buf[i] = byte(i)
	}
	return buf[len(buf)-1]
}
