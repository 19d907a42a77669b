package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cronmesh/cronmesh/bench/internal/pause"
	benchreport "github.com/cronmesh/cronmesh/bench/internal/report"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/ring"
)

// runFailover: N nodes fire every-second jobs; one is SIGKILLed; how late
// are the slots of the partitions it owned.
func runFailover(ctx context.Context, args []string) error {
	fs, c := flags("failover")
	jobs := fs.Int("jobs", 1000, "every-second jobs")
	nodes := fs.Int("nodes", 2, "trigger nodes")
	warmup := fs.Duration("warmup", 5*time.Second, "firing before the window starts")
	killAfter := fs.Duration("kill-after", 10*time.Second, "SIGKILL this long into the window (plus --kill-offset)")
	killOffset := fs.Duration("kill-offset", 500*time.Millisecond, "offset of the kill within its second")
	after := fs.Duration("after", 20*time.Second, "keep firing this long after the kill")
	victimFlag := fs.String("kill", "n1", "node to kill: a node id (n1, n2, ...)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodes < 2 {
		return fmt.Errorf("failover needs at least 2 nodes")
	}
	e, m, others, err := setUp(ctx, *c)
	if err != nil {
		return err
	}
	defer e.close()
	if err := e.startNodes(ctx, *nodes); err != nil {
		return err
	}
	ids := newIDs(*jobs)
	rec := newRecorder(ids, time.Now().Truncate(time.Second), int((5*time.Minute+*warmup+*killAfter+*after)/time.Second))
	consumeCtx, stopConsume := context.WithCancel(ctx)
	defer stopConsume()
	waitConsumer, err := consume(consumeCtx, e.amqp, e.dispatchX, e.dispatchQ, rec)
	if err != nil {
		return err
	}
	created := time.Now()
	js := make([]*registryv1.Job, len(ids))
	for i, id := range ids {
		js[i] = newJob(id, i, cronSchedule("* * * * * *", "UTC"), created)
	}
	if err := publishCreated(ctx, e.amqp, e.jobsX, js, 4); err != nil {
		return err
	}
	projected, err := e.waitProjected(ctx, len(js), 5*time.Minute)
	if err != nil {
		return err
	}
	from := projected.Truncate(time.Second).Add(*warmup)
	killAt := from.Add(*killAfter).Truncate(time.Second).Add(*killOffset)
	to := killAt.Add(*after).Truncate(time.Second)
	logf("window %s – %s, kill at %s", from.Format("15:04:05"), to.Format("15:04:05"), killAt.Format("15:04:05.000"))
	if err := pause.Until(ctx, killAt.Add(-time.Second)); err != nil {
		return err
	}
	// Who owns (and so fires and publishes) what, just before the kill.
	owners, err := partitionOwners(ctx, e)
	if err != nil {
		return err
	}
	var victim *node
	for _, n := range e.nodes {
		if n.id == *victimFlag {
			victim = n
		}
	}
	if victim == nil {
		return fmt.Errorf("no node matches --kill %s", *victimFlag)
	}
	dead := map[int]bool{}
	for p, o := range owners {
		if o == victim.id {
			dead[p] = true
		}
	}
	jobPart := make([]int, len(ids))
	deadJobs := 0
	for i, id := range ids {
		jobPart[i] = ring.Partition(id, c.partitions)
		if dead[jobPart[i]] {
			deadJobs++
		}
	}
	if err := pause.Until(ctx, killAt); err != nil {
		return err
	}
	killed, err := e.killNode(victim)
	if err != nil {
		return err
	}
	logf("SIGKILLed %s (pid %d) owning %d partitions, %d jobs", victim.id, victim.pid(), len(dead), deadJobs)
	takeover := make(chan time.Duration, 1)
	go func() { takeover <- waitTakeover(ctx, e, dead, victim.id, killed, 30*time.Second) }()
	if err := pause.Until(ctx, to.Add(6*time.Second)); err != nil {
		return err
	}
	took := <-takeover
	nodeErr := e.checkNodes()
	stopConsume()
	waitConsumer()

	isDead := func(j int32) bool { return dead[jobPart[j]] }
	isLive := func(j int32) bool { return !dead[jobPart[j]] }
	chk := rec.check(ids, nil, from, to)
	all := rec.selectArrivals(nil, from, to.Add(time.Second))
	allArrive, allCommit := latenessDists(all)
	firstSlot := killed.Truncate(time.Second).Add(time.Second)
	first := rec.selectArrivals(isDead, firstSlot, firstSlot.Add(time.Second))
	firstArrive, firstCommit := latenessDists(first)
	firstCheck := rec.check(ids, isDead, firstSlot, firstSlot)
	deadAfter := rec.selectArrivals(isDead, killed.Truncate(time.Second), to.Add(time.Second))
	deadArrive, _ := latenessDists(deadAfter)

	var timeline [][]string
	for s := killed.Truncate(time.Second).Add(-2 * time.Second); !s.After(killed.Add(10 * time.Second)); s = s.Add(time.Second) {
		d := rec.selectArrivals(isDead, s, s.Add(time.Second))
		l := rec.selectArrivals(isLive, s, s.Add(time.Second))
		da, _ := latenessDists(d)
		la, _ := latenessDists(l)
		mark := ""
		if s.Equal(firstSlot) {
			mark = " (first after the kill)"
		} else if s.Equal(killed.Truncate(time.Second)) {
			mark = " (the kill's second)"
		}
		dd := rec.check(ids, isDead, s, s).duplicated
		ld := rec.check(ids, isLive, s, s).duplicated
		timeline = append(timeline, []string{s.Format("15:04:05") + mark, fmt.Sprintf("%d / %d", len(d), deadJobs), benchreport.Num(dd), benchreport.Ms(da.max), fmt.Sprintf("%d / %d", len(l), len(ids)-deadJobs), benchreport.Num(ld), benchreport.Ms(la.max)})
	}

	var r report
	r.header(fmt.Sprintf("Trigger: failover, %d nodes, %s every-second jobs, SIGKILL of %s", *nodes, benchreport.Num(*jobs), *victimFlag), m, e, others)
	r.p("")
	r.p("Lease TTL %s. %s was SIGKILLed at %s (%s into its second). Its partitions and jobs were read from the etcd owner keys (`%spartitions/<p>`) just before the kill; job → partition by ring.Partition(job id, %d).",
		c.leaseTTL, victim.id, killed.Format("15:04:05.000"), time.Duration(killed.Sub(killed.Truncate(time.Second))).Round(time.Millisecond), e.prefix, c.partitions)
	r.p("")
	tookS := "not within 30 s"
	if took > 0 {
		tookS = benchreport.Secs(took)
	}
	r.table([]string{"failover", "value"}, [][]string{
		{"partitions of the dead node / jobs in them", fmt.Sprintf("%d / %s", len(dead), benchreport.Num(deadJobs))},
		{"all its partitions owned by a survivor (etcd) after the kill", tookS},
		{"its first slot after the kill (" + firstSlot.Format("15:04:05") + "): arrived", fmt.Sprintf("%s of %s (missing %d)", benchreport.Num(len(first)), benchreport.Num(deadJobs), firstCheck.missing)},
		{"**that slot's lateness: p50 / max (arrival)**", "**" + benchreport.Ms(firstArrive.p50) + " / " + benchreport.Ms(firstArrive.max) + "**"},
		{"that slot's lateness: p50 / max (commit)", benchreport.Ms(firstCommit.p50) + " / " + benchreport.Ms(firstCommit.max)},
		{"max lateness of any slot of its partitions from the kill on", benchreport.Ms(deadArrive.max)},
		{"max lateness of any slot in the window (all jobs)", benchreport.Ms(allArrive.max) + " (commit " + benchreport.Ms(allCommit.max) + ")"},
		{"slots checked / missing / duplicated", fmt.Sprintf("%s / %d / %d", benchreport.Num(chk.slots), chk.missing, chk.duplicated)},
	})
	r.p("Per nominal second around the kill (arrived / due, slots that arrived twice, and the max arrival lateness of the first arrivals):")
	r.p("")
	r.table([]string{"nominal second", "dead node's partitions", "twice", "max lateness", "survivors' partitions", "twice", "max lateness"}, timeline)
	if chk.duplicated > 0 {
		r.p("A slot that arrives twice carries the same execution id both times (checked for every message): the ledger committed it once, and a relay published it again: the dead node's relay died between the broker's confirm and the DELETE of the row, and the new owner of its partition published the row again (at-least-once, deduplicated downstream by execution id; see docs/architecture.md).")
		r.p("")
	}
	r.usageTable(e, from, to)
	r.h(3, "Targets")
	r.table([]string{"target", "measured", "verdict"}, [][]string{
		{"after a SIGKILL, the dead node's first slot fires within 5 s of its nominal time", "max " + benchreport.Ms(firstArrive.max) + " (arrival)",
			met(firstCheck.missing == 0 && len(first) > 0 && firstArrive.max <= targetFailover)},
		{"no slot missed or fired twice", fmt.Sprintf("%d missing, %d duplicated", chk.missing, chk.duplicated), met(chk.missing == 0 && chk.duplicated == 0)},
	})
	if err := r.emit(c.out); err != nil {
		return err
	}
	return nodeErr
}

// partitionOwners reads the owner key of every partition from etcd.
func partitionOwners(ctx context.Context, e *env) (map[int]string, error) {
	resp, err := e.etcdCli.Get(ctx, e.prefix+"partitions/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read owner keys: %w", err)
	}
	out := map[int]string{}
	for _, kv := range resp.Kvs {
		p, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), e.prefix+"partitions/"))
		if err != nil {
			continue
		}
		out[p] = string(kv.Value)
	}
	return out, nil
}

// waitTakeover returns how long after the kill every partition of dead had
// an owner other than victim (0 if not within limit).
func waitTakeover(ctx context.Context, e *env, dead map[int]bool, victim string, killed time.Time, limit time.Duration) time.Duration {
	for time.Since(killed) < limit {
		owners, err := partitionOwners(ctx, e)
		if err == nil {
			ok := true
			for p := range dead {
				if o, has := owners[p]; !has || o == victim {
					ok = false
					break
				}
			}
			if ok {
				return time.Since(killed)
			}
		}
		if pause.For(ctx, 20*time.Millisecond) != nil {
			return 0
		}
	}
	return 0
}
