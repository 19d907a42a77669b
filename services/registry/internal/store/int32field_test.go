package store

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// TestInt32FieldReadsWhatAFullDecodeReads: the pause on failure's one-field
// read of a stored spec agrees with proto.Unmarshal, with the field set,
// absent, beside every kind of other field, and rejects a truncated spec.
func TestInt32FieldReadsWhatAFullDecodeReads(t *testing.T) {
	t.Parallel()
	number := (&registryv1.Job{}).ProtoReflect().Descriptor().Fields().ByName("pause_after_dead_letters").Number()
	for _, n := range []int32{0, 1, 3, 1 << 20} {
		job := &registryv1.Job{
			DisplayName: "nightly", Labels: map[string]string{"team": "a"}, PauseAfterDeadLetters: n,
			Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
				Url: "https://example.test/hook", Headers: map[string]string{"X-A": "b"},
			}}},
			Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 * * * *"}},
		}
		spec, err := proto.Marshal(job)
		require.NoError(t, err)
		got, err := int32Field(spec, number)
		require.NoError(t, err)
		require.Equal(t, n, got)
		if len(spec) > 1 {
			_, err := int32Field(spec[:len(spec)-1], number)
			require.Error(t, err, "a truncated spec is an error")
		}
	}
	got, err := int32Field(nil, number)
	require.NoError(t, err)
	require.Zero(t, got)
}
