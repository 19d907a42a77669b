package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/proto"

	"github.com/cronmesh/cronmesh/bench/internal/pause"
	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/execid"
)

// arrival is the first arrival of one slot.
type arrival struct {
	job     int32
	nominal int64 // unix nanoseconds
	arrived int64 // unix nanoseconds, when the consumer received it
	fired   int64 // unix nanoseconds, the message's fire_time (the commit)
}

func (a arrival) lateness() time.Duration { return time.Duration(a.arrived - a.nominal) }
func (a arrival) commitLateness() time.Duration {
	return time.Duration(a.fired - a.nominal)
}

// recorder is the bench's own record of what reached the dispatch queue:
// the verdict is taken from the queue, not from the trigger's tables.
type recorder struct {
	mu        sync.Mutex
	idx       map[string]int32
	offsets   []time.Duration // per job: its spread offset, added to the nominal time for lateness
	base      int64           // unix second of the first tracked nominal second
	secs      int64           // tracked nominal seconds per job
	counts    []uint8
	arrivals  []arrival
	perSecond map[int64]int // messages received per wall-clock second
	total     int
	duplicate int
	outside   int // tracked job, nominal outside the tracked seconds
	unknown   int // not one of our jobs
	problems  []string
	last      time.Time
}

// newRecorder tracks jobs' slots with nominal seconds in [from, from+secs).
func newRecorder(jobs []string, from time.Time, secs int) *recorder {
	r := &recorder{
		idx:       make(map[string]int32, len(jobs)),
		base:      from.Unix(),
		secs:      int64(secs),
		counts:    make([]uint8, len(jobs)*secs),
		perSecond: map[int64]int{},
	}
	for i, id := range jobs {
		r.idx[id] = int32(i)
	}
	return r
}

func (r *recorder) add(req *dispatchv1.DispatchRequest, at time.Time) {
	nominal := req.GetNominalTime().AsTime()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	r.last = at
	r.perSecond[at.Unix()]++
	if len(r.problems) < 20 {
		if want := execid.For(req.JobId, nominal); req.ExecutionId != want {
			r.problems = append(r.problems, fmt.Sprintf("job %s at %s: execution id %s, want %s", req.JobId, nominal, req.ExecutionId, want))
		}
		if req.Attempt != 1 {
			r.problems = append(r.problems, fmt.Sprintf("job %s at %s: attempt %d", req.JobId, nominal, req.Attempt))
		}
	}
	j, ok := r.idx[req.JobId]
	if !ok {
		r.unknown++
		return
	}
	s := nominal.Unix() - r.base
	if s < 0 || s >= r.secs {
		r.outside++
		return
	}
	c := &r.counts[int64(j)*r.secs+s]
	if *c < math.MaxUint8 {
		*c++
	}
	if *c > 1 {
		r.duplicate++
		return
	}
	due := nominal
	if r.offsets != nil {
		due = due.Add(r.offsets[j])
	}
	r.arrivals = append(r.arrivals, arrival{job: j, nominal: due.UnixNano(), arrived: at.UnixNano(), fired: req.GetFireTime().AsTime().UnixNano()})
}

func (r *recorder) bad(problem string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.problems) < 20 {
		r.problems = append(r.problems, problem)
	}
}

func (r *recorder) received() (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total, r.last
}

// consume records every dispatch request of the per-priority dispatch
// queues of exchange/queuePrefix (the bench's jobs are all of normal
// priority; reading every queue also catches a misrouted one) until ctx is
// done; the returned wait blocks until the consumers stopped.
func consume(ctx context.Context, conn *amqp091.Connection, exchange, queuePrefix string, rec *recorder) (func(), error) {
	var wg sync.WaitGroup
	for _, b := range broker.DispatchQueues(exchange, queuePrefix) {
		ch, err := conn.Channel()
		if err != nil {
			return nil, err
		}
		if err := ch.Qos(5000, 0, false); err != nil {
			ch.Close()
			return nil, err
		}
		deliveries, err := ch.Consume(b.Queue, "trigger-bench", true, false, false, false, nil)
		if err != nil {
			ch.Close()
			return nil, fmt.Errorf("consume %s: %w", b.Queue, err)
		}
		wg.Go(func() {
			defer ch.Close()
			for {
				select {
				case <-ctx.Done():
					return
				case d, ok := <-deliveries:
					if !ok {
						return
					}
					now := time.Now()
					msgs, err := broker.DeliveryMessages(d)
					if err != nil {
						rec.bad(fmt.Sprintf("undecodable dispatch message %q: %v", d.MessageId, err))
						continue
					}
					for _, m := range msgs {
						req := &dispatchv1.DispatchRequest{}
						if err := proto.Unmarshal(m.Payload, req); err != nil {
							rec.bad(fmt.Sprintf("undecodable dispatch request %q: %v", m.UUID, err))
							continue
						}
						rec.add(req, now)
					}
				}
			}
		})
	}
	return wg.Wait, nil
}

// waitDrained waits until no message arrived for quiet (at most max).
func (r *recorder) waitDrained(ctx context.Context, quiet, max time.Duration) {
	deadline := time.Now().Add(max)
	last, since := -1, time.Now()
	for time.Since(since) < quiet && time.Now().Before(deadline) {
		if pause.For(ctx, 100*time.Millisecond) != nil {
			return
		}
		if n, _ := r.received(); n != last {
			last, since = n, time.Now()
		}
	}
}

// slotCheck counts, for the jobs selected by want (nil: all) and every
// nominal second in [from, to], the slots that never arrived and those
// that arrived more than once.
type slotCheck struct {
	slots, missing, duplicated int
	firstMissing               []string
}

func (r *recorder) check(jobs []string, want func(job int32) bool, from, to time.Time) slotCheck {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v slotCheck
	lo, hi := from.Unix()-r.base, to.Unix()-r.base
	lo, hi = max(lo, 0), min(hi, r.secs-1)
	for j := range int32(len(jobs)) {
		if want != nil && !want(j) {
			continue
		}
		for s := lo; s <= hi; s++ {
			v.slots++
			switch c := r.counts[int64(j)*r.secs+s]; {
			case c == 0:
				v.missing++
				if len(v.firstMissing) < 5 {
					v.firstMissing = append(v.firstMissing, fmt.Sprintf("%s@%s", jobs[j], time.Unix(r.base+s, 0).UTC().Format(time.TimeOnly)))
				}
			case c > 1:
				v.duplicated++
			}
		}
	}
	return v
}

// selectArrivals returns the first arrivals of slots with nominal time
// (plus the job's spread offset, if any) in [from, to) of the jobs selected by want (nil: all).
func (r *recorder) selectArrivals(want func(job int32) bool, from, to time.Time) []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []arrival
	for _, a := range r.arrivals {
		if a.nominal < from.UnixNano() || a.nominal >= to.UnixNano() {
			continue
		}
		if want != nil && !want(a.job) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// dist is a distribution of durations.
type dist struct {
	n                        int
	p50, p90, p99, p999, max time.Duration
	min, mean                time.Duration
}

func distOf(ds []time.Duration) dist {
	if len(ds) == 0 {
		return dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return dist{n: len(s), p50: q(.5), p90: q(.9), p99: q(.99), p999: q(.999), max: s[len(s)-1], min: s[0], mean: sum / time.Duration(len(s))}
}

func latenessDists(as []arrival) (arrive, commit dist) {
	a := make([]time.Duration, len(as))
	c := make([]time.Duration, len(as))
	for i, x := range as {
		a[i] = x.lateness()
		c[i] = x.commitLateness()
	}
	return distOf(a), distOf(c)
}
