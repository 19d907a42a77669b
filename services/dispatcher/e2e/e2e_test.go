package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/meshrun"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/webhookcheck"
)

// bins are the binaries of the mesh (libs/testkit/meshtest), built once for every
// test of the package: the tests run the real processes, so a SIGKILL kills
// a real dispatcher with its broker connection.
var bins = &meshtest.Binaries{}

func TestMain(m *testing.M) { bins.Main(m) }

const apiKey = "e2e-key-0123456789abcdef"

// startMesh runs the registry, two trigger nodes and the dispatcher: the
// path from an API call to a target, without history and alerting.
func startMesh(t *testing.T) *meshrun.Mesh {
	return meshtest.Start(t, bins, meshtest.Options{
		APIKeys: map[string]string{"e2e": apiKey}, Only: []string{"registry", "trigger", "dispatcher"},
		TriggerNodes: 2, Partitions: 64, RetryTiers: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second},
	})
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
// within 5 s of its nominal time (or, for a slot the kill held back, of
// the restart); the dispatcher is SIGKILLed while the target holds a
// request open, and a restarted dispatcher delivers that request again
// with the same webhook-id.
func TestDelivery(t *testing.T) {
	tg := &target{held: make(chan arrival, 1)}
	srv := httptest.NewServer(tg)
	t.Cleanup(srv.Close)
	mesh := startMesh(t)

	client := registryv1connect.NewJobServiceClient(http.DefaultClient, mesh.Registry.URL, rpctest.Bearer(apiKey))
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
	killAt := time.Now()
	mesh.Dispatcher.Kill()
	// A request the dying dispatcher had on the wire may arrive between
	// the kill and the process's end.
	deadAt := time.Now()
	_, err := mesh.Restart(t.Context(), mesh.Dispatcher)
	require.NoError(t, err)
	restarted := time.Now()
	t.Logf("dispatcher killed holding %s, restarted in %s", held.webhookID, restarted.Sub(killAt))

	// The window: 20 slots, every one given 8 s to arrive from the later of
	// its nominal time and the restart, whose length the machine's load
	// decides (25 s on a loaded 2-core host).
	time.Sleep(time.Until(later(from.Add(28*time.Second), restarted.Add(8*time.Second))))
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
		// A slot not delivered before the kill waits for the restarted
		// dispatcher (the only one here): its 5 s count from the later of
		// its nominal time and the restart, whose own length the machine's
		// load decides (it took 5.6 s beside two other suites).
		due := slot.nominal
		if got[0].at.After(killAt) && restarted.After(due) {
			due = restarted
		}
		lateness := got[0].at.Sub(due)
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

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
