package firing

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cronmesh/cronmesh/libs/clock"
	"github.com/cronmesh/cronmesh/libs/jobspec"
)

// Defaults of [Options].
const (
	DefaultLookahead     = 5 * time.Second
	DefaultLoadInterval  = time.Second
	DefaultBatchSize     = 1000
	DefaultBatchSlots    = 10_000
	DefaultLoadLimit     = 50_000
	DefaultCommitTimeout = 10 * time.Second
	DefaultCommits       = 4
	DefaultGroupWait     = 25 * time.Millisecond
	DefaultBackoff       = 100 * time.Millisecond
	DefaultMaxBackoff    = 5 * time.Second
	DefaultWholeLoad     = time.Minute
)

// Options configures [NewEngine]. Zero durations and sizes mean the
// defaults; negative ones are rejected.
type Options struct {
	// Store loads due jobs and commits their slots. Required. Called from
	// the Run goroutine (Commit) and from one loading goroutine (DueJobs, at
	// most one call in flight), so it must be safe for concurrent use.
	Store Store
	// Ownership tells which partitions this node may fire. Required.
	// Owned is read before every load and right before every commit, so it
	// must be cheap and must already return empty when the node's lease may
	// have expired: that is what stops this node firing at once.
	Ownership Ownership
	// Clock is the node's one time source. Default clock.Real{}.
	Clock clock.Clock
	// Logger receives load, plan and commit problems; nil discards them.
	Logger *slog.Logger
	// Tracer starts one "trigger.fire" span per commit batch. Default noop.
	Tracer trace.Tracer
	// Metrics, if non-nil, registers the trigger_* metrics (see metrics.go);
	// registering twice on one registerer fails NewEngine.
	Metrics prometheus.Registerer
	// Lookahead: jobs whose next nominal time is within this horizon are
	// loaded into memory, and a job advanced to a slot within it stays
	// there. Default 5s; at least LoadInterval, so that a slot is loaded
	// before its time even when it became due just after a load.
	Lookahead time.Duration
	// LoadInterval: owned partitions are loaded this often, and at once
	// when Ownership.Changes fires. Default 1s.
	LoadInterval time.Duration
	// JobChanges reports the partitions whose jobs were changed by anyone
	// but this engine. With it, a load reads a partition whole only when
	// its jobs changed, when the partition was just taken over or its
	// entries were dropped, or when WholeLoadInterval has passed; other
	// loads read only the jobs whose next slot came within the horizon
	// since the partition's last load. Every other job due within the
	// horizon is in memory already: this engine advanced it there, or an
	// earlier load brought it. Re-reading them all every second made a
	// load's work follow the jobs held rather than the slots coming due (a
	// job due within a 5 s lookahead was read five times per slot; ADR
	// 0023 measures what that cost). Nil: every load reads every owned
	// partition whole.
	JobChanges JobChanges
	// WholeLoadInterval: with JobChanges, every owned partition is still
	// read whole this often, a safety net for a change the watch could not
	// see (a row edited by hand). Default 1 min.
	WholeLoadInterval time.Duration
	// BatchSize is the maximum number of jobs (advances) per Commit.
	// Default 1000.
	BatchSize int
	// BatchSlots stops adding jobs to a batch once its slots reach this
	// number, so that jobs catching up on up to MaxSlotsPerAdvance slots
	// each do not make one transaction of millions of rows. Default 10,000.
	BatchSlots int
	// LoadLimit is the maximum number of rows per DueJobs call. Default
	// 50,000.
	LoadLimit int
	// OnTimeTolerance: see Planner. Default DefaultOnTimeTolerance (5s).
	OnTimeTolerance time.Duration
	// MaxSlotsPerAdvance: see Planner.MaxSlots. Default DefaultMaxSlots.
	MaxSlotsPerAdvance int
	// Commits is the number of Store.Commit calls that may run at once,
	// each on its own jobs. A commit is mostly waiting for PostgreSQL round
	// trips, so a few in flight let the slots of one second (a burst, or
	// thousands of jobs on the same cron second) reach the database in
	// parallel instead of queueing behind each other; the engine's loop
	// keeps planning the next batch meanwhile. Default 4.
	Commits int
	// GroupWait is how long slots due while a commit is in flight wait for
	// it to end before another commit starts for them (unless a full batch
	// is due): the latency a slot may give up so that a trickle of slots
	// makes fewer, larger commits. Default 25ms.
	GroupWait time.Duration
	// CommitTimeout bounds one Commit call. Commits do not stop when Run's
	// ctx is done (an interrupted commit would only be retried by the next
	// owner): this bounds how long shutdown may wait for one. Default 10s.
	CommitTimeout time.Duration
	// Backoff is the wait after a failed Commit before the same jobs (and
	// any other due ones) are tried again; it doubles with each failure, up
	// to MaxBackoff, with jitter in its upper half so that nodes do not
	// retry in step, and resets after a successful commit. Default 100ms.
	Backoff time.Duration
	// MaxBackoff caps Backoff. Default 5s, the firing promise: a longer wait
	// would turn every slot due meanwhile into a catch-up.
	MaxBackoff time.Duration
	// Lead commits each slot this long before its firing time; its
	// dispatch request carries the firing time as not_before, and the
	// dispatcher holds it until then. The commit, the relay's publish and
	// the broker's way are then done before the slot, and a second on
	// which thousands of slots are due starts their deliveries at once
	// instead of working through them after it. The cost: a change to a
	// job (pause, edit, delete) reaches only the slots committed after the
	// trigger projected it, so one made less than Lead before a slot
	// applies from the next. Zero (not a default: it is a choice) commits
	// at the firing time; Lookahead must be at least LoadInterval + Lead +
	// Gather.
	Lead time.Duration
	// Gather commits, with the slots whose commit time has come, every
	// slot due within Gather after them: a slot is then committed between
	// Lead and Lead + Gather before its firing time, and slots spread over
	// a second (crons on every second of the minute, intervals, one-time
	// jobs) go in a few large commits instead of many small ones, each of
	// which costs its transaction's round trips and fsync, the relay's
	// publish and a broker message (ADR 0023). The dispatcher holds every
	// request until its firing time, so no slot is delivered earlier; a
	// change to a job then reaches only the slots more than Lead + Gather
	// ahead. Zero: each slot is committed at its commit time.
	Gather time.Duration
	// CrowdSize and CrowdLead: when a load finds at least CrowdSize slots
	// with firing times in one second (a crowd: thousands of one-time jobs
	// due on one second, or many jobs on `0 0 * * *`), the commits of that
	// second's slots start CrowdLead before it instead of Lead, since
	// committing them takes longer than Lead: the commits of 100,000 slots
	// due on one second, started Lead before it, ended 3.5 s after it,
	// competing with the crowd's own deliveries. A change to a job reaches
	// only its slots more than CrowdLead ahead when they are in a crowd.
	// CrowdSize 0, or a CrowdLead not longer than Lead, turns it off.
	// Lookahead must be at least LoadInterval + CrowdLead + Gather.
	CrowdSize int
	CrowdLead time.Duration
	// CrowdFactor, when positive, makes a crowd a spike too: a second is
	// one only if it also holds at least CrowdFactor times the node's
	// usual second, the jobs it committed per second of firing time over
	// the last PaceWindow (see pace). What makes a second late is being
	// larger than the seconds before it, whose pipeline (commit, relay,
	// broker, dispatcher) keeps up with them: the sustained mix's
	// top-of-minute seconds, four times a usual second, reached the
	// dispatcher after their time with the 500 ms Lead. A node whose every
	// second is large (thousands of every-second crons) has no crowd:
	// committing all of them early would only make the dispatcher hold
	// more requests. A burst after a quiet time is a crowd however small
	// the usual second was.
	CrowdFactor float64
}

// Engine fires the slots of the partitions this node owns. Create it with
// [NewEngine] and call [Engine.Run].
type Engine struct {
	store       Store
	own         Ownership
	clock       clock.Clock
	log         *slog.Logger
	tracer      trace.Tracer
	m           metrics
	planner     Planner
	locations   *jobspec.Locations
	lookahead   time.Duration
	interval    time.Duration
	lead        time.Duration
	gather      time.Duration
	crowdSize   int
	crowdEarly  time.Duration // CrowdLead - Lead with crowds on, else 0: how much earlier a crowd starts
	crowdFactor float64
	jobChanges  JobChanges
	wholeLoad   time.Duration
	batch       int
	batchSlot   int
	limit       int
	timeout     time.Duration
	commits     int
	groupWait   time.Duration
	backoff     time.Duration
	maxBack     time.Duration

	running atomic.Bool
	// testSync, set only by this package's tests, lets a test wait until
	// Run has handled everything already signalled (see Run's loop); nil in
	// production, where receiving from it blocks forever.
	testSync chan syncRequest
}

// syncRequest is a test's wait for the loop to be idle: no load in flight
// and, unless inFlight, no commit either.
type syncRequest struct {
	done     chan struct{}
	inFlight bool
}

// NewEngine validates opts, fills defaults and registers the metrics. It
// fails when Store or Ownership is nil, a size or duration is negative,
// Lookahead is shorter than LoadInterval, or a metric cannot be registered.
func NewEngine(opts Options) (*Engine, error) {
	switch {
	case opts.Store == nil:
		return nil, errors.New("firing: Options.Store is required")
	case opts.Ownership == nil:
		return nil, errors.New("firing: Options.Ownership is required")
	case opts.Lookahead < 0, opts.LoadInterval < 0, opts.BatchSize < 0, opts.BatchSlots < 0,
		opts.LoadLimit < 0, opts.OnTimeTolerance < 0, opts.MaxSlotsPerAdvance < 0,
		opts.CommitTimeout < 0, opts.Commits < 0, opts.GroupWait < 0, opts.Backoff < 0, opts.MaxBackoff < 0,
		opts.Lead < 0, opts.Gather < 0, opts.WholeLoadInterval < 0, opts.CrowdSize < 0, opts.CrowdLead < 0,
		opts.CrowdFactor < 0:
		return nil, errors.New("firing: negative size or duration in Options")
	}
	e := &Engine{
		store:  opts.Store,
		own:    opts.Ownership,
		clock:  cmp.Or[clock.Clock](opts.Clock, clock.Real{}),
		log:    cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		tracer: cmp.Or[trace.Tracer](opts.Tracer, noop.NewTracerProvider().Tracer("")),
		planner: Planner{
			OnTimeTolerance: opts.OnTimeTolerance,
			MaxSlots:        opts.MaxSlotsPerAdvance,
		},
		locations:   new(jobspec.Locations),
		lookahead:   cmp.Or(opts.Lookahead, DefaultLookahead),
		interval:    cmp.Or(opts.LoadInterval, DefaultLoadInterval),
		lead:        opts.Lead,
		gather:      opts.Gather,
		crowdSize:   opts.CrowdSize,
		crowdFactor: opts.CrowdFactor,
		jobChanges:  opts.JobChanges,
		wholeLoad:   cmp.Or(opts.WholeLoadInterval, DefaultWholeLoad),
		batch:       cmp.Or(opts.BatchSize, DefaultBatchSize),
		batchSlot:   cmp.Or(opts.BatchSlots, DefaultBatchSlots),
		limit:       cmp.Or(opts.LoadLimit, DefaultLoadLimit),
		timeout:     cmp.Or(opts.CommitTimeout, DefaultCommitTimeout),
		commits:     cmp.Or(opts.Commits, DefaultCommits),
		groupWait:   cmp.Or(opts.GroupWait, DefaultGroupWait),
		backoff:     cmp.Or(opts.Backoff, DefaultBackoff),
		maxBack:     cmp.Or(opts.MaxBackoff, DefaultMaxBackoff),
	}
	e.maxBack = max(e.maxBack, e.backoff)
	if e.crowdSize > 0 {
		e.crowdEarly = max(opts.CrowdLead-opts.Lead, 0)
	}
	if e.lookahead < e.interval+e.lead+e.crowdEarly+e.gather {
		// A slot must be in memory by the earliest time it may be
		// committed (firing time - Lead or CrowdLead - Gather) even when
		// it became due just after a load.
		return nil, errors.New("firing: Options.Lookahead must be at least LoadInterval + Lead (or CrowdLead) + Gather")
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	e.m = m
	return e, nil
}

// Run fires until ctx is done, then returns nil. Commits in progress when
// ctx is done are finished (bounded by CommitTimeout), never cut in the
// middle; jobs waiting for a retry are abandoned, which is safe: the next
// owner loads them from the store. Store errors are logged, counted and
// retried, never returned; Run returns an error only when it is already
// running on this Engine.
//
// One goroutine does everything but DueJobs, which runs in a helper
// goroutine so that a slow load never delays a firing, and Store.Commit,
// up to Commits calls at once in their own goroutines (a job is in at most
// one of them; its result is applied by the loop):
//   - loads at start, every LoadInterval and on every ownership change
//     merge the due jobs of the partitions owned now into the heap (a held
//     job is replaced only by a newer version or a later next fire time);
//     with JobChanges, most loads read only each partition's new slots
//     (see Options.JobChanges and run.loaded);
//   - on an ownership change, entries of partitions no longer owned are
//     dropped at once;
//   - when the earliest firing time comes, due entries are popped (up to
//     BatchSize jobs / BatchSlots slots), planned, filtered by the
//     ownership read right before committing, and committed with the
//     partitions' fences in one Store.Commit; advanced jobs whose next slot
//     is within Lookahead go back into the heap without another load.
func (e *Engine) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("firing: Engine.Run is already running")
	}
	defer e.running.Store(false)

	r := &run{
		Engine:    e,
		heap:      newTimerHeap(),
		fenced:    make(map[int]int64),
		bad:       make(map[string]badJob),
		sinceLoad: make(map[string]struct{}),
		loaded:    make(map[int]partitionLoad),
		spoiled:   make(map[int]struct{}),
		loadDone:  make(chan loadResult, 1),
		inFlight:  make(map[string]struct{}),
		committed: make(chan commitOutcome, e.commits),
		pace:      newPace(e.clock.Now(), e.lookahead),
	}
	// The load goroutine ends soon after ctx is done (DueJobs gets ctx) and
	// its send never blocks (one load in flight, buffer of one); commit
	// goroutines finish their commit (bounded by CommitTimeout) and never
	// block either (at most Commits in flight, buffer of Commits).
	defer r.wg.Wait()
	defer e.m.heapSize.Set(0)
	defer e.m.crowds.Set(0)

	r.changes = e.own.Changes()
	r.loadTick = e.clock.After(e.interval)
	r.startLoad(ctx)
	var syncs []syncRequest
	for {
		if ctx.Err() != nil {
			return nil
		}
		r.armFireTimer()
		e.m.heapSize.Set(float64(r.heap.Len()))
		// A test's sync request is taken and answered only while nothing
		// else is ready, so "answered" means "everything signalled before the
		// request has been handled".
		var syncC chan syncRequest
		if e.testSync != nil && r.idle() {
			syncs = r.answer(syncs)
			syncC = e.testSync
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.changes:
			r.onChange(ctx)
		case res := <-r.loadDone:
			r.onLoaded(ctx, res)
		case <-r.loadTick:
			r.onLoadTick(ctx)
		case <-r.fireC:
			r.onFireTimer(ctx)
		case out := <-r.committed:
			r.finish(out)
		case req := <-syncC:
			syncs = append(syncs, req)
		}
	}
}

// idle says whether nothing is waiting to be handled. Every source the loop
// selects on is a buffered channel (the ownership's changes, the clock's
// timers, loadDone, committed), so a channel's length is its readiness.
func (r *run) idle() bool {
	return len(r.changes) == 0 && len(r.loadDone) == 0 && len(r.loadTick) == 0 &&
		len(r.fireC) == 0 && len(r.committed) == 0
}

// answer answers the sync requests that the run's state now satisfies and
// returns the rest.
func (r *run) answer(syncs []syncRequest) []syncRequest {
	if r.loading {
		return syncs
	}
	return slices.DeleteFunc(syncs, func(req syncRequest) bool {
		if req.inFlight || r.commits == 0 {
			close(req.done)
			return true
		}
		return false
	})
}

// onLoadTick starts the periodic reload and arms the next one.
func (r *run) onLoadTick(ctx context.Context) {
	r.loadTick = r.clock.After(r.interval)
	r.startLoad(ctx)
}

// onFireTimer fires what is due; armFireTimer arms the next timer.
func (r *run) onFireTimer(ctx context.Context) {
	r.fireC = nil
	r.fire(ctx)
}

// run is the state of one Run call, touched only by its goroutine.
type run struct {
	*Engine
	heap *timerHeap
	// fenced holds the partitions a commit was fenced on, with the epoch we
	// held then: they are not loaded or fired again until the ring gives
	// them to us at another epoch (or takes them away).
	fenced map[int]int64
	// bad holds the jobs whose stored definition could not be planned, so
	// that reloading the same row does not log and count it every second.
	bad map[string]badJob
	// loading: a DueJobs call is in flight; loadAgain: another load was
	// asked for meanwhile.
	loading, loadAgain bool
	// sinceLoad holds the jobs committed while a load was in flight: the
	// load may have read their rows before the commit, so its copies of
	// them are ignored (the next load reads them again).
	sinceLoad map[string]struct{}
	// loaded holds, per partition, how far its loads have brought its jobs
	// into memory: every job of it whose next slot is at or before
	// `before`, read while we held it at `epoch`, is in the heap, in a
	// commit in flight, known bad, or advanced past that time. The next
	// load reads only the jobs after `before`. A partition without an entry
	// (or held at another epoch now) is read whole; forget removes the
	// entry of a partition whose jobs left memory by any other way.
	loaded map[int]partitionLoad
	// inLoad is what the load in flight reads: each partition's epoch, its
	// before and whether it is read whole. spoiled holds the partitions
	// forgotten while it was in flight: its result does not make them
	// loaded.
	inLoad  map[int]partitionLoad
	spoiled map[int]struct{}
	// wholeAt is when every partition was last read whole.
	wholeAt  time.Time
	loadDone chan loadResult
	// inFlight holds the jobs of the commits in flight (commits of them):
	// they are out of the heap, and a load's copy of one is ignored.
	inFlight  map[string]struct{}
	commits   int
	committed chan commitOutcome
	wg        sync.WaitGroup
	// changes is the ownership's Changes; loadTick fires at the next
	// periodic reload.
	changes  <-chan struct{}
	loadTick <-chan time.Time
	// fireC fires at fireCAt; it is replaced only by an earlier timer, and a
	// wake-up with nothing due is harmless.
	fireC   <-chan time.Time
	fireCAt time.Time
	// retryAt, after a failed commit, holds firing back until then.
	retryAt time.Time
	retry   time.Duration
	// crowds are the seconds the last load found crowded (see
	// Options.CrowdSize), earliest first.
	crowds []crowd
	// pace counts the jobs committed per second of firing time: the usual
	// second a crowd is a spike over (Options.CrowdFactor).
	pace *pace
}

// crowd is a second of firing times holding at least CrowdSize slots (and
// CrowdFactor times the usual second): from
// start on, commits take every entry whose commit time is at or before
// last.
type crowd struct {
	start, last time.Time
}

type badJob struct {
	partition int
	version   int64
	nextFire  time.Time
}

type partitionLoad struct {
	epoch  int64
	before time.Time
	whole  bool
}

type loadResult struct {
	dues []Due
	err  error
}

// mayFire says whether this node may fire partition p now.
func (r *run) mayFire(owned map[int]int64, p int) bool {
	epoch, ok := owned[p]
	if !ok {
		return false
	}
	fencedAt, fenced := r.fenced[p]
	return !fenced || fencedAt != epoch
}

// startLoad starts loading the owned partitions, or asks for another load
// after the one in flight. With nothing owned it clears the heap instead.
func (r *run) startLoad(ctx context.Context) {
	if r.loading {
		r.loadAgain = true
		return
	}
	owned := r.own.Owned()
	parts := make([]int, 0, len(owned))
	for p := range owned {
		if r.mayFire(owned, p) {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		r.dropUnowned(owned)
		return
	}
	slices.Sort(parts) // deterministic queries, easier to read in logs and tests
	now := r.clock.Now()
	before := now.Add(r.lookahead)
	r.forgetChanged(now)
	loads := make([]PartitionLoad, len(parts))
	r.inLoad = make(map[int]partitionLoad, len(parts))
	clear(r.spoiled)
	for i, p := range parts {
		loads[i] = PartitionLoad{Partition: p}
		if prev, ok := r.loaded[p]; ok && prev.epoch == owned[p] {
			loads[i].After = prev.before
			r.m.sliceReads.Inc()
		} else {
			r.m.wholeReads.Inc()
		}
		r.inLoad[p] = partitionLoad{epoch: owned[p], before: before, whole: loads[i].After.IsZero()}
	}
	r.loading = true
	r.wg.Go(func() {
		dues, err := r.store.DueJobs(ctx, loads, before, r.limit)
		r.loadDone <- loadResult{dues: dues, err: err}
	})
}

// forgetChanged forgets the partitions JobChanges reports changed, or all
// of them when it cannot tell or WholeLoadInterval has passed, so that the
// load about to start reads them whole.
func (r *run) forgetChanged(now time.Time) {
	if r.jobChanges == nil {
		clear(r.loaded)
		return
	}
	parts, all := r.jobChanges.Changed()
	if all || now.Sub(r.wholeAt) >= r.wholeLoad || now.Before(r.wholeAt) {
		clear(r.loaded)
		r.wholeAt = now
		return
	}
	for _, p := range parts {
		delete(r.loaded, p)
	}
}

// forget makes the next load read partition p whole: some of its due jobs
// left memory (dropped, stale, not advanced), and only a whole read brings
// them back.
func (r *run) forget(p int) {
	delete(r.loaded, p)
	if _, ok := r.inLoad[p]; ok {
		r.spoiled[p] = struct{}{}
	}
}

// onLoaded merges a load's due jobs into the heap.
func (r *run) onLoaded(ctx context.Context, res loadResult) {
	r.loading = false
	inLoad := r.inLoad
	r.inLoad = nil
	defer func() {
		clear(r.sinceLoad)
		if r.loadAgain {
			r.loadAgain = false
			r.startLoad(ctx)
		}
	}()
	if res.err != nil {
		if ctx.Err() == nil {
			r.m.loadErrors.Inc()
			r.log.Warn("firing: cannot load due jobs; retrying at the next load", "error", res.err)
		}
		return
	}
	r.m.loadedRows.Add(float64(len(res.dues)))
	// Ownership may have changed during the load: keep only what is ours now.
	owned := r.own.Owned()
	var badSeen map[string]bool
	if len(r.bad) > 0 {
		badSeen = make(map[string]bool, len(r.bad))
	}
	for _, d := range res.dues {
		if !r.mayFire(owned, d.Partition) {
			continue
		}
		if _, ok := r.sinceLoad[d.JobID]; ok {
			continue
		}
		if _, ok := r.inFlight[d.JobID]; ok {
			continue
		}
		if b, ok := r.bad[d.JobID]; ok {
			if b.version == d.Version && b.nextFire.Equal(d.NextFire) {
				badSeen[d.JobID] = true
				continue
			}
			delete(r.bad, d.JobID) // changed: try again
		}
		held := r.heap.get(d.JobID)
		switch {
		case held == nil:
			r.heap.push(&entry{due: d, commitAt: r.commitAt(d)})
		case newer(d, held.due):
			held.due = d
			held.commitAt = r.commitAt(d)
			held.schedSet = false
			r.heap.fix(held.index)
		}
	}
	r.findCrowds()
	// A load cut at the limit may have left out jobs of any partition: the
	// next one reads from where this one started.
	if len(res.dues) >= r.limit {
		return
	}
	for p, l := range inLoad {
		if _, spoiled := r.spoiled[p]; !spoiled && r.mayFire(owned, p) && owned[p] == l.epoch {
			r.loaded[p] = l
		}
	}
	// A bad job stays due (it is never advanced), so a complete whole read
	// of its partition that did not return it means it was deleted or
	// fixed: forget it.
	for id, b := range r.bad {
		if !badSeen[id] && inLoad[b.partition].whole {
			delete(r.bad, id)
		}
	}
}

// commitAt is when d's next slot is committed at the latest: its firing
// time less the Lead. fire plans each job up to its cutoff plus the Lead,
// so that the slot the heap holds it for is the one the planner finds due.
func (e *Engine) commitAt(d Due) time.Time {
	return d.FiringTime(d.NextFire).Add(-e.lead)
}

// covered is the latest next slot of partition p that its loads will not
// read again: the before of its last load or of the one in flight, or
// horizon if later.
func (r *run) covered(p int, horizon time.Time) time.Time {
	for _, l := range []partitionLoad{r.loaded[p], r.inLoad[p]} {
		if l.before.After(horizon) {
			horizon = l.before
		}
	}
	return horizon
}

// newer says whether the loaded row d is newer than the held h: a higher
// version, or the same version advanced further. An older copy (a load that
// read the row before our own commit advanced it) never replaces ours.
func newer(d, h Due) bool {
	if d.Version != h.Version {
		return d.Version > h.Version
	}
	return d.NextFire.After(h.NextFire)
}

// onChange drops the entries of partitions no longer owned and reloads.
func (r *run) onChange(ctx context.Context) {
	owned := r.own.Owned()
	for p, epoch := range r.fenced {
		if cur, ok := owned[p]; !ok || cur != epoch {
			delete(r.fenced, p) // taken away, or given back at a new epoch
		}
	}
	for id, b := range r.bad {
		if _, ok := owned[b.partition]; !ok {
			delete(r.bad, id)
		}
	}
	r.dropUnowned(owned)
	r.startLoad(ctx)
}

// dropUnowned removes the entries this node may not fire any more.
func (r *run) dropUnowned(owned map[int]int64) {
	for _, parts := range []map[int]partitionLoad{r.loaded, r.inLoad} {
		for p := range parts {
			if !r.mayFire(owned, p) {
				r.forget(p)
			}
		}
	}
	if len(owned) == 0 {
		r.heap.clear()
		return
	}
	r.heap.filter(func(e *entry) bool { return r.mayFire(owned, e.due.Partition) })
}

// findCrowds counts the held entries per second of firing time and keeps
// the seconds holding at least CrowdSize, and CrowdFactor times the node's
// usual second, as crowds. It runs after each load, over the whole heap:
// the entries within the lookahead.
func (r *run) findCrowds() {
	r.crowds = r.crowds[:0]
	defer func() { r.m.crowds.Set(float64(len(r.crowds))) }()
	if r.crowdEarly == 0 || r.heap.Len() < r.crowdSize {
		return
	}
	least := r.crowdSize
	if r.crowdFactor > 0 {
		least = max(least, int(math.Ceil(r.crowdFactor*r.pace.usual(r.clock.Now()))))
	}
	perSecond := make(map[time.Time]int)
	for _, e := range r.heap.items {
		perSecond[e.commitAt.Add(r.lead).Truncate(time.Second)]++
	}
	for second, n := range perSecond {
		if n >= least {
			r.crowds = append(r.crowds, crowd{
				start: second.Add(-r.lead - r.crowdEarly),
				last:  second.Add(time.Second - r.lead - time.Nanosecond),
			})
		}
	}
	slices.SortFunc(r.crowds, func(a, b crowd) int { return a.start.Compare(b.start) })
}

// cutoff is the latest commit time a commit at now takes: Gather ahead, or
// the last of a crowd whose start has come.
func (r *run) cutoff(now time.Time) time.Time {
	cutoff := now.Add(r.gather)
	for _, c := range r.crowds {
		if now.Before(c.start) {
			break
		}
		if c.last.After(cutoff) {
			cutoff = c.last
		}
	}
	return cutoff
}

// armFireTimer makes sure a timer fires at the earliest firing time (or at
// the retry time after a failed commit).
func (r *run) armFireTimer() {
	top := r.heap.peek()
	if top == nil || r.commits >= r.Engine.commits {
		// Nothing to fire, or no commit slot free: a finishing commit
		// brings the loop back here. A pending timer may still fire:
		// harmless.
		return
	}
	at := top.commitAt
	for _, c := range r.crowds {
		if !top.commitAt.After(c.last) {
			if c.start.Before(at) {
				at = c.start // a crowd's early start
			}
			break
		}
	}
	// With a commit in flight, another starts at once only for a full batch
	// (a burst); slots that trickle in meanwhile wait up to GroupWait for
	// the commit to end and then go together in one (group commit). Many
	// tiny concurrent commits would each pay the transaction's round trips
	// and its fsync (measured at 5,000 slots/s spread over each second:
	// 314 commits/s of 16 slots), while waiting for a slow commit without
	// a bound makes every slot behind it as late as the commit is slow.
	if r.commits > 0 && r.heap.countDue(r.cutoff(r.clock.Now()), r.batch) < r.batch {
		at = at.Add(r.groupWait)
	}
	if at.Before(r.retryAt) {
		at = r.retryAt
	}
	if r.fireC != nil && !r.fireCAt.After(at) {
		return
	}
	r.fireC = r.clock.After(at.Sub(r.clock.Now()))
	r.fireCAt = at
}

// fire commits one batch of the entries due now. More due entries are left
// for the next turn of the loop (whose timer is then already expired), so
// that loads and ownership changes are handled between batches.
func (r *run) fire(ctx context.Context) {
	now := r.clock.Now()
	if now.Before(r.retryAt) || r.commits >= r.Engine.commits {
		return
	}
	var (
		batch    []*entry
		advances []Advance
		slots    int
	)
	cutoff := r.cutoff(now)
	for len(advances) < r.batch && slots < r.batchSlot {
		e := r.heap.peek()
		if e == nil || e.commitAt.After(cutoff) {
			break
		}
		r.heap.pop()
		if !e.schedSet {
			sched, err := scheduleOf(r.locations, e.due)
			if err != nil {
				// Left in the store untouched: see Planner.Plan for why not
				// recorded as missed. The next version of the job, or
				// another node, may fire it.
				r.m.planErrors.Inc()
				r.log.Error("firing: cannot plan a due job; leaving it unfired",
					"job_id", e.due.JobID, "version", e.due.Version, "error", err)
				r.bad[e.due.JobID] = badJob{partition: e.due.Partition, version: e.due.Version, nextFire: e.due.NextFire}
				continue
			}
			e.sched, e.schedSet = sched, true
		}
		adv := r.planner.plan(e.due, e.sched, now, cutoff.Add(r.lead))
		if len(adv.Slots) == 0 && !adv.To.IsZero() {
			r.forget(e.due.Partition) // cannot happen (commitAt <= cutoff); the next load re-reads it
			continue
		}
		batch = append(batch, e)
		advances = append(advances, adv)
		slots += len(adv.Slots)
	}
	if len(advances) == 0 {
		return
	}

	// Read right before committing: a partition lost since loading is not
	// fired, even if its lease on the server has not expired yet.
	owned := r.own.Owned()
	kept := 0
	epochs := make(map[int]int64)
	for i, adv := range advances {
		p := adv.Due.Partition
		if !r.mayFire(owned, p) {
			r.forget(p)
			continue
		}
		epochs[p] = owned[p]
		batch[kept], advances[kept] = batch[i], adv
		kept++
	}
	if dropped := len(advances) - kept; dropped > 0 {
		r.log.Debug("firing: dropped due jobs of partitions no longer owned", "jobs", dropped)
	}
	batch, advances = batch[:kept], advances[:kept]
	if len(advances) == 0 {
		return
	}
	fences := make([]Fence, 0, len(epochs))
	for p, epoch := range epochs {
		fences = append(fences, Fence{Partition: p, Epoch: epoch})
	}
	slices.SortFunc(fences, func(a, b Fence) int { return cmp.Compare(a.Partition, b.Partition) })
	r.commit(ctx, now, fences, batch, advances)
}

// commitOutcome is what a commit goroutine hands back to the loop.
type commitOutcome struct {
	fences   []Fence
	batch    []*entry
	advances []Advance
	res      CommitResult
	err      error
	done     time.Time
}

// commit starts one Store.Commit in its own goroutine; finish applies its
// result on the loop.
func (r *run) commit(ctx context.Context, now time.Time, fences []Fence, batch []*entry, advances []Advance) {
	slotCount := 0
	for _, adv := range advances {
		slotCount += len(adv.Slots)
	}
	partitions := make([]int64, len(fences))
	for i, f := range fences {
		partitions[i] = int64(f.Partition)
	}
	for _, e := range batch {
		r.inFlight[e.due.JobID] = struct{}{}
	}
	r.commits++
	r.wg.Go(func() {
		// Not cancelled with Run's ctx: a commit is finished, not cut short.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
		defer cancel()
		cctx, span := r.tracer.Start(cctx, "trigger.fire", trace.WithAttributes(
			attribute.Int("cronmesh.trigger.jobs", len(advances)),
			attribute.Int("cronmesh.trigger.slots", slotCount),
			attribute.Int64Slice("cronmesh.trigger.partitions", partitions),
		))
		defer span.End()

		start := r.clock.Now()
		res, err := r.store.Commit(cctx, fences, advances, now)
		done := r.clock.Now()
		r.m.commitDuration.Observe(done.Sub(start).Seconds())
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "commit failed")
		} else {
			span.SetAttributes(
				attribute.Int("cronmesh.trigger.advanced", len(res.Advanced)),
				attribute.Int("cronmesh.trigger.stale", len(res.Stale)),
				attribute.Int("cronmesh.trigger.duplicates", res.Duplicates),
				attribute.Int("cronmesh.trigger.fenced", len(res.Fenced)),
			)
		}
		r.committed <- commitOutcome{fences: fences, batch: batch, advances: advances, res: res, err: err, done: done}
	})
}

// finish applies a commit's result: on failure the batch goes back into
// the heap behind a backoff; on success the fenced partitions are dropped
// and the advanced jobs whose next slot is near go back into the heap.
func (r *run) finish(out commitOutcome) {
	r.commits--
	for _, e := range out.batch {
		delete(r.inFlight, e.due.JobID)
	}
	fences, batch, advances, res, err, done := out.fences, out.batch, out.advances, out.res, out.err, out.done
	if err != nil {
		r.m.commitErrors.Inc()
		// Still due: back into the heap, retried after the backoff. A
		// commit that failed after all (or half-way) is safe to retry: the
		// CAS fails (stale) for jobs it did advance, and the ledger key
		// dedupes their slots.
		for _, e := range batch {
			if r.heap.get(e.due.JobID) == nil {
				r.heap.push(e)
			}
		}
		r.retry = min(max(2*r.retry, r.backoff), r.maxBack)
		wait := r.retry/2 + rand.N(r.retry/2+1) // jitter: nodes do not retry in step
		r.retryAt = done.Add(wait)
		slots := 0
		for _, adv := range advances {
			slots += len(adv.Slots)
		}
		r.log.Warn("firing: commit failed; retrying", "jobs", len(advances), "slots", slots,
			"retry_in", wait, "error", err)
		return
	}
	r.retry, r.retryAt = 0, time.Time{}
	r.m.stale.Add(float64(len(res.Stale)))
	r.m.duplicates.Add(float64(res.Duplicates))

	var fenced map[int]bool
	if len(res.Fenced) > 0 {
		r.m.fenced.Add(float64(len(res.Fenced)))
		fenced = make(map[int]bool, len(res.Fenced))
		for _, p := range res.Fenced {
			fenced[p] = true
			r.forget(p)
			for _, f := range fences {
				if f.Partition == p {
					r.fenced[p] = f.Epoch
				}
			}
		}
		r.heap.filter(func(e *entry) bool { return !fenced[e.due.Partition] })
		r.log.Warn("firing: fenced: a newer epoch owns partitions; no longer firing them", "partitions", res.Fenced)
	}
	advanced := make(map[string]struct{}, len(res.Advanced))
	for _, id := range res.Advanced {
		advanced[id] = struct{}{}
	}

	horizon := done.Add(r.lookahead)
	for i, adv := range advances {
		e := batch[i]
		if r.loading {
			r.sinceLoad[e.due.JobID] = struct{}{}
		}
		if _, ok := advanced[e.due.JobID]; !ok || fenced[e.due.Partition] {
			// Stale (the row changed), fenced, or not reported: the next
			// load reads the row as it is now.
			r.forget(e.due.Partition)
			continue
		}
		r.pace.add(e.commitAt.Add(r.lead))
		// offset is the job's spread offset less the Lead: a slot's commit
		// time is its nominal time plus it.
		offset := e.commitAt.Sub(e.due.NextFire)
		for _, s := range adv.Slots {
			switch s.Kind {
			case KindScheduled:
				r.m.scheduled.Inc()
				r.m.lateness.Observe(done.Sub(s.Nominal.Add(offset)).Seconds())
			case KindCatchUp:
				r.m.catchUp.Inc()
				r.m.lateness.Observe(done.Sub(s.Nominal.Add(offset)).Seconds())
			case KindMissed:
				r.m.missed.Inc()
			}
		}
		// The CAS moved the row to To, and its runs on by the advance's,
		// with the version unchanged: keep firing from memory while the
		// next slot is near, or within what a load read (or is reading) of
		// the partition, which the next load does not read again. A job
		// that completed (To zero) leaves memory.
		if !adv.To.IsZero() && !adv.To.After(r.covered(e.due.Partition, horizon)) && r.heap.get(e.due.JobID) == nil {
			e.due.NextFire = adv.To
			e.due.RunsFired += adv.Runs()
			e.commitAt = adv.To.Add(offset)
			r.heap.push(e)
		}
	}
}
