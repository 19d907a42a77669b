package firing

import (
	"fmt"
	"testing"
	"time"

	"github.com/cronmesh/cronmesh/libs/jobspec"
)

func BenchmarkPlan(b *testing.B) {
	cases := []struct {
		name string
		due  Due
		now  time.Time
	}{
		{"cron-utc", due(newJob("j", cronSched("*/5 * * * *", "UTC")), 0, t0), t0.Add(20 * time.Millisecond)},
		{"cron-berlin", due(newJob("j", cronSched("*/5 * * * *", "Europe/Berlin")), 0, t0), t0.Add(20 * time.Millisecond)},
		{"interval", due(newJob("j", everySched(time.Minute, t0)), 0, t0), t0.Add(20 * time.Millisecond)},
		{"catch-up-1000", due(newJob("j", everySched(time.Second, t0)), 0, t0), t0.Add(time.Hour)},
	}
	for _, c := range cases {
		// Plan as exported: converts the stored schedule every call (the
		// engine's first firing of a freshly loaded job).
		b.Run(c.name+"/convert", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Plan(c.due, c.now); err != nil {
					b.Fatal(err)
				}
			}
		})
		// With the schedule cached in the heap entry (a job re-pushed after
		// an advance within the lookahead).
		b.Run(c.name+"/cached", func(b *testing.B) {
			sched, err := scheduleOf(nil, c.due)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = Planner{}.plan(c.due, sched, c.now, c.now)
			}
		})
	}
}

// BenchmarkHeapSameSecond measures what the engine's goroutine does when
// 100,000 jobs are due on the same second: pop every entry and plan it (the
// Store.Commit round trips excluded). ns/op is for all 100,000; ns/job is
// per entry.
func BenchmarkHeapSameSecond(b *testing.B) {
	const n = 100_000
	jobs := make([]Due, n)
	for i := range jobs {
		tz := "UTC"
		if i%10 == 0 {
			tz = "Europe/Berlin" // one job in ten in a zone loaded from disk
		}
		jobs[i] = due(newJob(fmt.Sprintf("0190a5b2-7c3d-7e4f-8a9b-%012d", i), cronSched("* * * * *", tz)), i%256, t0)
	}
	now := t0.Add(20 * time.Millisecond)
	for _, cached := range []bool{false, true} {
		name := "convert"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			var scheds []entry
			if cached {
				scheds = make([]entry, n)
				for i, d := range jobs {
					s, err := scheduleOf(nil, d)
					if err != nil {
						b.Fatal(err)
					}
					scheds[i] = entry{sched: s, schedSet: true}
				}
			}
			p := Planner{}
			locs := new(jobspec.Locations) // as the engine: zones cached across jobs
			b.ReportAllocs()
			b.ResetTimer()
			var total time.Duration
			for range b.N {
				b.StopTimer()
				h := newTimerHeap()
				for i, d := range jobs {
					e := &entry{due: d, commitAt: d.NextFire.Add(spreadOf(d))}
					if cached {
						e.sched, e.schedSet = scheds[i].sched, true
					}
					h.push(e)
				}
				b.StartTimer()
				start := time.Now()
				slots := 0
				for h.Len() > 0 {
					e := h.pop()
					if !e.schedSet {
						s, err := scheduleOf(locs, e.due)
						if err != nil {
							b.Fatal(err)
						}
						e.sched, e.schedSet = s, true
					}
					slots += len(p.plan(e.due, e.sched, now, now).Slots)
				}
				total += time.Since(start)
				if slots != n {
					b.Fatalf("%d slots, want %d", slots, n)
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N)/n, "ns/job")
		})
	}
}
