package pipeline

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errBatcherStopped is what a submit to a stopped batcher gets.
var errBatcherStopped = errors.New("pipeline: batcher stopped")

// batcher groups items submitted concurrently into one flush call per
// batch (group commit): a flush starts as soon as one of `parallel` flush
// slots is free and takes everything queued by then, up to maxBatch; with a
// linger it first waits up to linger for the batch to fill. So an idle
// batcher flushes a lone item at once, and a busy one makes large batches
// out of whatever arrived during the previous flushes. Every submitter
// learns its own batch's result.
type batcher[T any] struct {
	flush    func(context.Context, []T) error
	maxBatch int
	linger   time.Duration
	parallel int
	// timeout bounds each flush; flushes do not end with the run context,
	// so that stopping never abandons a batch half way.
	timeout time.Duration

	in      chan pending[T]
	stopped chan struct{}
}

type pending[T any] struct {
	item T
	done chan error
}

func newBatcher[T any](flush func(context.Context, []T) error, maxBatch int, linger time.Duration, parallel int, timeout time.Duration) *batcher[T] {
	return &batcher[T]{
		flush: flush, maxBatch: maxBatch, linger: linger, parallel: parallel, timeout: timeout,
		in:      make(chan pending[T], 4*maxBatch),
		stopped: make(chan struct{}),
	}
}

// submit queues item and returns a channel that receives its batch's flush
// result once. It blocks while the queue is full (back pressure). A submit
// after run returned gets errBatcherStopped; one racing with the stop may
// never be answered, so waiters also watch their own context.
func (b *batcher[T]) submit(item T) <-chan error {
	done := make(chan error, 1)
	select {
	case <-b.stopped:
		done <- errBatcherStopped
		return done
	default:
	}
	select {
	case b.in <- pending[T]{item: item, done: done}:
	case <-b.stopped:
		done <- errBatcherStopped
	}
	return done
}

// run flushes batches until ctx is done, then flushes what is queued, waits
// for the flushes under way and returns. Call it once.
func (b *batcher[T]) run(ctx context.Context) {
	slots := make(chan struct{}, b.parallel)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		close(b.stopped)
		// Fail what slipped in while stopping rather than strand it.
		for {
			select {
			case p := <-b.in:
				p.done <- errBatcherStopped
			default:
				return
			}
		}
	}()
	start := func(batch []pending[T]) {
		wg.Go(func() {
			defer func() { <-slots }()
			items := make([]T, len(batch))
			for i, p := range batch {
				items[i] = p.item
			}
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
			err := b.flush(fctx, items)
			cancel()
			for _, p := range batch {
				p.done <- err
			}
		})
	}
	for {
		var batch []pending[T]
		select {
		case p := <-b.in:
			batch = append(batch, p)
		case <-ctx.Done():
			b.drain(slots, start)
			return
		}
		batch = b.fill(ctx, batch)
		// Wait for a flush slot, collecting meanwhile.
	acquire:
		for {
			if len(batch) >= b.maxBatch {
				slots <- struct{}{}
				break
			}
			select {
			case slots <- struct{}{}:
				break acquire
			case p := <-b.in:
				batch = append(batch, p)
			}
		}
		batch = b.take(batch)
		start(batch)
	}
}

// fill waits up to the linger for batch to fill.
func (b *batcher[T]) fill(ctx context.Context, batch []pending[T]) []pending[T] {
	if b.linger <= 0 {
		return batch
	}
	timer := time.NewTimer(b.linger)
	defer timer.Stop()
	for len(batch) < b.maxBatch {
		select {
		case p := <-b.in:
			batch = append(batch, p)
		case <-timer.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// take adds whatever is queued to batch without waiting, up to maxBatch.
func (b *batcher[T]) take(batch []pending[T]) []pending[T] {
	for len(batch) < b.maxBatch {
		select {
		case p := <-b.in:
			batch = append(batch, p)
		default:
			return batch
		}
	}
	return batch
}

// drain flushes everything queued, in batches.
func (b *batcher[T]) drain(slots chan struct{}, start func([]pending[T])) {
	for {
		batch := b.take(nil)
		if len(batch) == 0 {
			return
		}
		slots <- struct{}{}
		start(batch)
	}
}
