package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/services/trigger/internal/firing"
	"github.com/cronmesh/cronmesh/services/trigger/internal/store"
)

func TestListSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job, d := e.setup(t)
	var slots []firing.Slot
	for i := range 7 {
		s := firing.Slot{Nominal: d.NextFire.Add(time.Duration(i) * 5 * time.Minute), Kind: firing.KindScheduled}
		if i == 0 {
			s.Kind, s.Reason = firing.KindMissed, "older than the catch-up window"
		}
		slots = append(slots, s)
	}
	fire := d.NextFire.Add(time.Hour)
	_, err := e.store.Commit(t.Context(), fences(4), []firing.Advance{{Due: d, Slots: slots, To: fire}}, fire)
	require.NoError(t, err)
	manual := ts("2030-03-10T10:07:00.000001Z")
	e.apply(t, runEvent(job, 1, manual), store.Fired)

	// Newest first: the manual slot sits between the 10:05 and 10:10 ones.
	var want []store.SlotRecord
	for i := len(slots) - 1; i >= 0; i-- {
		want = append(want, store.SlotRecord{
			ExecutionID: execid.For(job.Id, slots[i].Nominal), Nominal: slots[i].Nominal, Record: fire,
			Kind: slots[i].Kind, Epoch: 4, Reason: slots[i].Reason,
		})
		if i == 1 {
			want = append(want, store.SlotRecord{
				ExecutionID: execid.For(job.Id, manual), Nominal: manual, Record: manual, Kind: firing.KindManual,
			})
		}
	}
	var got []store.SlotRecord
	var before time.Time
	pages := 0
	for {
		page, next, err := e.store.ListSlots(t.Context(), testNamespace, job.Id, 3, before)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 3)
		got = append(got, page...)
		pages++
		if next.IsZero() {
			break
		}
		require.Equal(t, page[len(page)-1].Nominal, next)
		before = next
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)

	all, next, err := e.store.ListSlots(t.Context(), testNamespace, job.Id, 0, time.Time{})
	require.NoError(t, err)
	require.Equal(t, want, all, "page size 0 means the default")
	require.True(t, next.IsZero())
}

func TestListSlotsNotFoundAndEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job, _ := e.setup(t)
	page, next, err := e.store.ListSlots(t.Context(), testNamespace, job.Id, 10, time.Time{})
	require.NoError(t, err)
	require.Empty(t, page)
	require.NotNil(t, page)
	require.True(t, next.IsZero())

	e.apply(t, runEvent(job, 1, ts("2030-03-10T10:02:00Z")), store.Fired)
	for _, tt := range []struct{ name, namespace, id string }{
		{"other namespace", "beta", job.Id},
		{"unknown job", testNamespace, uuid.NewString()},
		{"not a UUID", testNamespace, "x"},
	} {
		_, _, err := e.store.ListSlots(t.Context(), tt.namespace, tt.id, 10, time.Time{})
		require.ErrorIs(t, err, store.ErrNotFound, tt.name)
	}
	e.apply(t, event(kindDeleted, job, 2, ts("2030-03-10T10:03:00Z")), store.Upserted)
	_, _, err = e.store.ListSlots(t.Context(), testNamespace, job.Id, 10, time.Time{})
	require.ErrorIs(t, err, store.ErrNotFound, "deleted")
}
