package schedule

import (
	"testing"
	"time"
)

// BenchmarkNext measures one Next call per iteration, walking forward so that
// each call does the work of a real trigger tick.
func BenchmarkNext(b *testing.B) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	benchmarks := []struct {
		name string
		expr string
		loc  *time.Location
	}{
		{"every minute UTC", "* * * * *", time.UTC},
		{"every minute Berlin", "* * * * *", berlin},
		{"quarter hours Berlin", "*/15 * * * *", berlin},
		{"weekdays 9:00 Berlin", "0 9 * * 1-5", berlin},
		{"seconds expression Berlin", "*/20 30 9 * * *", berlin},
		{"leap day UTC", "0 0 29 2 *", time.UTC},
		{"last day Berlin", "0 0 L * *", berlin},
		{"last weekday Berlin", "0 18 LW * *", berlin},
		{"last Friday Berlin", "0 9 * * 5L", berlin},
		{"second Monday Berlin", "0 9 * * 1#2", berlin},
		{"fifth Friday UTC", "0 0 * * 5#5", time.UTC},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			c, err := ParseCron(bm.expr)
			if err != nil {
				b.Fatal(err)
			}
			s := NewCron(c, bm.loc)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			after := start
			b.ReportAllocs()
			for b.Loop() {
				next, ok := s.Next(after)
				if !ok || next.Year() > 2200 {
					next = start // keep the walk in a realistic range
				}
				after = next
			}
		})
	}
}

func BenchmarkParseCron(b *testing.B) {
	for _, expr := range []string{"0 9 * * MON-FRI", "0 9 15W,L * 1#2"} {
		b.Run(expr, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseCron(expr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
