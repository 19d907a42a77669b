package notify

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/services/alerting/internal/store"
)

// Defaults of LoopOptions.
const (
	DefaultPoll       = time.Second
	DefaultBackoff    = 2 * time.Second
	DefaultMaxBackoff = 10 * time.Minute
	DefaultBatch      = 50
)

// LoopOptions for NewLoop.
type LoopOptions struct {
	// Store holds the outbox. Required.
	Store *store.Store
	// Sender delivers. Required.
	Sender *Sender
	// Clock paces the loop and the backoff. Default clock.Real.
	Clock clock.Clock
	// Poll is how often the outbox is checked when nothing wakes the loop.
	Poll time.Duration
	// Backoff is the wait after a notification's first failed attempt; it
	// doubles per attempt up to MaxBackoff. A channel that is down delays
	// its notifications by at most MaxBackoff after it comes back.
	Backoff, MaxBackoff time.Duration
	// Batch is how many notifications one pass claims.
	Batch int
	// Metrics, if non-nil, registers notifications_sent_total and
	// notification_failures_total.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
}

// Loop drains the notification outbox. Create with NewLoop; Run it.
type Loop struct {
	opts   LoopOptions
	logger *slog.Logger
	wake   chan struct{}
	sent   prometheus.Counter
	failed prometheus.Counter
}

// NewLoop validates opts and applies the defaults.
func NewLoop(opts LoopOptions) (*Loop, error) {
	if opts.Store == nil || opts.Sender == nil {
		return nil, errors.New("notify: Store and Sender are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	opts.Poll = cmp.Or(opts.Poll, DefaultPoll)
	opts.Backoff = cmp.Or(opts.Backoff, DefaultBackoff)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, DefaultMaxBackoff), opts.Backoff)
	opts.Batch = cmp.Or(opts.Batch, DefaultBatch)
	l := &Loop{
		opts: opts, logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)), wake: make(chan struct{}, 1),
		sent:   prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_notifications_sent_total", Help: "Notifications a channel accepted."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "alerting_notification_failures_total", Help: "Notification attempts that failed and were scheduled again."}),
	}
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{l.sent, l.failed} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// Notify wakes the loop (after a commit that queued notifications).
func (l *Loop) Notify() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run sends due notifications until ctx is done, then finishes the attempt
// under way and returns nil. Call it once.
func (l *Loop) Run(ctx context.Context) error {
	l.run(ctx)
	return nil
}

func (l *Loop) run(ctx context.Context) {
	for {
		n, err := l.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			l.logger.Warn("draining notifications failed", slog.Any("error", err))
		}
		if n == l.opts.Batch {
			continue // more may be due
		}
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-l.opts.Clock.After(l.opts.Poll):
		}
	}
}

// Pass claims and attempts the notifications due now; it returns how many
// it attempted.
func (l *Loop) Pass(ctx context.Context) (int, error) {
	now := l.opts.Clock.Now()
	// The lease outlasts one attempt, so a slow channel is not sent to
	// twice concurrently by two replicas.
	due, err := l.opts.Store.ClaimDue(ctx, now, 2*l.opts.Sender.timeout+l.opts.Poll, l.opts.Batch)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, p := range due {
		wg.Go(func() { l.attempt(ctx, p) })
	}
	wg.Wait()
	return len(due), nil
}

func (l *Loop) attempt(ctx context.Context, p store.Pending) {
	id := "ntf_" + p.ID.String()
	err := l.opts.Sender.Send(ctx, p.Channel, id, p.Payload)
	// Record the outcome even if ctx ended meanwhile: a sent notification
	// not marked would be sent again.
	rec := context.WithoutCancel(ctx)
	if err == nil {
		l.sent.Inc()
		if err := l.opts.Store.MarkSent(rec, p.ID, l.opts.Clock.Now()); err != nil {
			l.logger.Warn("recording a sent notification failed; it may be sent again", slog.String("notification_id", id), slog.Any("error", err))
		}
		return
	}
	l.failed.Inc()
	wait := l.opts.Backoff << min(p.Attempts, 20)
	wait = min(wait, l.opts.MaxBackoff)
	l.logger.Warn("notification not delivered; retrying later", slog.String("notification_id", id),
		slog.String("channel_id", p.Channel.Def.GetId()), slog.Int("attempt", p.Attempts+1), slog.Duration("retry_in", wait), slog.Any("error", err))
	if err := l.opts.Store.MarkFailed(rec, p.ID, l.opts.Clock.Now().Add(wait), err.Error()); err != nil {
		l.logger.Warn("recording a failed notification attempt failed", slog.String("notification_id", id), slog.Any("error", err))
	}
}
