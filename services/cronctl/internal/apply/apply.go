// Package apply makes the registry hold the jobs a file declares: it creates
// the missing ones, updates the changed ones (a field mask of exactly the
// changed fields, guarded by the etag read) and leaves the rest alone.
//
// A job is identified by its id when the file gives one, else by its display
// name within the namespace of the API key. Names are therefore expected to
// be unique per namespace for the jobs apply manages; apply refuses a name
// that matches two jobs rather than guess.
package apply

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"sigs.k8s.io/yaml"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/targetcheck"
)

// Action is what apply does to one job.
type Action string

// Actions.
const (
	Create    Action = "create"
	Update    Action = "update"
	Unchanged Action = "unchanged"
)

// Change is the plan for one spec.
type Change struct {
	Spec   Spec
	Action Action
	// Existing is the registry's job; nil for Create.
	Existing *registryv1.Job
	// Mask names the changed top-level fields (proto names) for Update.
	Mask []string
	// Diff is a unified-style diff of the declared against the stored
	// values of the compared fields ("+" lines only for Create).
	Diff string
}

// Name is the job's display name, or its id when the spec has no name.
func (c Change) Name() string {
	if n := c.Spec.Job.GetDisplayName(); n != "" {
		return n
	}
	return c.Existing.GetDisplayName()
}

// Plan compares specs with the namespace's jobs and returns one Change per
// spec, in order. It writes nothing.
func Plan(ctx context.Context, client registryv1connect.JobServiceClient, specs []Spec) ([]Change, error) {
	byName, err := jobsByName(ctx, client)
	if err != nil {
		return nil, err
	}
	changes := make([]Change, 0, len(specs))
	for _, s := range specs {
		var existing *registryv1.Job
		if id := s.Job.GetId(); id != "" {
			resp, err := client.GetJob(ctx, connect.NewRequest(&registryv1.GetJobRequest{Id: id}))
			if err != nil {
				return nil, fmt.Errorf("%s: job %s: %w", s.Source, id, err)
			}
			existing = resp.Msg.GetJob()
		} else {
			matches := byName[s.Job.GetDisplayName()]
			if len(matches) > 1 {
				return nil, fmt.Errorf("%s: %d jobs are named %q; give the job's id in the file to pick one", s.Source, len(matches), s.Job.GetDisplayName())
			}
			if len(matches) == 1 {
				existing = matches[0]
			}
		}
		changes = append(changes, plan(s, existing))
	}
	return changes, nil
}

func plan(s Spec, existing *registryv1.Job) Change {
	// As the registry will: a credential header declared among the plain
	// ones is a secret header, and is compared as one.
	targetcheck.MoveCredentialHeaders(s.Job.GetTarget())
	if existing == nil {
		return Change{Spec: s, Action: Create, Diff: prefixLines("+ ", render(s.Job, s.Fields))}
	}
	var mask []string
	var diff strings.Builder
	want, have := s.Job.ProtoReflect(), existing.ProtoReflect()
	for _, fd := range s.Fields {
		if equalDeclared(fd, want, have) {
			continue
		}
		mask = append(mask, string(fd.Name()))
		shown := pruned(existing, s.Job)
		diff.WriteString(unified(render(shown, []protoreflect.FieldDescriptor{fd}), render(s.Job, []protoreflect.FieldDescriptor{fd})))
	}
	if len(mask) == 0 {
		return Change{Spec: s, Action: Unchanged, Existing: existing}
	}
	return Change{Spec: s, Action: Update, Existing: existing, Mask: mask, Diff: diff.String()}
}

// Execute carries out changes: CreateJob for Create, UpdateJob with the mask
// and the etag read by Plan for Update (ABORTED when the job changed since).
// It returns the resulting jobs by change index (the existing job for
// Unchanged) and stops at the first error.
func Execute(ctx context.Context, client registryv1connect.JobServiceClient, changes []Change) ([]*registryv1.Job, error) {
	jobs := make([]*registryv1.Job, len(changes))
	for i, c := range changes {
		switch c.Action {
		case Create:
			job := proto.CloneOf(c.Spec.Job)
			job.Id = ""
			resp, err := client.CreateJob(ctx, connect.NewRequest(&registryv1.CreateJobRequest{Job: job}))
			if err != nil {
				return jobs, fmt.Errorf("create %q (%s): %w", c.Name(), c.Spec.Source, err)
			}
			jobs[i] = resp.Msg.GetJob()
		case Update:
			job := proto.CloneOf(c.Spec.Job)
			job.Id, job.Etag = c.Existing.GetId(), c.Existing.GetEtag()
			resp, err := client.UpdateJob(ctx, connect.NewRequest(&registryv1.UpdateJobRequest{
				Job: job, UpdateMask: &fieldmaskpb.FieldMask{Paths: c.Mask},
			}))
			if err != nil {
				return jobs, fmt.Errorf("update %q (%s): %w", c.Name(), c.Spec.Source, err)
			}
			jobs[i] = resp.Msg.GetJob()
		default:
			jobs[i] = c.Existing
		}
	}
	return jobs, nil
}

// jobsByName pages through the namespace's jobs.
func jobsByName(ctx context.Context, client registryv1connect.JobServiceClient) (map[string][]*registryv1.Job, error) {
	byName := map[string][]*registryv1.Job{}
	token := ""
	for {
		resp, err := client.ListJobs(ctx, connect.NewRequest(&registryv1.ListJobsRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		for _, j := range resp.Msg.GetJobs() {
			byName[j.GetDisplayName()] = append(byName[j.GetDisplayName()], j)
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return byName, nil
		}
	}
}

// equalDeclared reports whether have holds what want declares for the
// top-level field fd. Within messages only the fields want sets are
// compared, because the registry stores defaults for what a file leaves out
// (target.http.method POST, schedule.time_zone UTC); a map, a list, a
// scalar or a Duration/Timestamp is compared whole. The signing secret is
// never compared and secret headers only by name: their values are
// write-only and never read back (change one with cronctl jobs update).
func equalDeclared(fd protoreflect.FieldDescriptor, want, have protoreflect.Message) bool {
	if isPlainMessage(fd) {
		if !want.Has(fd) {
			return true
		}
		return equalSet(want.Get(fd).Message(), have.Get(fd).Message())
	}
	return want.Get(fd).Equal(have.Get(fd))
}

func equalSet(want, have protoreflect.Message) bool {
	equal := true
	want.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "signing_secret":
		case fd.Name() == "secret_headers":
			equal = sameKeys(v.Map(), have.Get(fd).Map())
		case isPlainMessage(fd):
			equal = equalSet(v.Message(), have.Get(fd).Message())
		default:
			equal = v.Equal(have.Get(fd))
		}
		return equal
	})
	return equal
}

// sameKeys reports whether two maps have the same keys.
func sameKeys(a, b protoreflect.Map) bool {
	if a.Len() != b.Len() {
		return false
	}
	same := true
	a.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		same = b.Has(k)
		return same
	})
	return same
}

// isPlainMessage is a singular message field other than a well-known type.
func isPlainMessage(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind && !fd.IsMap() && !fd.IsList() &&
		!strings.HasPrefix(string(fd.Message().FullName()), "google.protobuf.")
}

// pruned is a copy of have with only the fields shape sets (recursively), so
// that a diff shows the declared fields, not the defaults the file omits.
func pruned(have, shape proto.Message) proto.Message {
	out := proto.Clone(have)
	prune(out.ProtoReflect(), shape.ProtoReflect())
	return out
}

func prune(m, shape protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.ContainingMessage().FullName() == "cronmesh.registry.v1.Job":
		case !shape.Has(fd):
			// A oneof member the file replaces by another (cron by
			// interval) stays, so the diff shows what goes away.
			if o := fd.ContainingOneof(); o == nil || shape.WhichOneof(o) == nil {
				m.Clear(fd)
			}
		case isPlainMessage(fd) && shape.Has(fd):
			prune(v.Message(), shape.Get(fd).Message())
		}
		return true
	})
}

// render prints the given top-level fields of job as YAML.
func render(job proto.Message, fields []protoreflect.FieldDescriptor) string {
	src := job.ProtoReflect()
	only := src.New()
	for _, fd := range fields {
		if src.Has(fd) {
			only.Set(fd, src.Get(fd))
		}
	}
	raw, err := protojson.MarshalOptions{EmitUnpopulated: false}.Marshal(only.Interface())
	if err != nil {
		return fmt.Sprintf("<%v>\n", err)
	}
	y, err := yaml.JSONToYAML(raw)
	if err != nil {
		return fmt.Sprintf("<%v>\n", err)
	}
	if s := string(y); s != "{}\n" {
		return s
	}
	// A declared zero value (paused: false) is not populated in proto3.
	var b strings.Builder
	for _, fd := range fields {
		fmt.Fprintf(&b, "%s: %v\n", fd.JSONName(), src.Get(fd).Interface())
	}
	return b.String()
}

func prefixLines(prefix, text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		b.WriteString(prefix + line)
	}
	return b.String()
}
