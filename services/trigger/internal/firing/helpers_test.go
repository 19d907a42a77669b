package firing

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/clock"
)

// t0 is the tests' reference instant: a Monday, on a whole minute.
var t0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// created is the tests' job create time, well before t0.
var created = t0.Add(-30 * 24 * time.Hour)

type jobOpt func(*registryv1.Job)

func newJob(id string, sched *registryv1.Schedule, opts ...jobOpt) *registryv1.Job {
	j := &registryv1.Job{
		Id:            id,
		Schedule:      sched,
		CatchUpWindow: durationpb.New(time.Hour),
		CreateTime:    timestamppb.New(created),
		Version:       1,
	}
	for _, o := range opts {
		o(j)
	}
	return j
}

func cronSched(expr, tz string) *registryv1.Schedule {
	return &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: expr}, TimeZone: tz}
}

func everySched(every time.Duration, anchor time.Time) *registryv1.Schedule {
	return &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{
		Every: durationpb.New(every), AnchorTime: timestamppb.New(anchor),
	}}}
}

func atSched(at time.Time) *registryv1.Schedule {
	return &registryv1.Schedule{Kind: &registryv1.Schedule_At{At: timestamppb.New(at)}}
}

func afterSched(d time.Duration) *registryv1.Schedule {
	return &registryv1.Schedule{Kind: &registryv1.Schedule_After{After: durationpb.New(d)}}
}

func withCatchUp(d time.Duration) jobOpt {
	return func(j *registryv1.Job) { j.CatchUpWindow = durationpb.New(d) }
}

func withSpread(d time.Duration) jobOpt {
	return func(j *registryv1.Job) { j.SpreadWindow = durationpb.New(d) }
}

func withMaxRuns(n int64) jobOpt {
	return func(j *registryv1.Job) { j.MaxRuns = n }
}

func withEnd(end time.Time) jobOpt {
	return func(j *registryv1.Job) { j.Schedule.EndTime = timestamppb.New(end) }
}

func due(job *registryv1.Job, partition int, next time.Time) Due {
	return Due{JobID: job.GetId(), Partition: partition, Version: job.GetVersion(), NextFire: next, Job: job}
}

// row is a job's schedule row in fakeStore.
type row struct {
	due  Due
	done bool // no slot left
}

type commitCall struct {
	fences   []Fence
	advances []Advance
	fireTime time.Time
	result   CommitResult
	err      error
	ctxErr   error // the commit ctx's Err() when Commit ran
}

// fakeStore implements Store in memory with the real store's semantics:
// a fencing check per partition, compare-and-set on (NextFire, Version,
// RunsFired), and a ledger keyed (job, nominal).
type fakeStore struct {
	mu        sync.Mutex
	rows      map[string]*row
	epochs    map[int]int64 // stored partition epochs
	ledger    map[string]map[time.Time]SlotKind
	commits   []commitCall
	dueCalls  [][]int           // the partitions of each DueJobs call
	dueLoads  [][]PartitionLoad // each DueJobs call's loads
	dueErrs   []error           // returned by the next DueJobs calls, in order
	commitErr []error           // returned by the next Commit calls, in order

	// If set, DueJobs signals dueEntered after reading the rows and waits
	// for dueRelease before returning them.
	dueEntered chan struct{}
	dueRelease chan struct{}
	// If set, Commit signals commitEntered and waits for commitRelease.
	commitEntered chan struct{}
	commitRelease chan struct{}
}

func newFakeStore(dues ...Due) *fakeStore {
	s := &fakeStore{
		rows:   make(map[string]*row),
		epochs: make(map[int]int64),
		ledger: make(map[string]map[time.Time]SlotKind),
	}
	for _, d := range dues {
		s.put(d)
	}
	return s
}

func (s *fakeStore) put(d Due) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[d.JobID] = &row{due: d}
}

func (s *fakeStore) DueJobs(ctx context.Context, loads []PartitionLoad, before time.Time, limit int) ([]Due, error) {
	s.mu.Lock()
	after := make(map[int]time.Time, len(loads))
	partitions := make([]int, len(loads))
	for i, l := range loads {
		after[l.Partition] = l.After
		partitions[i] = l.Partition
	}
	s.dueCalls = append(s.dueCalls, partitions)
	s.dueLoads = append(s.dueLoads, slices.Clone(loads))
	if len(s.dueErrs) > 0 {
		err := s.dueErrs[0]
		s.dueErrs = s.dueErrs[1:]
		s.mu.Unlock()
		return nil, err
	}
	var out []Due
	for _, r := range s.rows {
		a, ok := after[r.due.Partition]
		if !r.done && ok && !r.due.NextFire.After(before) && (a.IsZero() || r.due.NextFire.After(a)) {
			out = append(out, r.due)
		}
	}
	entered, release := s.dueEntered, s.dueRelease
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Due) int {
		return cmp.Or(a.NextFire.Compare(b.NextFire), cmp.Compare(a.JobID, b.JobID))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	if entered != nil {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func (s *fakeStore) Commit(ctx context.Context, fences []Fence, advances []Advance, fireTime time.Time) (CommitResult, error) {
	s.mu.Lock()
	entered, release := s.commitEntered, s.commitRelease
	s.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
		<-release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	call := commitCall{
		fences: slices.Clone(fences), advances: slices.Clone(advances),
		fireTime: fireTime, ctxErr: ctx.Err(),
	}
	if len(s.commitErr) > 0 {
		call.err = s.commitErr[0]
		s.commitErr = s.commitErr[1:]
		s.commits = append(s.commits, call)
		return CommitResult{}, call.err
	}
	var res CommitResult
	fenced := map[int]bool{}
	for _, f := range fences {
		if s.epochs[f.Partition] > f.Epoch {
			fenced[f.Partition] = true
			res.Fenced = append(res.Fenced, f.Partition)
		} else {
			s.epochs[f.Partition] = f.Epoch
		}
	}
	for _, a := range advances {
		if fenced[a.Due.Partition] {
			continue
		}
		r := s.rows[a.Due.JobID]
		if r == nil || r.done || r.due.Version != a.Due.Version || !r.due.NextFire.Equal(a.Due.NextFire) ||
			r.due.RunsFired != a.Due.RunsFired {
			res.Stale = append(res.Stale, a.Due.JobID)
			continue
		}
		l := s.ledger[a.Due.JobID]
		if l == nil {
			l = make(map[time.Time]SlotKind)
			s.ledger[a.Due.JobID] = l
		}
		for _, sl := range a.Slots {
			if _, dup := l[sl.Nominal]; dup {
				res.Duplicates++
				continue
			}
			l[sl.Nominal] = sl.Kind
		}
		r.due.RunsFired += a.Runs()
		if a.To.IsZero() {
			r.done = true
		} else {
			r.due.NextFire = a.To
		}
		res.Advanced = append(res.Advanced, a.Due.JobID)
	}
	call.result = res
	s.commits = append(s.commits, call)
	return res, nil
}

func (s *fakeStore) calls() []commitCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commits)
}

func (s *fakeStore) loads() [][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.dueCalls)
}

// slotsOf returns the job's ledger, oldest first.
func (s *fakeStore) slotsOf(jobID string) []Slot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Slot
	for nominal, kind := range s.ledger[jobID] {
		out = append(out, Slot{Nominal: nominal, Kind: kind})
	}
	slices.SortFunc(out, func(a, b Slot) int { return a.Nominal.Compare(b.Nominal) })
	return out
}

// fakeOwnership is a ring the test sets.
type fakeOwnership struct {
	mu    sync.Mutex
	owned map[int]int64
	ch    chan struct{}
}

func newFakeOwnership(owned map[int]int64) *fakeOwnership {
	return &fakeOwnership{owned: owned, ch: make(chan struct{}, 1)}
}

func (o *fakeOwnership) Owned() map[int]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[int]int64, len(o.owned))
	for p, e := range o.owned {
		out[p] = e
	}
	return out
}

func (o *fakeOwnership) Changes() <-chan struct{} { return o.ch }

func (o *fakeOwnership) set(owned map[int]int64) {
	o.mu.Lock()
	o.owned = owned
	o.mu.Unlock()
	select {
	case o.ch <- struct{}{}:
	default:
	}
}

// fakeChanges is a JobChanges the test tells of changes, as the
// projection's notifications tell the real one. It starts reporting all.
type fakeChanges struct {
	mu      sync.Mutex
	all     bool
	changed map[int]bool
}

func newFakeChanges() *fakeChanges { return &fakeChanges{all: true, changed: make(map[int]bool)} }

func (c *fakeChanges) Changed() ([]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := c.all
	c.all = false
	var parts []int
	for p := range c.changed {
		parts = append(parts, p)
	}
	clear(c.changed)
	slices.Sort(parts)
	return parts, all
}

// change reports partitions changed; none means all.
func (c *fakeChanges) change(partitions ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(partitions) == 0 {
		c.all = true
	}
	for _, p := range partitions {
		c.changed[p] = true
	}
}

// ownAll owns partitions 0..n-1 at epoch 1.
func ownAll(n int) map[int]int64 {
	m := make(map[int]int64, n)
	for p := range n {
		m[p] = 1
	}
	return m
}

// harness runs an Engine on a Fake clock, with JobChanges as in
// production (a test may set it nil).
type harness struct {
	t       *testing.T
	clock   *clock.Fake
	store   *fakeStore
	own     *fakeOwnership
	changes *fakeChanges
	reg     *prometheus.Registry
	e       *Engine
	stop    context.CancelFunc
	done    chan error
}

func startEngine(t *testing.T, store *fakeStore, own *fakeOwnership, tune func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, clock: clock.NewFake(t0), store: store, own: own, changes: newFakeChanges(), reg: prometheus.NewRegistry()}
	opts := Options{Store: store, Ownership: own, Clock: h.clock, Metrics: h.reg, JobChanges: h.changes}
	if tune != nil {
		tune(&opts)
	}
	e, err := NewEngine(opts)
	require.NoError(t, err)
	e.testSync = make(chan syncRequest)
	h.e = e
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, h.wait())
	})
	h.sync()
	return h
}

// failAfter bounds every wait on the engine, so that a bug fails the test
// instead of hanging it. It is never a way to let time pass.
const failAfter = 10 * time.Second

// sync returns once the engine has handled everything signalled so far
// (timers due on the Fake clock, ownership changes, loads) and is idle.
func (h *harness) sync() { h.syncReq(false) }

// syncInFlight is sync that does not wait for commits in flight (a test
// holding one in the fake store).
func (h *harness) syncInFlight() { h.syncReq(true) }

func (h *harness) syncReq(inFlight bool) {
	h.t.Helper()
	req := syncRequest{done: make(chan struct{}), inFlight: inFlight}
	select {
	case h.e.testSync <- req:
	case <-time.After(failAfter):
		h.t.Fatal("engine does not take the sync request")
	}
	select {
	case <-req.done:
	case <-time.After(failAfter):
		h.t.Fatal("engine does not become idle")
	}
}

// advance moves the Fake clock and waits for the engine to handle it.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.sync()
}

// advanceInFlight moves the Fake clock and waits for the engine to handle
// it, not waiting for commits in flight.
func (h *harness) advanceInFlight(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.syncInFlight()
}

// advanceTo moves the Fake clock to t0+d.
func (h *harness) advanceTo(d time.Duration) {
	h.t.Helper()
	h.clock.Set(t0.Add(d))
	h.sync()
}

func (h *harness) wait() error {
	select {
	case err := <-h.done:
		h.done <- err // wait may be called again by Cleanup
		return err
	case <-time.After(failAfter):
		return errors.New("Run did not return")
	}
}

// metric returns the value of a counter or gauge (summed over labels
// matching kind, when given) or a histogram's sample count.
func (h *harness) metric(name string, kind ...string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	require.NoError(h.t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if len(kind) > 0 && lp.GetName() == "kind" && lp.GetValue() != kind[0] {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
