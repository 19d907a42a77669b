package meshbench

import (
	"context"

	"github.com/google/uuid"

	"github.com/cronmesh/cronmesh/bench/internal/ceiling"
	"github.com/cronmesh/cronmesh/bench/internal/workload"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// dispatchRequestSize is the encoded size of a DispatchRequest for a
// benchmark job, as the trigger publishes it: the job's target with a
// signing secret, labels, priority and a retry policy. The registry's
// validation also fills the retry policy's defaults, a few bytes more than
// the empty policy here; that is not worth importing its rules for.
func dispatchRequestSize(targetURL string) int {
	plan := &workload.Plan{Jobs: []workload.Job{{Kind: workload.EverySecond}}}
	job := plan.Request(0, targetURL).GetJob()
	job.Id = uuid.Must(uuid.NewV7()).String()
	job.Namespace = namespace
	job.Version = 1
	job.Priority = registryv1.Priority_PRIORITY_NORMAL
	job.RetryPolicy = &registryv1.RetryPolicy{}
	job.GetTarget().GetHttp().SigningSecret = "whsec_" + uuid.NewString() + uuid.NewString()[:12]
	return ceiling.DispatchRequestSize(job)
}

// measureCeilings runs both ceilings one after the other, before the mesh
// starts, so that neither competes with the other or with the mesh.
func (e *env) measureCeilings(ctx context.Context) ceiling.Machine {
	size := dispatchRequestSize(e.target.URL + "/j/123456")
	if e.cfg.Ceiling >= 0 {
		e.cfg.Log.Info("ceiling: RabbitMQ publish+consume with confirms, then PostgreSQL batched inserts", "message_bytes", size)
	}
	return ceiling.Measure(ctx, ceiling.Options{
		AMQPURL: e.cfg.AMQPURL, Pool: e.db, Name: e.name, MessageSize: size, Duration: e.cfg.Ceiling,
	})
}

// startMeasured is a scenario's start: the environment, the ceilings
// (measured before the mesh runs, so that neither competes with it) and
// the mesh. On error nothing is left running.
func startMeasured(ctx context.Context, cfg Config, scenario string) (*env, ceiling.Machine, error) {
	e, err := newEnv(ctx, cfg, scenario)
	if err != nil {
		return nil, ceiling.Machine{}, err
	}
	ceil := e.measureCeilings(ctx)
	if err := e.startMesh(ctx); err != nil {
		e.close()
		return nil, ceiling.Machine{}, err
	}
	return e, ceil, nil
}
