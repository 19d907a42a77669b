// Package heldjobs writes jobs straight into the trigger's jobs table, as
// its projection stores their CREATED events, so that a memory benchmark
// can put millions of jobs in the trigger tier without registering them
// one by one. The jobs are daily crons `M H * * *` over the minutes of the
// day in four time zones, none due within 2 h: a trigger node holds them
// without firing them during the run.
package heldjobs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/jobspec"
	"github.com/cronmesh/cronmesh/libs/ring"
)

// Zones are the time zones of the held jobs' schedules.
var Zones = []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"}

// Copier is where the rows go: a pool or connection on the trigger's schema.
type Copier interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// Options say how many jobs to write and what each looks like.
type Options struct {
	// Jobs is how many rows to write.
	Jobs int
	// Streams is how many COPY streams write them in parallel (at least 1).
	Streams int
	// Namespace is every row's namespace.
	Namespace string
	// Partitions is the ring's size: a row's partition is
	// ring.Partition(id, Partitions), as the trigger computes it.
	Partitions int
	// Job is the definition of the i-th job, with its id, schedule and
	// creation time; its protobuf is the row's spec as it stands (the
	// trigger's store leaves out the etag, update time and description:
	// Job should too).
	Job func(id string, i int, schedule *registryv1.Schedule, created time.Time) *registryv1.Job
	// Progress, if set, is told the rows written so far every 10 s.
	Progress func(done, total int)
}

type combo struct {
	cron, tz string
	next     time.Time
}

// Copy writes the rows and returns how many distinct (minute of day, time
// zone) schedules they cycle through.
func Copy(ctx context.Context, db Copier, o Options) (int, error) {
	created := time.Now().UTC()
	combos, err := schedules(created)
	if err != nil {
		return 0, err
	}
	var done atomic.Int64
	if o.Progress != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Second):
					o.Progress(int(done.Load()), o.Jobs)
				}
			}
		}()
	}
	streams := max(1, o.Streams)
	chunk := (o.Jobs + streams - 1) / streams
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for w := range streams {
		lo, hi := w*chunk, min((w+1)*chunk, o.Jobs)
		if lo >= hi {
			continue
		}
		wg.Go(func() {
			i := lo
			now := time.Now().UTC().Truncate(time.Microsecond)
			src := pgx.CopyFromFunc(func() ([]any, error) {
				if i >= hi {
					return nil, nil
				}
				co := combos[i%len(combos)]
				id := uuid.Must(uuid.NewV7())
				schedule := &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: co.cron}, TimeZone: co.tz}
				spec, err := proto.Marshal(o.Job(id.String(), i, schedule, created))
				if err != nil {
					return nil, err
				}
				i++
				if i%10_000 == 0 {
					done.Add(10_000)
				}
				return []any{
					pgtype.UUID{Bytes: id, Valid: true}, o.Namespace, int32(ring.Partition(id.String(), o.Partitions)),
					int64(1), false, false, spec, co.next, now,
				}, nil
			})
			if _, err := db.CopyFrom(ctx, pgx.Identifier{"jobs"},
				[]string{"job_id", "namespace", "partition", "version", "deleted", "paused", "spec", "next_fire_at", "update_time"}, src); err != nil {
				errs <- fmt.Errorf("COPY rows %d-%d: %w", lo, hi, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return len(combos), nil
}

// schedules are the daily crons of every minute of the day in every zone
// whose next slot after created is at least 2 h away.
func schedules(created time.Time) ([]combo, error) {
	var combos []combo
	for _, tz := range Zones {
		for minute := range 24 * 60 {
			expr := fmt.Sprintf("%d %d * * *", minute%60, minute/60)
			sched, errs := jobspec.Schedule(&registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: expr}, TimeZone: tz}, created)
			if errs != nil {
				return nil, fmt.Errorf("schedule %q %s: %v", expr, tz, errs[0])
			}
			next, ok := sched.Next(created)
			if !ok || next.Sub(created) < 2*time.Hour {
				continue // would fire during the run
			}
			combos = append(combos, combo{cron: expr, tz: tz, next: next.UTC().Truncate(time.Microsecond)})
		}
	}
	return combos, nil
}
