package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/procstat"
)

// The process groups the sampler reports besides the trigger nodes and
// procstat's PostgreSQL and RabbitMQ.
const (
	groupPostgres = procstat.Postgres
	groupRabbit   = procstat.RabbitMQ
	groupBench    = "trigger-bench (consumer, publisher, etcd)"
)

// wantedMetrics are the node metrics the sampler keeps (summed over label
// sets).
var wantedMetrics = []string{
	"go_memstats_heap_inuse_bytes",
	"go_memstats_heap_alloc_bytes",
	"go_memstats_sys_bytes",
	"go_goroutines",
	"trigger_heap_size",
	"outbox_published_total",
	"outbox_pending",
	"trigger_commit_duration_seconds_sum",
	"trigger_commit_duration_seconds_count",
	"trigger_slots_total",
	"projection_events_applied_total",
	"ring_owned_partitions",
}

type sample struct {
	t            time.Time
	procs        procstat.Snapshot
	metrics      map[string]map[string]float64 // group -> metric -> value
	metricsError map[string]bool
}

// sampler reads /proc (bench/internal/procstat: every process's CPU time
// and memory, grouped) and the nodes' /metrics once a second.
type sampler struct {
	mu      sync.Mutex
	procs   *procstat.Sampler
	static  map[string]int    // group -> pid
	urls    map[string]string // group -> metrics URL
	samples []sample
	stopC   chan struct{}
	done    chan struct{}
	once    sync.Once
	// others: other benchmarks seen while sampling (every 5 s), by command.
	others map[string]time.Time
}

func newSampler() *sampler {
	s := &sampler{
		procs:  procstat.New(),
		static: map[string]int{groupBench: os.Getpid()},
		urls:   map[string]string{},
		stopC:  make(chan struct{}),
		done:   make(chan struct{}),
		others: map[string]time.Time{},
	}
	go s.loop()
	return s
}

func (s *sampler) add(group string, pid int, metricsURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.static[group] = pid
	if metricsURL != "" {
		s.urls[group] = metricsURL
	}
}

func (s *sampler) stop() {
	s.once.Do(func() { close(s.stopC) })
	<-s.done
}

func (s *sampler) loop() {
	defer close(s.done)
	client := &http.Client{Timeout: 900 * time.Millisecond}
	next := time.Now().Truncate(time.Second).Add(time.Second)
	for {
		select {
		case <-s.stopC:
			return
		case <-time.After(time.Until(next)):
		}
		next = next.Add(time.Second)
		if time.Until(next) < 0 {
			next = time.Now().Truncate(time.Second).Add(time.Second)
		}
		s.takeSample(client)
		if next.Unix()%5 == 0 {
			now := time.Now()
			for _, o := range otherBenchmarkList() {
				s.mu.Lock()
				if _, seen := s.others[o]; !seen {
					s.others[o] = now
				}
				s.mu.Unlock()
			}
		}
	}
}

// othersSeen lists the other benchmarks seen by the sampler since from.
func (s *sampler) othersSeen(from time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for cmd, at := range s.others {
		if !at.Before(from) {
			out = append(out, cmd+" (from "+at.Format("15:04:05")+")")
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func (s *sampler) takeSample(client *http.Client) {
	s.mu.Lock()
	static := make(map[string]int, len(s.static))
	for k, v := range s.static {
		static[k] = v
	}
	urls := make(map[string]string, len(s.urls))
	for k, v := range s.urls {
		urls[k] = v
	}
	s.mu.Unlock()

	smp := sample{t: time.Now(), procs: s.procs.Snapshot(static), metrics: map[string]map[string]float64{}, metricsError: map[string]bool{}}
	alive := map[string]bool{}
	for _, p := range smp.procs.Procs {
		alive[p.Group] = true
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for group, url := range urls {
		if !alive[group] {
			continue
		}
		wg.Go(func() {
			m, err := scrape(client, url)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				smp.metricsError[group] = true
				return
			}
			smp.metrics[group] = m
		})
	}
	wg.Wait()
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// scrape reads the wanted metrics from a Prometheus text endpoint.
func scrape(client *http.Client, url string) (map[string]float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseMetrics(b), nil
}

func parseMetrics(b []byte) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !slices.Contains(wantedMetrics, name) {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out
}

// window returns the samples taken in [from, to].
func (s *sampler) window(from, to time.Time) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sample
	for _, smp := range s.samples {
		if !smp.t.Before(from) && !smp.t.After(to) {
			out = append(out, smp)
		}
	}
	return out
}

// groupUsage is one group's resource use over a window.
type groupUsage struct {
	group      string
	cpuPercent float64 // of one core
	rssMax     uint64
	rssMedian  uint64
	rssLast    uint64
	heapMax    float64 // go_memstats_heap_inuse_bytes
	heapLast   float64
	procs      int
}

// usageOf computes every group's use over [from, to] (procstat.Other
// left out) and the machine's busy share in percent of one core.
func (s *sampler) usageOf(from, to time.Time) (map[string]groupUsage, float64) {
	w := s.window(from, to)
	out := map[string]groupUsage{}
	if len(w) < 2 {
		return out, 0
	}
	u := procstat.Between(w[0].procs, w[len(w)-1].procs)
	for g, cpu := range u.CPU {
		if g == procstat.Other {
			continue
		}
		gu := groupUsage{group: g, cpuPercent: 100 * u.Of(cpu)}
		pids := map[int]bool{}
		var rss []uint64
		for _, smp := range w {
			n := 0
			for pid, p := range smp.procs.Procs {
				if p.Group == g {
					pids[pid] = true
					n++
				}
			}
			if n > 0 {
				gu.rssLast = smp.procs.RSS(g)
				rss = append(rss, gu.rssLast)
			}
			if m, ok := smp.metrics[g]; ok {
				h := m["go_memstats_heap_inuse_bytes"]
				gu.heapMax = max(gu.heapMax, h)
				gu.heapLast = h
			}
		}
		gu.procs = len(pids)
		if len(rss) > 0 {
			slices.Sort(rss)
			gu.rssMax, gu.rssMedian = rss[len(rss)-1], rss[len(rss)/2]
		}
		out[g] = gu
	}
	return out, 100 * u.Of(u.Busy)
}

// metricDelta is the increase of a node metric over [from, to].
func (s *sampler) metricDelta(group, name string, from, to time.Time) (float64, bool) {
	w := s.window(from, to)
	var a, b float64
	found := false
	for _, smp := range w {
		if m, ok := smp.metrics[group]; ok {
			if !found {
				a, found = m[name], true
			}
			b = m[name]
		}
	}
	return b - a, found
}

// lastMetric is the newest value of a node metric.
func (s *sampler) lastMetric(group, name string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.samples) - 1; i >= 0; i-- {
		if m, ok := s.samples[i].metrics[group]; ok {
			v, ok := m[name]
			return v, ok
		}
	}
	return 0, false
}

// vmHWM is the peak resident set of a live pid (bytes).
func (s *sampler) vmHWM(pid int) uint64 {
	p, _ := s.procs.Proc(pid)
	return p.HWM
}

// otherBenchmarks lists other benchmark processes (or go test runs) on the
// machine, which would share the 2 cores with this one.
func otherBenchmarks() string {
	return strings.Join(otherBenchmarkListPids(true), "; ")
}

// otherBenchmarkList is otherBenchmarks without pids, one entry per command.
func otherBenchmarkList() []string {
	return otherBenchmarkListPids(false)
}

func otherBenchmarkListPids(withPid bool) []string {
	mine := ancestors()
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || mine[pid] {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		first := strings.Fields(cmd)[0]
		base := filepath.Base(first)
		switch {
		case base == "registry-bench", base == "trigger-bench", base == "bench.sh", base == "bench-trigger.sh",
			strings.Contains(cmd, "deploy/local/bench.sh"),
			(base == "go" && strings.Contains(cmd, " test")),
			strings.HasSuffix(base, ".test"):
			if len(cmd) > 100 {
				cmd = cmd[:100] + "..."
			}
			if withPid {
				cmd = strconv.Itoa(pid) + ": " + cmd
			}
			if !slices.Contains(found, cmd) {
				found = append(found, cmd)
			}
		}
	}
	return found
}

// ancestors are this process and its parents, up to init.
func ancestors() map[int]bool {
	out := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !out[pid]; {
		out[pid] = true
		parent, ok := procstat.Parent(pid)
		if !ok {
			break
		}
		pid = parent
	}
	return out
}

// quietCheck is a helper for scenarios: it logs and returns what else runs.
func quietCheck(ctx context.Context, max time.Duration) string {
	others := waitQuiet(ctx, max)
	if others != "" {
		logf("WARNING: other benchmarks are running while measuring: %s", others)
	}
	return others
}
