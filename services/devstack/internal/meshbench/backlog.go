package meshbench

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cronmesh/cronmesh/libs/broker"
)

// backlog is where slots wait at one moment: committed by the trigger but
// not yet published (its outbox), or published but not yet taken by the
// dispatcher (the dispatch queues' ready messages).
type backlog struct {
	at       time.Time
	outbox   int
	dispatch int
}

// sampleBacklog reads both; -1 when a count could not be read.
func (e *env) sampleBacklog(ctx context.Context) backlog {
	b := backlog{at: time.Now(), outbox: -1, dispatch: -1}
	_ = e.trigger.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&b.outbox)
	ch, err := e.amqp.Channel()
	if err != nil {
		return b
	}
	defer ch.Close()
	n := 0
	for _, q := range broker.DispatchQueues(e.mesh.Names.Dispatch, e.mesh.Names.DispatchQueue) {
		st, err := ch.QueueDeclarePassive(q.Queue, true, false, false, false, nil)
		if err != nil {
			return b
		}
		n += st.Messages
	}
	b.dispatch = n
	return b
}

// backlogSummary is "median m, max x" of a backlog series.
func backlogSummary(bs []backlog, pick func(backlog) int) string {
	var v []int
	for _, b := range bs {
		if n := pick(b); n >= 0 {
			v = append(v, n)
		}
	}
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	return "median " + num(v[len(v)/2]) + ", max " + num(v[len(v)-1])
}

// histogram is a Prometheus histogram's cumulative bucket counts, summed
// over every label set and process.
type histogram map[float64]float64

// scrapeHistogram sums name's buckets over the processes' /metrics.
func scrapeHistogram(ctx context.Context, urls []string, name string) histogram {
	h := histogram{}
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for line := range strings.SplitSeq(string(body), "\n") {
			if !strings.HasPrefix(line, name+"_bucket{") {
				continue
			}
			i := strings.Index(line, `le="`)
			j := strings.LastIndexByte(line, ' ')
			if i < 0 || j < 0 {
				continue
			}
			le := line[i+4:]
			le = le[:strings.IndexByte(le, '"')]
			bound, err1 := strconv.ParseFloat(le, 64)
			v, err2 := strconv.ParseFloat(line[j+1:], 64)
			if err1 == nil && err2 == nil {
				h[bound] += v
			}
		}
	}
	return h
}

// quantileBound is the upper bound of the bucket holding the q-quantile of
// the observations between two scrapes (b minus a): "≤ 0.25 s".
func quantileBound(a, b histogram, q float64) string {
	bounds := make([]float64, 0, len(b))
	for k := range b {
		bounds = append(bounds, k)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return "-"
	}
	total := b[bounds[len(bounds)-1]] - a[bounds[len(bounds)-1]]
	if total <= 0 {
		return "-"
	}
	for _, k := range bounds {
		if b[k]-a[k] >= q*total {
			if k > 1e300 {
				return "> " + strconv.FormatFloat(bounds[max(len(bounds)-2, 0)], 'g', -1, 64) + " s"
			}
			return "≤ " + strconv.FormatFloat(k, 'g', -1, 64) + " s"
		}
	}
	return "-"
}
