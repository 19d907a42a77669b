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
// linger it first waits until the linger has passed since its first item
// was submitted, for the batch to fill. So an idle batcher flushes a lone
// item at once, and a busy one makes large batches out of whatever arrived
// during the previous flushes. Every submitter learns its own batch's
// result.
//
// Each slot is a long-lived goroutine that gathers and flushes its own
// batches, one slot gathering at a time (so that slots do not split what
// lingers): an item goes from its submitter to the goroutine that flushes
// it with one hand-over, and no goroutine (with a stack that grows on
// every flush) is started per batch.
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
	// gathering is held by the slot gathering the next batch.
	gathering sync.Mutex
}

type pending[T any] struct {
	item T
	// at is when the item was submitted (set only with a linger): the
	// linger counts from the first item of a batch.
	at   time.Time
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
	p := pending[T]{item: item, done: done}
	if b.linger > 0 {
		p.at = time.Now()
	}
	select {
	case b.in <- p:
	case <-b.stopped:
		done <- errBatcherStopped
	}
	return done
}

// run flushes batches until ctx is done, then flushes what is queued, waits
// for the flushes under way and returns. Call it once.
func (b *batcher[T]) run(ctx context.Context) {
	var slots sync.WaitGroup
	for range b.parallel {
		slots.Go(func() {
			for {
				batch, ok := b.gather(ctx)
				if !ok {
					return
				}
				b.flushBatch(ctx, batch)
			}
		})
	}
	slots.Wait()
	// ctx is done: flush what is still queued, in parallel batches.
	for range b.parallel {
		slots.Go(func() {
			for batch := b.take(nil); len(batch) > 0; batch = b.take(nil) {
				b.flushBatch(ctx, batch)
			}
		})
	}
	slots.Wait()
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
}

// gather waits for the next batch, holding the gathering turn: the first
// item, then (with a linger) what arrives until the linger has passed since
// it was submitted, then whatever is queued, up to maxBatch. It answers
// false once ctx is done (what is queued then is left to run's last
// flushes).
func (b *batcher[T]) gather(ctx context.Context) ([]pending[T], bool) {
	b.gathering.Lock()
	defer b.gathering.Unlock()
	if ctx.Err() != nil {
		return nil, false
	}
	var first pending[T]
	select {
	case first = <-b.in:
	case <-ctx.Done():
		return nil, false
	}
	return b.take(b.fill(ctx, []pending[T]{first})), true
}

// flushBatch flushes batch, bounded by the timeout but not by ctx, and
// answers its submitters.
func (b *batcher[T]) flushBatch(ctx context.Context, batch []pending[T]) {
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
}

// fill waits until the linger has passed since the first item of batch
// was submitted, for batch to fill.
func (b *batcher[T]) fill(ctx context.Context, batch []pending[T]) []pending[T] {
	if b.linger <= 0 {
		return batch
	}
	wait := time.Until(batch[0].at.Add(b.linger))
	if wait <= 0 {
		return batch
	}
	timer := time.NewTimer(wait)
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
