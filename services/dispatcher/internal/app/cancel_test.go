package app_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	eventsv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/events/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/config"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/app"
)

// replicaOf makes a dispatcher share first's database schema and broker
// names: a second replica of the same deployment.
func replicaOf(first *dispatcher) dispatcherOption {
	return func(c *app.Config, _ *[]app.Option) { *c = first.cfg }
}

// allowLoopback lets the real client deliver to an httptest server.
func allowLoopback(c *app.Config, _ *[]app.Option) {
	c.AllowNetworks = config.StringList{"127.0.0.0/8"}
}

// TestCancelInFlightOnAnotherReplica: an attempt in flight on one replica
// (a target that holds the request open) is aborted by a cancel made
// through the other: the target sees its request cancelled, the execution
// ends CANCELLED and is not retried. A cancel by another namespace, made on
// the very replica that runs the attempt, aborts nothing; cancelling again
// says so.
func TestCancelInFlightOnAnotherReplica(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	arrived, aborted := make(chan struct{}, 4), make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		arrived <- struct{}{}
		<-r.Context().Done()
		aborted <- struct{}{}
	}))
	defer srv.Close()

	running := startDispatcher(t, realDelivery, allowLoopback)
	req := slowRequest(srv.URL)
	running.publish(t, req)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt never reached the target")
	}
	other := startDispatcher(t, realDelivery, allowLoopback, replicaOf(running))
	ctx := t.Context()

	res, err := running.client(keyBeta).CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: req.ExecutionId}))
	require.NoError(t, err, "another namespace's cancel is recorded under its own namespace")
	require.Equal(t, dispatcherv1.CancelStage_CANCEL_STAGE_RECORDED, res.Msg.Stage, "nothing of beta's is in flight")
	select {
	case <-aborted:
		t.Fatal("another namespace's cancel aborted the attempt")
	case <-time.After(time.Second): // four polls of the feed
	}

	res, err = other.client(keyAlpha).CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: req.ExecutionId}))
	require.NoError(t, err)
	require.Equal(t, dispatcherv1.CancelStage_CANCEL_STAGE_RECORDED, res.Msg.Stage, "the attempt is on the other replica")
	require.False(t, res.Msg.AlreadyCancelled)
	select {
	case <-aborted:
	case <-time.After(30 * time.Second):
		t.Fatal("the target's request was not cancelled")
	}
	require.Eventually(t, func() bool {
		return running.events.has(req.ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED)
	}, 30*time.Second, 10*time.Millisecond)

	res, err = running.client(keyAlpha).CancelExecution(ctx, connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: req.ExecutionId}))
	require.NoError(t, err, "idempotent")
	require.True(t, res.Msg.AlreadyCancelled)
	require.Equal(t, dispatcherv1.CancelStage_CANCEL_STAGE_RECORDED, res.Msg.Stage, "nothing in flight any more")

	// The first retry tier is 100 ms: a retry would have come by now.
	time.Sleep(time.Second)
	require.EqualValues(t, 1, requests.Load(), "an aborted attempt is not retried")
	require.False(t, running.events.has(req.ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_FAILED))
}

// TestCancelInFlightHere: the replica running the attempt answers
// IN_FLIGHT and aborts it without waiting for the feed.
func TestCancelInFlightHere(t *testing.T) {
	t.Parallel()
	arrived, aborted := make(chan struct{}, 1), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
		aborted <- struct{}{}
	}))
	defer srv.Close()
	d := startDispatcher(t, realDelivery, allowLoopback)
	req := slowRequest(srv.URL)
	d.publish(t, req)
	<-arrived
	res, err := d.client(keyAlpha).CancelExecution(t.Context(), connect.NewRequest(&dispatcherv1.CancelExecutionRequest{ExecutionId: req.ExecutionId}))
	require.NoError(t, err)
	<-aborted
	require.Equal(t, dispatcherv1.CancelStage_CANCEL_STAGE_IN_FLIGHT, res.Msg.Stage)
	require.Eventually(t, func() bool {
		return d.events.has(req.ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_CANCELLED)
	}, 30*time.Second, 10*time.Millisecond)
	require.False(t, d.events.has(req.ExecutionId, eventsv1.ExecutionEventKind_EXECUTION_EVENT_KIND_DEAD))
}

// slowRequest is a first attempt of a new job of alpha to url, with a
// timeout long enough that only a cancel ends it, and retries left.
func slowRequest(url string) *dispatchv1.DispatchRequest {
	job := uuid.NewString()
	nominal := time.Now().Truncate(time.Second)
	return &dispatchv1.DispatchRequest{
		ExecutionId: execid.For(job, nominal), JobId: job, Namespace: "alpha", Attempt: 1,
		NominalTime: timestamppb.New(nominal), FireTime: timestamppb.New(nominal),
		Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Method: "POST", Url: url, SigningSecret: secret, Timeout: durationpb.New(5 * time.Minute),
		}}},
		RetryPolicy: &registryv1.RetryPolicy{MaxRetries: proto.Int32(3), InitialBackoff: durationpb.New(100 * time.Millisecond)},
		Priority:    registryv1.Priority_PRIORITY_LOW,
	}
}
