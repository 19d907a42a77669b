package meshbench

import (
	"context"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/ceiling"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/services/devstack/internal/workload"
)

// ceilings are the machine's raw rates measured in this run.
type ceilings struct {
	machine ceiling.Machine
	skipped bool
	err     error
}

// dispatchRequestSize is the encoded size of a DispatchRequest for a
// benchmark job, as the trigger publishes it (the job's target with the
// registry's signing secret, labels and retry policy).
func dispatchRequestSize(targetURL string) int {
	plan := &workload.Plan{Jobs: []workload.Job{{Kind: workload.EverySecond}}}
	job := plan.Request(0, targetURL).GetJob()
	job.GetTarget().GetHttp().SigningSecret = "whsec_" + uuid.NewString() + uuid.NewString()[:12]
	now := time.Now()
	id := uuid.Must(uuid.NewV7()).String()
	req := &dispatchv1.DispatchRequest{
		ExecutionId: execid.For(id, now), JobId: id, Namespace: namespace, Attempt: 1,
		NominalTime: timestamppb.New(now), FireTime: timestamppb.New(now),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED, Target: job.GetTarget(),
		RetryPolicy: &registryv1.RetryPolicy{}, Priority: registryv1.Priority_PRIORITY_NORMAL,
		JobVersion: 1, JobDisplayName: job.GetDisplayName(), JobLabels: job.GetLabels(),
	}
	b, _ := proto.Marshal(req)
	return len(b)
}

// measureCeilings runs both ceilings one after the other, before the mesh
// starts, so that neither competes with the other or with the mesh.
func (e *env) measureCeilings(ctx context.Context) ceilings {
	if e.cfg.Ceiling < 0 {
		return ceilings{skipped: true}
	}
	size := dispatchRequestSize(e.target.URL + "/j/123456")
	e.cfg.Log.Info("ceiling: RabbitMQ publish+consume with confirms, then PostgreSQL batched inserts", "message_bytes", size)
	m, err := ceiling.Measure(ctx, ceiling.Options{
		AMQPURL: e.cfg.AMQPURL, Pool: e.db, Name: e.name, MessageSize: size, Duration: e.cfg.Ceiling,
	})
	return ceilings{machine: m, err: err}
}
