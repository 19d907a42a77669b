package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cronmesh/cronmesh/libs/clock"
)

// DefaultStopTimeout bounds a part's stop, and a close, when neither the
// Part nor the Options say otherwise: the services' default
// --shutdown-timeout.
const DefaultStopTimeout = 15 * time.Second

// Part is one long-running part of a Group.
type Part struct {
	// Name names the part in the log and in its error; required.
	Name string
	// Run runs the part until its context is done (the part's Run
	// method); required.
	Run func(ctx context.Context) error
	// Ready, when not nil, gates the group's readiness (the part's Ready
	// method): the group is ready once every part's Ready is closed. A part
	// whose readiness is not the service's (a loop that retries its
	// database, a consumer of a feature that may be off) leaves it nil.
	Ready <-chan struct{}
	// StopTimeout bounds the wait for Run to return once the part was told
	// to stop. A part still running then is left behind, with a warning,
	// for the process exit to end, and the group goes on without it (an
	// error it returns later is lost): a call to a dependency that stopped
	// answering and does not heed its context must not hold the shutdown
	// past the service's --shutdown-timeout. 0 means Options.StopTimeout.
	StopTimeout time.Duration
	// Hold, when positive and shorter than the stop timeout, lets the
	// later stages start stopping once this long passed although the part
	// is still stopping; the group still waits for it, within its stop
	// timeout, before the closes. For a part whose drain the next stage
	// should wait for, but not for long: the trigger's outbox relay, before
	// the ring gives the node's partitions away.
	Hold time.Duration
}

// Options configure a Group.
type Options struct {
	// Logger receives the failures, the parts left behind and the errors
	// of the closes; nil discards.
	Logger *slog.Logger
	// StopTimeout bounds the stop of each part that does not say
	// otherwise, and each close; 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	// OnReady is called once the group is ready (see Group.Ready), unless
	// it is stopping by then: a service passes its API server's
	// SetServing(true). Nil: nothing is called.
	OnReady func()
	// Clock times the stop timeouts; nil means the real clock.
	Clock clock.Clock
}

// Group runs the parts of one service: it starts them together, reports
// readiness, and stops them stage by stage, then runs the closes together.
// Build it with New; add the stages and closes before Run.
type Group struct {
	logger      *slog.Logger
	stopTimeout time.Duration
	onReady     func()
	clock       clock.Clock
	ready       chan struct{}

	mu      sync.Mutex
	stages  [][]Part
	closes  []closer
	started bool

	closeOnce sync.Once
}

type closer struct {
	name  string
	close func(ctx context.Context) error
}

// New returns an empty Group.
func New(opts Options) *Group {
	return &Group{
		logger:      cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		stopTimeout: cmp.Or(opts.StopTimeout, DefaultStopTimeout),
		onReady:     opts.OnReady,
		clock:       cmp.Or[clock.Clock](opts.Clock, clock.Real{}),
		ready:       make(chan struct{}),
	}
}

// Stage adds a stage of parts. Every part starts when Run does; the parts
// of a stage are told to stop together, once the parts of every stage
// added before have stopped (or were left behind, or held the stages after
// them long enough: see Part.Hold). A stage without parts adds nothing.
// It panics on a part without a Name or a Run, and when called after Run:
// both are mistakes in a service's wiring.
func (g *Group) Stage(parts ...Part) {
	for _, p := range parts {
		if p.Name == "" || p.Run == nil {
			panic("lifecycle: a Part needs a Name and a Run")
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		panic("lifecycle: Stage called after Run")
	}
	if len(parts) > 0 {
		g.stages = append(g.stages, parts)
	}
}

// OnClose adds a close: it runs once every part has stopped (or was left
// behind), concurrently with the other closes, since closing a broker
// connection, a database pool or the telemetry exporter may each wait for
// a dependency that is down and their order does not matter. Each is
// bounded by Options.StopTimeout, and its error is logged, not returned: a
// resource that could not be closed cleanly is no failure of the service.
func (g *Group) OnClose(name string, close func(ctx context.Context) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closes = append(g.closes, closer{name: name, close: close})
}

// Ready is closed once every part with a Ready channel is ready, after Run
// started them; when no part has one, as soon as Run starts. It is never
// closed if the group stops first.
func (g *Group) Ready() <-chan struct{} { return g.ready }

// Run starts every part and waits until ctx is done or a part fails
// (returns an error before it was told to stop: a part that cannot run
// takes the service down), then stops the stages in order and runs the
// closes. It returns the parts' errors joined, each prefixed by its part's
// name, and nil when every part stopped cleanly or was left behind. Run
// may be called once; a second call returns an error.
func (g *Group) Run(ctx context.Context) error {
	g.mu.Lock()
	if g.started {
		g.mu.Unlock()
		return errors.New("lifecycle: Group.Run called twice")
	}
	g.started = true
	stages := g.stages
	g.mu.Unlock()

	// Parts stop when their stage's turn comes, not when ctx is done.
	base := context.WithoutCancel(ctx)
	failed := make(chan struct{})
	var failOnce sync.Once
	var gates []<-chan struct{}
	parts := make([][]*running, len(stages))
	for i, stage := range stages {
		for _, p := range stage {
			r := &running{Part: p, done: make(chan struct{})}
			var partCtx context.Context
			partCtx, r.cancel = context.WithCancel(base)
			go func() {
				defer close(r.done)
				if err := p.Run(partCtx); err != nil {
					r.err = fmt.Errorf("%s: %w", p.Name, err)
					failOnce.Do(func() {
						if partCtx.Err() == nil {
							g.logger.Error("a part of the service failed; stopping the service",
								slog.String("part", p.Name), slog.Any("error", err))
						}
						close(failed)
					})
				}
			}()
			parts[i] = append(parts[i], r)
			if p.Ready != nil {
				gates = append(gates, p.Ready)
			}
		}
	}
	stopping := make(chan struct{})
	go g.awaitReady(gates, stopping)

	select {
	case <-ctx.Done():
	case <-failed:
	}
	close(stopping)

	var held []*running
	for _, stage := range parts {
		for _, r := range stage {
			r.cancel()
			r.giveUp = g.clock.After(cmp.Or(r.StopTimeout, g.stopTimeout))
			if r.Hold > 0 && r.Hold < cmp.Or(r.StopTimeout, g.stopTimeout) {
				r.hold = g.clock.After(r.Hold)
			}
		}
		for _, r := range stage {
			if g.await(r, r.hold) {
				held = append(held, r)
			}
		}
	}
	for _, r := range held {
		g.await(r, nil)
	}
	g.Close(base)

	var errs []error
	for _, stage := range parts {
		for _, r := range stage {
			select {
			case <-r.done:
				errs = append(errs, r.err)
			default:
			}
		}
	}
	return errors.Join(errs...)
}

// running is a Part that Run started.
type running struct {
	Part
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
	// giveUp fires when the stop timeout passed; hold when the later
	// stages may start stopping (nil: when the part stopped).
	giveUp, hold <-chan time.Time
}

// await waits until r stopped, its stop timeout passed (it is then left
// behind) or hold fired; it reports the last.
func (g *Group) await(r *running, hold <-chan time.Time) (held bool) {
	select {
	case <-r.done:
		return false
	case <-hold:
		g.logger.Warn("a part is still stopping; stopping the next ones meanwhile",
			slog.String("part", r.Name), slog.Duration("after", r.Hold))
		return true
	case <-r.giveUp:
		g.logger.Warn("a part did not stop in time; leaving it to the process exit",
			slog.String("part", r.Name), slog.Duration("stop_timeout", cmp.Or(r.StopTimeout, g.stopTimeout)))
		return false
	}
}

// awaitReady closes g.ready, and calls OnReady, once every gate is closed,
// unless stopping is closed first.
func (g *Group) awaitReady(gates []<-chan struct{}, stopping <-chan struct{}) {
	for _, gate := range gates {
		select {
		case <-gate:
		case <-stopping:
			return
		}
	}
	select {
	case <-stopping:
		return
	default:
	}
	close(g.ready)
	if g.onReady != nil {
		g.onReady()
	}
}

// Close runs the closes added with OnClose, together, each within the stop
// timeout, and waits for them; later calls do nothing. Run calls it once
// the parts stopped; a service calls it itself only when it fails before
// Run (a New that gives up half way), never while Run runs.
func (g *Group) Close(ctx context.Context) {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		closes := g.closes
		g.mu.Unlock()
		var wg sync.WaitGroup
		for _, c := range closes {
			wg.Go(func() {
				done := make(chan error, 1)
				go func() { done <- c.close(ctx) }()
				select {
				case err := <-done:
					if err != nil {
						g.logger.Warn("closing "+c.name, slog.Any("error", err))
					}
				case <-g.clock.After(g.stopTimeout):
					g.logger.Warn("closing "+c.name+" did not end in time; leaving it to the process exit",
						slog.Duration("stop_timeout", g.stopTimeout))
				}
			})
		}
		wg.Wait()
	})
}
