package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/amqptest"
	"github.com/cronmesh/cronmesh/libs/broker"
	"github.com/cronmesh/cronmesh/libs/etcdtest"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/pgtest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/webhookcheck"
)

// binaries are built once by TestMain: the tests run the real processes,
// so a SIGKILL kills a real dispatcher with its broker connection.
var binaries = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cronmesh-dispatcher-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, name := range []string{"registry", "trigger", "dispatcher"} {
		binaries[name] = filepath.Join(dir, name)
		build := exec.Command("go", "build", "-o", binaries[name], "github.com/cronmesh/cronmesh/services/"+name+"/cmd/"+name)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building the", name+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const apiKey = "e2e-key-0123456789abcdef"

// proc is one running binary.
type proc struct {
	name string
	addr string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// stack is the test's processes, sharing its schemas and broker names.
type stack struct {
	t     *testing.T
	names map[string]string
	etcd  []string
	procs []*proc
	// schemas per service.
	schemas map[string]string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{t: t, names: map[string]string{}, schemas: map[string]string{}, etcd: etcdtest.New(t).Endpoints()}
	for _, svc := range []string{"registry", "trigger", "dispatcher"} {
		_, schema := pgtest.New(t)
		s.schemas[svc] = schema
	}
	for _, n := range []string{"jobs", "dispatch", "dispatchq", "retry", "retryq", "dead", "deadq", "executions"} {
		s.names[n] = amqptest.UniqueName(t, "cronmesh."+n) // names a namespace could reach are refused at start
	}
	t.Cleanup(func() {
		for _, p := range s.procs {
			s.stop(p)
		}
		ch := amqptest.Channel(t)
		var queues []string
		for _, b := range broker.DispatchQueues(s.names["dispatch"], s.names["dispatchq"]) {
			queues = append(queues, b.Queue)
		}
		queues = append(queues, s.names["jobs"]+".trigger", s.names["deadq"])
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		// The retry tiers' queues: prefix plus tier.
		for _, tier := range []string{"500ms", "1s", "2s"} {
			d, _ := time.ParseDuration(tier)
			for _, b := range broker.RetryTiers(s.names["retry"], s.names["retryq"], s.names["dispatch"], []time.Duration{d}) {
				_, _ = ch.QueueDelete(b.Queue, false, false, false)
			}
		}
		for _, x := range []string{"jobs", "dispatch", "retry", "dead", "executions"} {
			_ = ch.ExchangeDelete(s.names[x], false, false)
		}
	})
	return s
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// start runs a binary with args (plus the common ones) and waits until it
// reports ready.
func (s *stack) start(name, binary string, args ...string) *proc {
	s.t.Helper()
	p := &proc{name: name, addr: freePort(s.t), log: filepath.Join(s.t.TempDir(), name+".log"), done: make(chan struct{})}
	logFile, err := os.Create(p.log)
	require.NoError(s.t, err)
	args = append(args, "--listen", p.addr, "--postgres-url", pgtest.URL(), "--amqp-url", amqptest.URL(),
		"--api-keys", "e2e="+apiKey, "--log-level", "info", "--shutdown-timeout", "5s")
	if binary != "registry" {
		// The configured key only: this suite's services do not fetch the
		// registry's managed keys.
		args = append(args, "--registry-url", "")
	}
	p.cmd = exec.Command(binaries[binary], args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	require.NoError(s.t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
	s.t.Cleanup(func() {
		if s.t.Failed() {
			dumpLog(s.t, p)
		}
	})
	require.Eventually(s.t, func() bool {
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "%s never became ready", name)
	return p
}

func (s *stack) stop(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func dumpLog(t *testing.T, p *proc) {
	f, err := os.Open(p.log)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for lines := 0; sc.Scan() && lines < 100; lines++ {
		t.Logf("[%s] %s", p.name, sc.Text())
	}
}

func (s *stack) registry() *proc {
	return s.start("registry", "registry", "--schema", s.schemas["registry"], "--exchange", s.names["jobs"])
}

func (s *stack) trigger(id string) *proc {
	return s.start(id, "trigger", "--node-id", id, "--schema", s.schemas["trigger"],
		"--etcd-endpoints", strings.Join(s.etcd, ","), "--etcd-prefix", "/"+s.names["jobs"]+"/",
		"--partitions", "64", "--lease-ttl", "2s",
		"--jobs-exchange", s.names["jobs"], "--jobs-queue", s.names["jobs"]+".trigger",
		"--dispatch-exchange", s.names["dispatch"], "--dispatch-queue", s.names["dispatchq"],
		"--executions-exchange", s.names["executions"])
}

func (s *stack) dispatcher(id string) *proc {
	return s.start(id, "dispatcher", "--schema", s.schemas["dispatcher"],
		"--dispatch-exchange", s.names["dispatch"], "--dispatch-queue", s.names["dispatchq"],
		"--retry-exchange", s.names["retry"], "--retry-queue", s.names["retryq"], "--retry-tiers", "500ms,1s,2s",
		"--dead-exchange", s.names["dead"], "--dead-queue", s.names["deadq"],
		"--executions-exchange", s.names["executions"],
		"--allow-networks", "127.0.0.0/8,::1/128")
}

// arrival is one request as the target saw it.
type arrival struct {
	at        time.Time
	webhookID string
	path      string
	header    http.Header
	body      []byte
}

// target is the HTTP target of every job: it records each request and
// answers 204, except that it holds open the first request for the hold
// path after hold is armed, until the client goes away.
type target struct {
	mu       sync.Mutex
	arrivals []arrival
	armed    bool
	held     chan arrival
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a := arrival{at: time.Now(), webhookID: r.Header.Get("webhook-id"), path: r.URL.Path, header: r.Header.Clone(), body: body}
	tg.mu.Lock()
	tg.arrivals = append(tg.arrivals, a)
	hold := tg.armed && r.URL.Path == "/hold"
	if hold {
		tg.armed = false
	}
	tg.mu.Unlock()
	if hold {
		tg.held <- a
		<-r.Context().Done() // the dispatcher dies holding it
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (tg *target) all() []arrival {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]arrival(nil), tg.arrivals...)
}

// job is a job created through the registry.
type job struct {
	id, secret, path string
}

// TestDelivery: about 50 every-second jobs created through the registry's
// API, fired by two trigger nodes and delivered by the dispatcher to a
// loopback target. In the checked window every slot reaches the target,
// with a signature an independent verifier accepts, once per webhook-id,
// within 5 s of its nominal time; the dispatcher is SIGKILLed while the
// target holds a request open, and a restarted dispatcher delivers that
// request again with the same webhook-id.
func TestDelivery(t *testing.T) {
	s := newStack(t)
	tg := &target{held: make(chan arrival, 1)}
	srv := httptest.NewServer(tg)
	t.Cleanup(srv.Close)

	reg := s.registry()
	s.trigger("t1")
	s.trigger("t2")
	s.dispatcher("d1")

	client := registryv1connect.NewJobServiceClient(http.DefaultClient, "http://"+reg.addr,
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+apiKey)
				return next(ctx, req)
			}
		})))
	const count = 50
	jobs := make([]job, count)
	for i := range jobs {
		path := "/hook/" + strconv.Itoa(i)
		if i == 0 {
			path = "/hold"
		}
		resp, err := client.CreateJob(t.Context(), connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
			DisplayName: "every second " + strconv.Itoa(i),
			Schedule:    &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "* * * * * *"}, TimeZone: "UTC"},
			Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
				Method: "POST", Url: srv.URL + path, Body: `{"job":` + strconv.Itoa(i) + `}`, Timeout: durationpb.New(30 * time.Second),
			}}},
			RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto.Int32(3)},
			Priority:    registryv1.Priority_PRIORITY_NORMAL,
		}}))
		require.NoError(t, err)
		j := resp.Msg.Job
		jobs[i] = job{id: j.Id, secret: j.GetTarget().GetHttp().GetSigningSecret(), path: path}
		require.NotEmpty(t, jobs[i].secret)
	}
	bySlot := map[string]struct {
		job     job
		nominal time.Time
	}{}
	// Every job has reached the target once: the jobs are projected.
	require.Eventually(t, func() bool {
		seen := map[string]bool{}
		for _, a := range tg.all() {
			seen[a.path] = true
		}
		return len(seen) == count
	}, 30*time.Second, 50*time.Millisecond, "every job fires")

	from := time.Now().Truncate(time.Second).Add(2 * time.Second)
	for _, j := range jobs {
		for sec := range 20 {
			nominal := from.Add(time.Duration(sec) * time.Second)
			bySlot[execid.For(j.id, nominal)] = struct {
				job     job
				nominal time.Time
			}{j, nominal}
		}
	}

	// SIGKILL the dispatcher while the target holds a request open.
	time.Sleep(time.Until(from.Add(5 * time.Second)))
	tg.mu.Lock()
	tg.armed = true
	tg.mu.Unlock()
	var held arrival
	select {
	case held = <-tg.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the hold job's request never arrived")
	}
	d1 := s.procs[len(s.procs)-1]
	killAt := time.Now()
	require.NoError(t, d1.cmd.Process.Kill())
	<-d1.done
	// A request the dying dispatcher had on the wire may arrive between
	// the kill and the process's end.
	deadAt := time.Now()
	s.dispatcher("d2")
	t.Logf("dispatcher killed holding %s, restarted in %s", held.webhookID, time.Since(killAt))

	// The window: 20 slots, every one given 8 s to arrive.
	time.Sleep(time.Until(from.Add(28 * time.Second)))
	arrivals := tg.all()

	perID := map[string][]arrival{}
	for _, a := range arrivals {
		perID[a.webhookID] = append(perID[a.webhookID], a)
	}
	var maxLate time.Duration
	var late []string
	redelivered := 0
	for id, slot := range bySlot {
		got := perID[id]
		require.NotEmpty(t, got, "slot %s of job %s never reached the target", slot.nominal.Format(time.TimeOnly), slot.job.id)
		for _, a := range got {
			vid, err := webhookcheck.Verify(slot.job.secret, a.header, a.body, time.Minute, a.at)
			require.NoError(t, err, "slot %s of job %s", slot.nominal.Format(time.TimeOnly), slot.job.id)
			require.Equal(t, id, vid)
			require.Equal(t, slot.job.path, a.path)
		}
		if len(got) > 1 {
			// Only a SIGKILL redelivery: first seen by the killed
			// dispatcher, then by its successor.
			require.Len(t, got, 2, "slot %s of job %s delivered %d times", slot.nominal.Format(time.TimeOnly), slot.job.id, len(got))
			require.True(t, got[0].at.Before(deadAt) && got[1].at.After(killAt),
				"slot %s of job %s (%s) delivered twice, not across the kill (at %s; kill %s): at %s and %s", slot.nominal.Format(time.StampMilli), slot.job.id, slot.job.path,
				id, killAt.Format(time.StampMilli), got[0].at.Format(time.StampMilli), got[1].at.Format(time.StampMilli))
			redelivered++
		}
		lateness := got[0].at.Sub(slot.nominal)
		if lateness > maxLate {
			maxLate = lateness
		}
		if lateness > 5*time.Second {
			late = append(late, fmt.Sprintf("%s/%s: %s", slot.job.path, slot.nominal.Format(time.TimeOnly), lateness))
		}
	}
	again := perID[held.webhookID]
	require.Len(t, again, 2, "the held request is delivered again after the restart")
	require.True(t, again[1].at.After(killAt))
	require.Equal(t, held.body, again[1].body)
	t.Logf("%d slots checked; max lateness %s; %d redelivered across the kill (the held one included)", len(bySlot), maxLate, redelivered)
	require.Empty(t, late, "slots later than 5 s after their nominal time")
}
