package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

// BenchmarkCommit measures the firing transaction: 1,000 jobs advanced per
// Commit, each with one scheduled slot (fencing of every partition, the
// compare-and-set of 1,000 rows, 1,000 ledger rows and 1,000 outbox rows).
func BenchmarkCommit(b *testing.B) {
	const jobs = 1000
	e := newEnv(b)
	createTime := ts("2030-03-10T10:00:00Z")
	for range jobs {
		job := newJob(createTime, func(j *registryv1.Job) {
			j.Schedule = &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{Every: durationpb.New(time.Second)}}}
		})
		e.apply(b, created(job), store.Upserted)
	}
	due, err := e.store.DueJobs(b.Context(), wholeLoads(allPartitions()), ts("2100-01-01T00:00:00Z"), jobs)
	require.NoError(b, err)
	require.Len(b, due, jobs)
	advances := make([]firing.Advance, jobs)
	fence := fences(1)
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		for i := range advances {
			d := &due[i]
			advances[i] = firing.Advance{Due: *d, Slots: []firing.Slot{{Nominal: d.NextFire, Kind: firing.KindScheduled}}, To: d.NextFire.Add(time.Second)}
			d.NextFire = d.NextFire.Add(time.Second)
		}
		res, err := e.store.Commit(b.Context(), fence, advances, advances[0].Due.NextFire)
		if err != nil || len(res.Advanced) != jobs {
			b.Fatalf("commit: %v, %d advanced (%+v)", err, len(res.Advanced), res)
		}
	}
	b.ReportMetric(float64(b.N*jobs)/time.Since(start).Seconds(), "slots/s")
}
