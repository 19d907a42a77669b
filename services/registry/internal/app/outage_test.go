package app_test

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/amqptest"
)

// TestWritesSurviveABrokerOutage: with RabbitMQ unreachable the API keeps
// accepting changes; when it is back, every event goes out, in order per job.
func TestWritesSurviveABrokerOutage(t *testing.T) {
	t.Parallel()
	proxy := amqptest.NewProxy(t, true) // the broker is down from the start
	reg := startRegistry(t, withAMQPURL(proxy.URL()), withoutPauseOnFailure())
	ctx := context.Background()
	client := reg.client(keyAlpha)

	const jobs, updates = 5, 4
	ids := make([]string, jobs)
	for i := range jobs {
		resp, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: httpJob(fmt.Sprintf("j%d", i))}))
		require.NoError(t, err)
		ids[i] = resp.Msg.Job.Id
	}
	for u := range updates {
		for _, id := range ids {
			_, err := client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
				Job:        &registryv1.Job{Id: id, DisplayName: fmt.Sprintf("v%d", u+2)},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"display_name"}},
			}))
			require.NoError(t, err)
		}
	}
	var pending int
	require.NoError(t, reg.app.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&pending))
	require.Equal(t, jobs*(1+updates), pending, "every change is kept while the broker is down")

	proxy.Up()
	events := reg.nextEvents(t, jobs*(1+updates))
	last := map[string]int64{}
	for _, ev := range events {
		if ev.Version <= last[ev.Job.Id] {
			continue // a redelivery (at least once): consumers skip it by version
		}
		require.Equal(t, last[ev.Job.Id]+1, ev.Version, "job %s: events in version order, none skipped", ev.Job.Id)
		last[ev.Job.Id] = ev.Version
	}
	for len(last) < jobs || !allAt(last, 1+updates) {
		ev := reg.nextEvents(t, 1)[0]
		if ev.Version > last[ev.Job.Id] {
			require.Equal(t, last[ev.Job.Id]+1, ev.Version, "job %s: events in version order, none skipped", ev.Job.Id)
			last[ev.Job.Id] = ev.Version
		}
	}

	// And a broker that drops connections midway is survived as well.
	proxy.Sever()
	_, err := client.PauseJob(ctx, connect.NewRequest(&registryv1.PauseJobRequest{Id: ids[0]}))
	require.NoError(t, err)
	// Anything before the pause event can only be a redelivery of an
	// earlier event.
	for {
		ev := reg.nextEvents(t, 1)[0]
		if ev.Job.Id == ids[0] && ev.Version == last[ids[0]]+1 {
			require.True(t, ev.Job.Paused)
			break
		}
		require.LessOrEqual(t, ev.Version, last[ev.Job.Id], "an unexpected new event")
	}
}

// allAt reports whether every job's last seen version is v.
func allAt(last map[string]int64, v int64) bool {
	for _, got := range last {
		if got != v {
			return false
		}
	}
	return true
}
