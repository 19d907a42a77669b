package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

// BenchmarkLookUp compares the look-up before delivery as one query
// (Check) with the two it replaced (Cancelled, then Completed), for a
// batch of 200 attempts against 20,000 recorded ones.
func BenchmarkLookUp(b *testing.B) {
	s := newStore(b)
	ctx := b.Context()
	var done []store.CompletedAttempt
	slot := time.Now().Truncate(time.Second)
	for range 20_000 {
		done = append(done, store.CompletedAttempt{NominalTime: slot, ExecutionID: uuid.NewString(), Attempt: 1, Final: true, Time: time.Now()})
	}
	for i := 0; i < len(done); i += 1000 {
		require.NoError(b, s.RecordCompleted(ctx, done[i:i+1000]))
	}
	refs := make([]store.CheckRef, 200)
	cancels := make([]store.ExecutionRef, len(refs))
	attempts := make([]store.AttemptRef, len(refs))
	for i := range refs {
		id := done[i*50].ExecutionID
		if i%2 == 0 {
			id = uuid.NewString()
		}
		refs[i] = store.CheckRef{Namespace: "alpha", NominalTime: slot, ExecutionID: id, Attempt: 1}
		cancels[i] = store.ExecutionRef{Namespace: "alpha", ExecutionID: id}
		attempts[i] = store.AttemptRef{NominalTime: slot, ExecutionID: id, Attempt: 1}
	}
	b.Run("one query", func(b *testing.B) {
		for b.Loop() {
			_, err := s.Check(ctx, refs)
			require.NoError(b, err)
		}
	})
	b.Run("two queries", func(b *testing.B) {
		for b.Loop() {
			_, err := s.Cancelled(ctx, cancels)
			require.NoError(b, err)
			_, err = s.Completed(ctx, attempts)
			require.NoError(b, err)
		}
	})
}
