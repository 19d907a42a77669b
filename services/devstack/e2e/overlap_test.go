package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	triggerv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/trigger/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/meshtest"
)

// slowTarget answers every request 200 after `hold` (or when the caller
// gives up), and records what was in flight at once.
type slowTarget struct {
	URL  string
	hold time.Duration

	mu        sync.Mutex
	inFlight  int
	most      int             // most requests in flight at once
	started   map[string]int  // webhook-id → requests
	aborted   map[string]bool // webhook-ids whose caller went away mid-request
	firstSeen map[string]time.Time
	current   string        // the webhook-id of the latest request in flight
	unblock   chan struct{} // closed: answer at once
}

func newSlowTarget(t *testing.T, hold time.Duration) *slowTarget {
	st := &slowTarget{hold: hold, started: map[string]int{}, aborted: map[string]bool{}, firstSeen: map[string]time.Time{}, unblock: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		st.mu.Lock()
		st.inFlight++
		st.most = max(st.most, st.inFlight)
		st.started[id]++
		if _, ok := st.firstSeen[id]; !ok {
			st.firstSeen[id] = time.Now()
		}
		st.current = id
		st.mu.Unlock()
		defer func() {
			st.mu.Lock()
			st.inFlight--
			st.mu.Unlock()
		}()
		select {
		case <-time.After(st.hold):
			w.WriteHeader(http.StatusOK)
		case <-st.unblock:
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
			st.mu.Lock()
			st.aborted[id] = true
			st.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	st.URL = srv.URL
	return st
}

func (st *slowTarget) snapshot() (most int, started map[string]int, aborted map[string]bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	started, aborted = map[string]int{}, map[string]bool{}
	for k, v := range st.started {
		started[k] = v
	}
	for k, v := range st.aborted {
		aborted[k] = v
	}
	return st.most, started, aborted
}

// overlapSuite is a mesh of its own (the crash test restarts its
// dispatcher) and clients of it.
type overlapSuite struct {
	scenario
}

// TestOverlapPolicies runs an every-second job against a target that takes
// 3 s to answer under each overlap policy, through the real mesh: SKIP
// records the slots that find an execution in progress SKIPPED and never
// has two deliveries at the target at once; BUFFER_ONE never has more than
// one slot waiting and runs it after the running one; CANCEL_OTHER aborts
// the running delivery. Then the dispatcher is killed mid-attempt of a SKIP
// job: the restarted dispatcher delivers the same execution again, later
// slots run, and nothing stays blocked.
func TestOverlapPolicies(t *testing.T) {
	t.Parallel()
	mesh := meshtest.Start(t, bins, meshtest.Options{APIKeys: map[string]string{"scenarios": scenarioKey}})
	s := &overlapSuite{*newClients(mesh, scenarioKey)}
	t.Run("Policies", func(t *testing.T) {
		t.Run("Skip", func(t *testing.T) { t.Parallel(); s.skip(t) })
		t.Run("BufferOne", func(t *testing.T) { t.Parallel(); s.bufferOne(t) })
		t.Run("CancelOther", func(t *testing.T) { t.Parallel(); s.cancelOther(t) })
	})
	t.Run("DispatcherCrash", s.dispatcherCrash)
}

// everySecond creates an every-second job with policy, delivering to url.
func (s *overlapSuite) everySecond(t *testing.T, name, url string, policy registryv1.OverlapPolicy) string {
	t.Helper()
	created, err := s.jobs.CreateJob(t.Context(), connect.NewRequest(&registryv1.CreateJobRequest{Job: &registryv1.Job{
		DisplayName:   name,
		Schedule:      &registryv1.Schedule{Kind: &registryv1.Schedule_Interval{Interval: &registryv1.Interval{Every: durationpb.New(time.Second)}}},
		Target:        &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: url}}},
		OverlapPolicy: policy,
	}}))
	require.NoError(t, err)
	require.Equal(t, policy, created.Msg.GetJob().GetOverlapPolicy())
	return created.Msg.GetJob().GetId()
}

// pause stops the job firing.
func (s *overlapSuite) pause(t *testing.T, jobID string) {
	t.Helper()
	_, err := s.jobs.PauseJob(t.Context(), connect.NewRequest(&registryv1.PauseJobRequest{Id: jobID}))
	require.NoError(t, err)
}

// settled waits until every slot the trigger fired for the job has a final
// status in the history, and returns them.
func (s *overlapSuite) settled(t *testing.T, jobID string) []*historyv1.Execution {
	t.Helper()
	var list []*historyv1.Execution
	waitFor(t, 60*time.Second, "every fired slot final in the history", func() bool {
		resp, err := s.trigger.ListSlots(t.Context(), connect.NewRequest(&triggerv1.ListSlotsRequest{JobId: jobID, PageSize: 1000}))
		require.NoError(t, err)
		list = s.listExecutions(t, &historyv1.ListExecutionsRequest{JobId: jobID})
		if len(list) != len(resp.Msg.GetSlots()) {
			return false
		}
		for _, e := range list {
			switch e.GetStatus() {
			case historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
				historyv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
			default:
				return false
			}
		}
		return true
	})
	return list
}

func byStatus(list []*historyv1.Execution) map[historyv1.ExecutionStatus][]*historyv1.Execution {
	out := map[historyv1.ExecutionStatus][]*historyv1.Execution{}
	for _, e := range list {
		out[e.GetStatus()] = append(out[e.GetStatus()], e)
	}
	return out
}

func (s *overlapSuite) skip(t *testing.T) {
	target := newSlowTarget(t, 3*time.Second)
	jobID := s.everySecond(t, "overlap skip", target.URL, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP)
	waitFor(t, 60*time.Second, "three deliveries", func() bool {
		_, started, _ := target.snapshot()
		return len(started) >= 3
	})
	s.pause(t, jobID)
	list := s.settled(t, jobID)
	most, started, _ := target.snapshot()
	require.Equal(t, 1, most, "never two deliveries of the job at once")
	statuses := byStatus(list)
	require.Len(t, statuses[historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED], len(started), "every delivered slot succeeded, every other was skipped")
	require.GreaterOrEqual(t, len(statuses[historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED]), 2)
	for _, e := range statuses[historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED] {
		require.Zero(t, started[e.GetExecutionId()], "a skipped slot is not delivered")
		running, ok := strings.CutPrefix(e.GetReason(), "skipped: execution ")
		require.True(t, ok, e.GetReason())
		running, ok = strings.CutSuffix(running, " of this job is still in progress")
		require.True(t, ok, e.GetReason())
		require.Equal(t, 1, started[running], "the reason names a delivered execution")
	}
	for id, n := range started {
		require.Equal(t, 1, n, "execution %s delivered once", id)
	}
	skipped := s.listExecutions(t, &historyv1.ListExecutionsRequest{JobId: jobID, Statuses: []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED}})
	require.Len(t, skipped, len(statuses[historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED]), "searchable by status")
}

func (s *overlapSuite) bufferOne(t *testing.T) {
	target := newSlowTarget(t, 3*time.Second)
	jobID := s.everySecond(t, "overlap buffer one", target.URL, registryv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE)
	mostWaiting := 0
	waitFor(t, 60*time.Second, "three deliveries", func() bool {
		buffered := s.listExecutions(t, &historyv1.ListExecutionsRequest{JobId: jobID, Statuses: []historyv1.ExecutionStatus{historyv1.ExecutionStatus_EXECUTION_STATUS_BUFFERED}})
		mostWaiting = max(mostWaiting, stillWaiting(t, buffered))
		_, started, _ := target.snapshot()
		return len(started) >= 3
	})
	s.pause(t, jobID)
	list := s.settled(t, jobID)
	most, started, _ := target.snapshot()
	require.Equal(t, 1, most, "never two deliveries of the job at once")
	require.LessOrEqual(t, mostWaiting, 1, "never more than one slot waiting")
	statuses := byStatus(list)
	succeeded := statuses[historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED]
	require.Len(t, succeeded, len(started))
	require.NotEmpty(t, statuses[historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED], "slots that found one waiting")
	// A buffered slot ran after the one it waited for: its delivery came
	// well after its nominal time (the 3 s of the running one).
	target.mu.Lock()
	waited := 0
	for _, e := range succeeded {
		if target.firstSeen[e.GetExecutionId()].Sub(e.GetNominalTime().AsTime()) >= time.Second {
			waited++
		}
	}
	target.mu.Unlock()
	require.Positive(t, waited, "some slot waited for the running one and then ran")
}

// stillWaiting counts the executions of buffered, all listed BUFFERED by
// the history, that are still waiting. The history learns that a buffered
// execution was promoted only from its next event (a STARTED a quarter of a
// second into its attempt, or its outcome), so a promoted one can still be
// listed beside the slot buffered behind it, whose reason names it as the
// execution in progress: one that another's reason names is running, not
// waiting.
func stillWaiting(t *testing.T, buffered []*historyv1.Execution) int {
	t.Helper()
	running := map[string]bool{}
	for _, e := range buffered {
		id, ok := strings.CutPrefix(e.GetReason(), "buffered: waiting for execution ")
		require.True(t, ok, e.GetReason())
		id, ok = strings.CutSuffix(id, " of this job to end")
		require.True(t, ok, e.GetReason())
		running[id] = true
	}
	waiting := 0
	for _, e := range buffered {
		if !running[e.GetExecutionId()] {
			waiting++
		}
	}
	return waiting
}

func (s *overlapSuite) cancelOther(t *testing.T) {
	target := newSlowTarget(t, 3*time.Second)
	jobID := s.everySecond(t, "overlap cancel other", target.URL, registryv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER)
	waitFor(t, 60*time.Second, "three aborted deliveries", func() bool {
		_, _, aborted := target.snapshot()
		return len(aborted) >= 3
	})
	s.pause(t, jobID)
	close(target.unblock) // the last one need not wait out its 3 s
	list := s.settled(t, jobID)
	_, started, aborted := target.snapshot()
	cancelled := byStatus(list)[historyv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED]
	require.GreaterOrEqual(t, len(cancelled), 3)
	for _, e := range cancelled {
		require.True(t, strings.HasPrefix(e.GetReason(), "cancelled by overlap policy: execution "), e.GetReason())
		if started[e.GetExecutionId()] > 0 {
			require.True(t, aborted[e.GetExecutionId()], "a cancelled delivery in flight is aborted at the target")
		}
	}
	for id, n := range started {
		require.Equal(t, 1, n, "execution %s not retried after its cancel", id)
	}
}

// dispatcherCrash: the dispatcher is SIGKILLed while the first attempt of
// a SKIP job's execution is at the target; restarted, it delivers the same
// execution again (its first attempt was never acknowledged) and the
// policy admits it, being the job's active execution; the slots queued
// meanwhile are skipped naming it; after it, later slots run.
func (s *overlapSuite) dispatcherCrash(t *testing.T) {
	target := newSlowTarget(t, 3*time.Second)
	jobID := s.everySecond(t, "overlap crash", target.URL, registryv1.OverlapPolicy_OVERLAP_POLICY_SKIP)
	var first string
	waitFor(t, 60*time.Second, "a delivery in flight", func() bool {
		target.mu.Lock()
		defer target.mu.Unlock()
		first = target.current
		return target.inFlight > 0
	})
	s.mesh.Dispatcher.Kill()
	_, err := s.mesh.Restart(t.Context(), s.mesh.Dispatcher)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the interrupted execution delivered again and later slots delivered", func() bool {
		_, started, _ := target.snapshot()
		return started[first] >= 2 && len(started) >= 3
	})
	s.pause(t, jobID)
	list := s.settled(t, jobID)
	for _, e := range list {
		if e.GetExecutionId() == first {
			require.Equal(t, historyv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, e.GetStatus())
		}
	}
	require.NotEmpty(t, byStatus(list)[historyv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED])
	_, started, _ := target.snapshot()
	for id, n := range started {
		if id != first {
			require.Equal(t, 1, n, "execution %s delivered once", id)
		}
	}
}
