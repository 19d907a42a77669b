package apply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"sigs.k8s.io/yaml"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// updatable are the Job fields UpdateJob accepts in its mask (see
// UpdateJobRequest.update_mask): the fields apply compares and updates.
var updatable = map[protoreflect.Name]bool{
	"display_name": true, "description": true, "labels": true, "schedule": true, "target": true,
	"retry_policy": true, "catch_up_window": true, "paused": true, "priority": true, "spread_window": true,
	"execution_deadline": true, "stop_retries_at_next_slot": true,
	"pause_after_dead_letters": true, "overlap_policy": true,
	"max_runs": true,
}

// Spec is one job as a file declares it.
type Spec struct {
	// Job holds the declared values; output-only fields other than id are
	// cleared (a job printed by `cronctl jobs get -o yaml` applies as is).
	Job *registryv1.Job
	// Fields are the updatable top-level fields the document names, in
	// field-number order. Only these are compared and updated: a field the
	// file leaves out keeps whatever the registry holds (often a default it
	// filled in), so applying a file twice changes nothing.
	Fields []protoreflect.FieldDescriptor
	// Source locates the spec in its file ("jobs.yaml#2" is the second job).
	Source string
}

// Key is how apply finds the spec's job: its id when the file gives one,
// else its display name within the namespace.
func (s Spec) Key() string {
	if s.Job.GetId() != "" {
		return "id " + s.Job.GetId()
	}
	return "name " + s.Job.GetDisplayName()
}

// Parse reads jobs from YAML or JSON: one job, a list of jobs, or several
// YAML documents (separated by "---") of either. Every Job field is written
// with its proto JSON name (displayName; display_name is accepted too), so
// durations are "30s" and timestamps RFC 3339. Unknown fields are errors.
func Parse(name string, data []byte) ([]Spec, error) {
	var specs []Spec
	for _, doc := range splitDocuments(data) {
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var items []json.RawMessage
		if raw[0] == '[' {
			if err := json.Unmarshal(raw, &items); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		} else {
			items = []json.RawMessage{raw}
		}
		for _, item := range items {
			source := fmt.Sprintf("%s#%d", name, len(specs)+1)
			spec, err := parseJob(item)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", source, err)
			}
			spec.Source = source
			specs = append(specs, spec)
		}
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", name)
	}
	seen := map[string]string{}
	for _, s := range specs {
		if s.Job.GetId() == "" && s.Job.GetDisplayName() == "" {
			return nil, fmt.Errorf("%s: a job needs a displayName (or an id) to be applied", s.Source)
		}
		if other, dup := seen[s.Key()]; dup {
			return nil, fmt.Errorf("%s and %s declare the same job (%s)", other, s.Source, s.Key())
		}
		seen[s.Key()] = s.Source
	}
	return specs, nil
}

func parseJob(raw json.RawMessage) (Spec, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return Spec{}, fmt.Errorf("a job must be a mapping: %w", err)
	}
	job := &registryv1.Job{}
	if err := protojson.Unmarshal(raw, job); err != nil {
		return Spec{}, err
	}
	fields := job.ProtoReflect().Descriptor().Fields()
	present := map[protoreflect.FieldNumber]bool{}
	for k := range keys {
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k))
		}
		if fd != nil && updatable[fd.Name()] {
			present[fd.Number()] = true
		}
	}
	spec := Spec{Job: &registryv1.Job{Id: job.GetId()}}
	dst := spec.Job.ProtoReflect()
	src := job.ProtoReflect()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !present[fd.Number()] {
			continue
		}
		spec.Fields = append(spec.Fields, fd)
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		}
	}
	return spec, nil
}

// splitDocuments splits YAML at "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur []string
	for line := range strings.Lines(string(data)) {
		if strings.TrimRight(line, " \t\r\n") == "---" {
			docs = append(docs, []byte(strings.Join(cur, "")))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return append(docs, []byte(strings.Join(cur, "")))
}
