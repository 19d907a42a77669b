package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/amqptest"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/etcdtest"
	"github.com/cronmesh/cronmesh/libs/outbox"
	"github.com/cronmesh/cronmesh/libs/pgtest"
)

// triggerBinary is built once by TestMain: the tests run the real binary,
// so a SIGKILL kills a real process with its etcd session and connections.
var triggerBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cronmesh-trigger-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	triggerBinary = filepath.Join(dir, "trigger")
	build := exec.Command("go", "build", "-o", triggerBinary, "github.com/cronmesh/cronmesh/services/trigger/cmd/trigger")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the trigger:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const apiKey = "e2e-key-0123456789abcdef"

// cluster is a set of trigger processes sharing one etcd, one schema and
// one set of broker names, with a consumer recording every dispatch request.
type cluster struct {
	t          *testing.T
	db         *pgxpool.Pool
	etcd       []string
	prefix     string
	schema     string
	amqpURL    string
	jobsX      string
	dispatchX  string
	dispatchQ  string
	executionX string
	leaseTTL   time.Duration
	nodes      map[string]*node
	received   *ledger
}

type node struct {
	id   string
	addr string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func newCluster(t *testing.T, amqpURL string) *cluster {
	t.Helper()
	pool, schema := pgtest.New(t)
	etcd := etcdtest.New(t)
	c := &cluster{
		t:          t,
		db:         pool,
		etcd:       etcd.Endpoints(),
		prefix:     "/" + amqptest.UniqueName(t, "ring") + "/",
		schema:     schema,
		amqpURL:    amqpURL,
		jobsX:      amqptest.UniqueName(t, "cronmesh.jobs"),
		dispatchX:  amqptest.UniqueName(t, "cronmesh.dispatch"),
		dispatchQ:  amqptest.UniqueName(t, "cronmesh.dispatchq"),
		executionX: amqptest.UniqueName(t, "cronmesh.executions"),
		leaseTTL:   2 * time.Second,
		nodes:      map[string]*node{},
		received:   newLedger(),
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
		ch := amqptest.Channel(t)
		for _, b := range broker.DispatchQueues(c.dispatchX, c.dispatchQ) {
			_, _ = ch.QueueDelete(b.Queue, false, false, false)
		}
		_, _ = ch.QueueDelete(c.jobsX+".trigger", false, false, false)
		for _, x := range []string{c.jobsX, c.dispatchX, c.executionX} {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
	return c
}

// pool reads the cluster's schema directly (the verdict itself comes from
// the queue).
func (c *cluster) pool() *pgxpool.Pool { return c.db }

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// start launches a trigger node and waits until it reports ready (it holds
// its partitions and its projection is subscribed).
func (c *cluster) start(id string) *node {
	c.t.Helper()
	n := &node{id: id, addr: freePort(c.t), log: filepath.Join(c.t.TempDir(), id+".log"), done: make(chan struct{})}
	logFile, err := os.Create(n.log)
	require.NoError(c.t, err)
	n.cmd = exec.Command(triggerBinary,
		"--listen", n.addr, "--node-id", id, "--schema", c.schema,
		"--postgres-url", pgtest.URL(), "--amqp-url", c.amqpURL,
		"--etcd-endpoints", joinComma(c.etcd), "--etcd-prefix", c.prefix,
		"--partitions", "64", "--lease-ttl", c.leaseTTL.String(),
		"--jobs-exchange", c.jobsX, "--jobs-queue", c.jobsX+".trigger",
		"--dispatch-exchange", c.dispatchX, "--dispatch-queue", c.dispatchQ,
		"--executions-exchange", c.executionX,
		"--api-keys", "e2e="+apiKey, "--registry-url", "", "--log-level", "info", "--shutdown-timeout", "5s",
	)
	n.cmd.Stdout, n.cmd.Stderr = logFile, logFile
	require.NoError(c.t, n.cmd.Start())
	go func() {
		_ = n.cmd.Wait()
		logFile.Close()
		close(n.done)
	}()
	c.nodes[id] = n
	c.t.Cleanup(func() {
		if c.t.Failed() {
			dumpLog(c.t, n)
		}
	})
	require.Eventually(c.t, func() bool {
		resp, err := http.Get("http://" + n.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "node %s never became ready", id)
	return n
}

func (c *cluster) stop(n *node) {
	select {
	case <-n.done:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT)
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

func dumpLog(t *testing.T, n *node) {
	f, err := os.Open(n.log)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() && lines < 200 {
		t.Logf("[%s] %s", n.id, sc.Text())
		lines++
	}
}

// createJobs publishes CREATED job events, as the registry would, for
// count jobs that fire every second, and returns their ids.
func (c *cluster) createJobs(count int) []string {
	c.t.Helper()
	return c.createJobsWith(count, nil)
}

// createJobsWith is createJobs with each job changed by mod (nil: none)
// before its event is published.
func (c *cluster) createJobsWith(count int, mod func(*registryv1.Job)) []string {
	c.t.Helper()
	ch := amqptest.Channel(c.t)
	require.NoError(c.t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, count))
	ids := make([]string, count)
	now := time.Now()
	for i := range count {
		id := uuid.Must(uuid.NewV7()).String()
		ids[i] = id
		maxRetries := int32(5)
		ev := &eventsv1.JobEvent{
			EventId: uuid.NewString(),
			Kind:    eventsv1.JobEventKind_JOB_EVENT_KIND_CREATED,
			Version: 1,
			Job: &registryv1.Job{
				Id: id, Namespace: "e2e", DisplayName: "every second " + strconv.Itoa(i), Version: 1,
				Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * * *"}, TimeZone: "UTC"},
				Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
					Method: "POST", Url: "http://127.0.0.1:9/hook", Timeout: durationpb.New(5 * time.Second),
					SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
				}}},
				RetryPolicy:   &registryv1.RetryPolicy{MaxRetries: &maxRetries},
				CatchUpWindow: durationpb.New(time.Hour),
				Priority:      registryv1.Priority_PRIORITY_NORMAL,
				CreateTime:    timestamppb.New(now),
				UpdateTime:    timestamppb.New(now),
			},
			OccurTime: timestamppb.New(now),
		}
		if mod != nil {
			mod(ev.Job)
		}
		body, err := proto.Marshal(ev)
		require.NoError(c.t, err)
		require.NoError(c.t, ch.PublishWithContext(context.Background(), c.jobsX, "job.created", false, false,
			amqp091.Publishing{MessageId: ev.EventId, Body: body, DeliveryMode: amqp091.Persistent}))
	}
	for range count {
		select {
		case conf := <-confirms:
			require.True(c.t, conf.Ack)
		case <-time.After(30 * time.Second):
			c.t.Fatal("job events not confirmed")
		}
	}
	return ids
}

// consume records every dispatch request until ctx is done.
func (c *cluster) consume(ctx context.Context) *sync.WaitGroup {
	ch := amqptest.Channel(c.t)
	require.NoError(c.t, ch.Qos(1000, 0, false))
	// The jobs are of normal priority; reading every priority's queue would
	// also catch a misrouted one.
	var wg sync.WaitGroup
	for _, b := range broker.DispatchQueues(c.dispatchX, c.dispatchQ) {
		deliveries, err := ch.Consume(b.Queue, "", true, false, false, false, nil)
		require.NoError(c.t, err)
		wg.Go(func() { c.record(ctx, deliveries) })
	}
	return &wg
}

// record decodes and records deliveries until ctx is done.
func (c *cluster) record(ctx context.Context, deliveries <-chan amqp091.Delivery) {
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			msgs, err := broker.DeliveryMessages(d)
			if err != nil {
				c.received.bad(fmt.Sprintf("undecodable dispatch message %q: %v", d.MessageId, err))
				continue
			}
			at := time.Now()
			for _, m := range msgs {
				req := &dispatchv1.DispatchRequest{}
				if err := proto.Unmarshal(m.Payload, req); err != nil {
					c.received.bad(fmt.Sprintf("undecodable dispatch request %q: %v", m.UUID, err))
					continue
				}
				c.received.add(req, m.Metadata.Get(outbox.RowIDHeader), at)
			}
		}
	}
}

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}
