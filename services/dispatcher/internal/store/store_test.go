package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/daypart"
	"github.com/cronmesh/cronmesh/libs/testkit/pgtest"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

const secret = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"

func newStore(t testing.TB) *store.Store {
	t.Helper()
	pool, _ := pgtest.Migrated(t, store.Migrations)
	s, err := store.New(store.Options{Pool: pool})
	require.NoError(t, err)
	return s
}

// letter is a dead letter of job in namespace that died at dead.
func letter(namespace, job string, dead time.Time) store.DeadLetter {
	exec := uuid.NewString()
	return store.DeadLetter{
		ID: uuid.Must(uuid.NewV7()).String(), Namespace: namespace, JobID: job, ExecutionID: exec, Attempt: 3,
		NominalTime: dead.Add(-time.Minute), DeadTime: dead, Reason: "HTTP 500", ResponseStatus: 500, ResponseExcerpt: "oops",
		Request: &dispatchv1.DispatchRequest{
			ExecutionId: exec, JobId: job, Namespace: namespace, Attempt: 3, NominalTime: timestamppb.New(dead.Add(-time.Minute)),
			Target: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "https://example.test", SigningSecret: secret}}},
		},
	}
}

func TestInsertIsIdempotentAndClean(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	job := uuid.NewString()
	now := time.Now()
	a := letter("alpha", job, now)
	a.ResponseExcerpt = "bad \xff utf-8 and a \x00 NUL"
	b := letter("alpha", job, now.Add(time.Second))
	n, err := s.InsertDeadLetters(ctx, []store.DeadLetter{a, b})
	require.NoError(t, err)
	require.Equal(t, 2, n)

	// The same (execution, attempt) again, even under another id, is not a
	// new dead letter; another attempt of the same execution is.
	again := a
	again.ID = uuid.Must(uuid.NewV7()).String()
	later := a
	later.ID, later.Attempt = uuid.Must(uuid.NewV7()).String(), 6
	n, err = s.InsertDeadLetters(ctx, []store.DeadLetter{again, later})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	got, next, err := s.ListDeadLetters(ctx, "alpha", "", 10, store.Cursor{})
	require.NoError(t, err)
	require.True(t, next.IsZero())
	require.Len(t, got, 3)
	var stored store.DeadLetter
	for _, d := range got {
		if d.ID == a.ID {
			stored = d
		}
	}
	require.Equal(t, "bad \uFFFD utf-8 and a \uFFFD NUL", stored.ResponseExcerpt)
	require.Equal(t, secret, stored.Request.Target.GetHttp().SigningSecret)
	require.True(t, stored.DeadTime.Equal(now.Truncate(time.Microsecond)))
	require.True(t, stored.NominalTime.Equal(a.NominalTime.Truncate(time.Microsecond)))
	require.EqualValues(t, 500, stored.ResponseStatus)

	stripped := store.StripSecret(stored.Request)
	require.Empty(t, stripped.Target.GetHttp().SigningSecret)
	require.Equal(t, secret, stored.Request.Target.GetHttp().SigningSecret, "StripSecret copies")
}

func TestInsertRefusesInvalid(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	tests := []struct {
		name string
		mod  func(*store.DeadLetter)
	}{
		{"id", func(d *store.DeadLetter) { d.ID = "x" }},
		{"job id", func(d *store.DeadLetter) { d.JobID = "" }},
		{"execution id", func(d *store.DeadLetter) { d.ExecutionID = "nope" }},
		{"namespace", func(d *store.DeadLetter) { d.Namespace = "" }},
		{"request", func(d *store.DeadLetter) { d.Request = nil }},
		{"dead time", func(d *store.DeadLetter) { d.DeadTime = time.Time{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			good, bad := letter("alpha", uuid.NewString(), time.Now()), letter("alpha", uuid.NewString(), time.Now())
			tt.mod(&bad)
			require.ErrorIs(t, bad.Validate(), store.ErrInvalidDeadLetter)
			_, err := s.InsertDeadLetters(t.Context(), []store.DeadLetter{good, bad})
			require.ErrorIs(t, err, store.ErrInvalidDeadLetter)
			got, _, err := s.ListDeadLetters(t.Context(), "alpha", good.JobID, 10, store.Cursor{})
			require.NoError(t, err)
			require.Empty(t, got, "nothing is written when one letter is invalid")
		})
	}
}

func TestListPagesNewestFirst(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	jobA, jobB := uuid.NewString(), uuid.NewString()
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var all []store.DeadLetter
	for i := range 7 {
		job := jobA
		if i%2 == 1 {
			job = jobB
		}
		// Two letters share each dead time: ties are ordered by id.
		all = append(all, letter("alpha", job, base.Add(time.Duration(i/2)*time.Second)))
	}
	all = append(all, letter("beta", jobA, base))
	_, err := s.InsertDeadLetters(ctx, all)
	require.NoError(t, err)

	tests := []struct {
		name, job string
		size      int
		want      int
	}{
		{"namespace", "", 3, 7},
		{"namespace in one page", "", 100, 7},
		{"job", jobA, 2, 4},
		{"other job", jobB, 1, 3},
		{"unknown job", uuid.NewString(), 5, 0},
		{"not a job id", "nope", 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []store.DeadLetter
			var cursor store.Cursor
			for {
				page, next, err := s.ListDeadLetters(ctx, "alpha", tt.job, tt.size, cursor)
				require.NoError(t, err)
				require.LessOrEqual(t, len(page), tt.size)
				got = append(got, page...)
				if next.IsZero() {
					break
				}
				cursor = next
			}
			require.Len(t, got, tt.want)
			for i := 1; i < len(got); i++ {
				prev, cur := got[i-1], got[i]
				require.True(t, prev.DeadTime.After(cur.DeadTime) || (prev.DeadTime.Equal(cur.DeadTime) && prev.ID > cur.ID),
					"newest first, ties by id descending")
			}
			for _, d := range got {
				require.Equal(t, "alpha", d.Namespace)
				if tt.job != "" {
					require.Equal(t, tt.job, d.JobID)
				}
			}
		})
	}
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	d := letter("alpha", uuid.NewString(), time.Now())
	_, err := s.InsertDeadLetters(ctx, []store.DeadLetter{d})
	require.NoError(t, err)
	require.NoError(t, s.Cancel(ctx, "alpha", d.ExecutionID, time.Now()))

	_, err = s.Redrive(ctx, "beta", d.ID, func(context.Context, store.DeadLetter) error { panic("foreign") })
	require.ErrorIs(t, err, store.ErrNotFound, "another namespace's dead letter is not found")
	_, err = s.Redrive(ctx, "alpha", "not-a-uuid", func(context.Context, store.DeadLetter) error { panic("invalid") })
	require.ErrorIs(t, err, store.ErrNotFound)

	boom := errors.New("broker down")
	_, err = s.Redrive(ctx, "alpha", d.ID, func(_ context.Context, got store.DeadLetter) error {
		require.Equal(t, secret, got.Request.Target.GetHttp().SigningSecret)
		return boom
	})
	require.ErrorIs(t, err, boom)
	left, _, err := s.ListDeadLetters(ctx, "alpha", "", 10, store.Cursor{})
	require.NoError(t, err)
	require.Len(t, left, 1, "a failed publish keeps the dead letter")
	cancelled, err := s.Cancelled(ctx, []store.ExecutionRef{{Namespace: "alpha", ExecutionID: d.ExecutionID}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, cancelled, "and its cancellation")

	got, err := s.Redrive(ctx, "alpha", d.ID, func(context.Context, store.DeadLetter) error { return nil })
	require.NoError(t, err)
	require.Equal(t, d.ExecutionID, got.ExecutionID)
	left, _, err = s.ListDeadLetters(ctx, "alpha", "", 10, store.Cursor{})
	require.NoError(t, err)
	require.Empty(t, left)
	cancelled, err = s.Cancelled(ctx, []store.ExecutionRef{{Namespace: "alpha", ExecutionID: d.ExecutionID}})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, cancelled, "a redrive lifts the cancellation")

	_, err = s.Redrive(ctx, "alpha", d.ID, func(context.Context, store.DeadLetter) error { return nil })
	require.ErrorIs(t, err, store.ErrNotFound, "redriven once")
}

func TestRedriveMany(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	job, other := uuid.NewString(), uuid.NewString()
	base := time.Now()
	var letters []store.DeadLetter
	for i := range 5 {
		letters = append(letters, letter("alpha", job, base.Add(time.Duration(i)*time.Second)))
	}
	letters = append(letters, letter("alpha", other, base), letter("beta", job, base))
	_, err := s.InsertDeadLetters(ctx, letters)
	require.NoError(t, err)

	// The third publish fails: the others are redriven, it stays.
	boom := errors.New("broker down")
	var order []string
	n, err := s.RedriveMany(ctx, "alpha", job, 100, func(_ context.Context, got []store.DeadLetter) []error {
		errs := make([]error, len(got))
		for i, d := range got {
			order = append(order, d.ID)
			if i == 2 {
				errs[i] = boom
			}
		}
		return errs
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 4, n)
	require.Equal(t, []string{letters[0].ID, letters[1].ID, letters[2].ID, letters[3].ID, letters[4].ID}, order, "oldest first")
	left, _, err := s.ListDeadLetters(ctx, "alpha", job, 10, store.Cursor{})
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, letters[2].ID, left[0].ID)

	// Limits and scope: the namespace without a job filter, at most limit.
	n, err = s.RedriveMany(ctx, "alpha", "", 1, func(_ context.Context, got []store.DeadLetter) []error { return make([]error, len(got)) })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = s.RedriveMany(ctx, "alpha", "", 10, func(_ context.Context, got []store.DeadLetter) []error { return make([]error, len(got)) })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = s.RedriveMany(ctx, "alpha", "", 10, func(context.Context, []store.DeadLetter) []error { panic("nothing left") })
	require.NoError(t, err)
	require.Zero(t, n)
	beta, _, err := s.ListDeadLetters(ctx, "beta", "", 10, store.Cursor{})
	require.NoError(t, err)
	require.Len(t, beta, 1, "other namespaces are untouched")
}

func TestPurge(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	d := letter("alpha", uuid.NewString(), time.Now())
	_, err := s.InsertDeadLetters(ctx, []store.DeadLetter{d})
	require.NoError(t, err)
	require.ErrorIs(t, s.PurgeDeadLetter(ctx, "beta", d.ID), store.ErrNotFound)
	require.ErrorIs(t, s.PurgeDeadLetter(ctx, "alpha", "x"), store.ErrNotFound)
	require.NoError(t, s.PurgeDeadLetter(ctx, "alpha", d.ID))
	require.ErrorIs(t, s.PurgeDeadLetter(ctx, "alpha", d.ID), store.ErrNotFound)
}

func TestCancellations(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	a, b := uuid.NewString(), uuid.NewString()
	old := time.Now().Add(-30 * 24 * time.Hour)
	require.NoError(t, s.Cancel(ctx, "alpha", a, old))
	require.NoError(t, s.Cancel(ctx, "alpha", a, time.Now()), "idempotent")
	require.NoError(t, s.Cancel(ctx, "beta", b, time.Now()))
	require.ErrorIs(t, s.Cancel(ctx, "alpha", "nope", time.Now()), store.ErrInvalidID)

	refs := []store.ExecutionRef{
		{Namespace: "alpha", ExecutionID: a},
		{Namespace: "beta", ExecutionID: a},
		{Namespace: "beta", ExecutionID: b},
		{Namespace: "alpha", ExecutionID: b},
		{Namespace: "alpha", ExecutionID: "not-a-uuid"},
		{Namespace: "alpha", ExecutionID: uuid.NewString()},
	}
	got, err := s.Cancelled(ctx, refs)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true, false, false, false}, got)
	got, err = s.Cancelled(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)

	n, err := s.DeleteCancellationsBefore(ctx, time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the first cancel time stays, and it is old")
	got, err = s.Cancelled(ctx, refs[:3])
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, true}, got)
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := store.New(store.Options{})
	require.Error(t, err)
}

// TestCompletedAttempts: an attempt is completed once it or a later one is
// recorded, or its execution is over; recording again never goes back;
// a redrive forgets the execution. A record is the slot's: its key is the
// nominal time with the execution id.
func TestCompletedAttempts(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	retrying, succeeded, unknown := uuid.NewString(), uuid.NewString(), uuid.NewString()
	now := time.Now()
	slot := now.Truncate(time.Second)
	require.NoError(t, s.RecordCompleted(ctx, []store.CompletedAttempt{
		{NominalTime: slot, ExecutionID: retrying, Attempt: 2, Time: now},
		{NominalTime: slot, ExecutionID: retrying, Attempt: 1, Time: now}, // same batch, older attempt
		{NominalTime: slot, ExecutionID: succeeded, Attempt: 1, Final: true, Time: now},
		{NominalTime: slot, ExecutionID: "not-a-uuid", Attempt: 1, Time: now},
	}))
	// An older attempt recorded later changes nothing.
	require.NoError(t, s.RecordCompleted(ctx, []store.CompletedAttempt{{NominalTime: slot, ExecutionID: retrying, Attempt: 1, Time: now}}))
	require.NoError(t, s.RecordCompleted(ctx, nil))

	refs := []store.AttemptRef{
		{NominalTime: slot, ExecutionID: retrying, Attempt: 1},
		{NominalTime: slot, ExecutionID: retrying, Attempt: 2},
		{NominalTime: slot, ExecutionID: retrying, Attempt: 3}, // the scheduled retry: to be delivered
		{NominalTime: slot, ExecutionID: succeeded, Attempt: 1},
		{NominalTime: slot, ExecutionID: succeeded, Attempt: 2}, // a stray retry of a finished execution
		{NominalTime: slot, ExecutionID: unknown, Attempt: 1},
		{NominalTime: slot, ExecutionID: "not-a-uuid", Attempt: 1},
		{NominalTime: slot.Add(time.Second), ExecutionID: succeeded, Attempt: 1}, // another slot's key
	}
	got, err := s.Completed(ctx, refs)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false, true, true, false, false, false}, got)

	// A redrive forgets the execution: attempt 1 is delivered again. The
	// letter's request names the slot.
	d := letter("alpha", uuid.NewString(), now)
	d.ExecutionID, d.Request.ExecutionId = retrying, retrying
	d.NominalTime, d.Request.NominalTime = slot, timestamppb.New(slot)
	_, err = s.InsertDeadLetters(ctx, []store.DeadLetter{d})
	require.NoError(t, err)
	_, err = s.Redrive(ctx, "alpha", d.ID, func(context.Context, store.DeadLetter) error { return nil })
	require.NoError(t, err)
	got, err = s.Completed(ctx, refs[:2])
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, got)
	// The pipeline's record of the dead attempt (at its dead time) may land
	// after the redrive: it changes nothing. Records after it count.
	require.NoError(t, s.RecordCompleted(ctx, []store.CompletedAttempt{{NominalTime: slot, ExecutionID: retrying, Attempt: 3, Final: true, Time: d.DeadTime}}))
	got, err = s.Completed(ctx, refs[:2])
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, got, "a stale record does not undo the redrive")
	require.NoError(t, s.RecordCompleted(ctx, []store.CompletedAttempt{{NominalTime: slot, ExecutionID: retrying, Attempt: 1, Time: d.DeadTime.Add(time.Second)}}))
	got, err = s.Completed(ctx, refs[:3])
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, false}, got, "the redriven attempt 1 completed")
}

// TestCompletionRetention: the records' days are kept from the retention
// before now to CompletionDaysAhead after it, older days are dropped whole,
// and a record of a slot older than every day kept (a backfill's, in the
// default partition) is trimmed by its done time.
func TestCompletionRetention(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	now := time.Now()
	today, backfilled, yesterday := uuid.NewString(), uuid.NewString(), uuid.NewString()
	const retention = 48 * time.Hour

	res, trimmed, err := s.MaintainCompletions(ctx, now, retention)
	require.NoError(t, err)
	require.Zero(t, trimmed)
	require.Empty(t, res.Dropped)
	var days []time.Time
	for d := daypart.Day(now.Add(-retention)); !d.After(now.AddDate(0, 0, store.CompletionDaysAhead)); d = d.AddDate(0, 0, 1) {
		days = append(days, d)
	}
	require.Equal(t, days, res.Created, "the retention's past days, today and the days ahead")
	require.Equal(t, 3+store.CompletionDaysAhead, res.Days)

	records := []store.CompletedAttempt{
		{NominalTime: now, ExecutionID: today, Attempt: 1, Final: true, Time: now},
		{NominalTime: now.Add(-24 * time.Hour), ExecutionID: yesterday, Attempt: 1, Final: true, Time: now.Add(-24 * time.Hour)},
		{NominalTime: now.AddDate(0, 0, -30), ExecutionID: backfilled, Attempt: 1, Final: true, Time: now.Add(-retention - time.Minute)},
	}
	require.NoError(t, s.RecordCompleted(ctx, records))
	refs := make([]store.AttemptRef, len(records))
	for i, r := range records {
		refs[i] = store.AttemptRef{NominalTime: r.NominalTime, ExecutionID: r.ExecutionID, Attempt: 1}
	}
	got, err := s.Completed(ctx, refs)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, got)

	res, trimmed, err = s.MaintainCompletions(ctx, now, retention)
	require.NoError(t, err)
	require.Equal(t, int64(1), trimmed, "the backfill's record, done before the retention")
	require.Empty(t, res.Created)
	require.Empty(t, res.Dropped)
	got, err = s.Completed(ctx, refs)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false}, got)

	// A day later yesterday's slots are past the retention's first day.
	res, _, err = s.MaintainCompletions(ctx, now.Add(24*time.Hour), retention)
	require.NoError(t, err)
	require.Equal(t, []time.Time{daypart.Day(now.Add(-retention))}, res.Dropped)
	res, _, err = s.MaintainCompletions(ctx, now.Add(48*time.Hour), retention)
	require.NoError(t, err)
	require.Equal(t, []time.Time{daypart.Day(now.Add(-24 * time.Hour))}, res.Dropped)
	got, err = s.Completed(ctx, refs)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, false}, got, "yesterday's day dropped, today's kept")
}

// TestCheck: one look-up answers both questions, per ref, in order.
func TestCheck(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	cancelled, done, both, neither := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	require.NoError(t, s.Cancel(ctx, "alpha", cancelled, time.Now()))
	require.NoError(t, s.Cancel(ctx, "alpha", both, time.Now()))
	slot := time.Now().Truncate(time.Second)
	require.NoError(t, s.RecordCompleted(ctx, []store.CompletedAttempt{
		{NominalTime: slot, ExecutionID: done, Attempt: 2, Time: time.Now()}, {NominalTime: slot, ExecutionID: both, Attempt: 1, Final: true, Time: time.Now()},
	}))
	got, err := s.Check(ctx, []store.CheckRef{
		{Namespace: "alpha", NominalTime: slot, ExecutionID: cancelled, Attempt: 1},
		{Namespace: "beta", NominalTime: slot, ExecutionID: cancelled, Attempt: 1}, // another namespace's cancellation
		{Namespace: "alpha", NominalTime: slot, ExecutionID: "not-a-uuid", Attempt: 1},
		{Namespace: "alpha", NominalTime: slot, ExecutionID: done, Attempt: 2},
		{Namespace: "alpha", NominalTime: slot, ExecutionID: done, Attempt: 3},
		{Namespace: "alpha", NominalTime: slot, ExecutionID: both, Attempt: 4},
		{Namespace: "alpha", NominalTime: slot, ExecutionID: neither, Attempt: 1},
		{Namespace: "alpha", NominalTime: slot.Add(-time.Second), ExecutionID: done, Attempt: 2}, // another slot's key
	})
	require.NoError(t, err)
	require.Equal(t, []store.CheckResult{
		{Cancelled: true}, {}, {}, {Completed: true}, {}, {Cancelled: true, Completed: true, Final: true}, {}, {},
	}, got)
	got, err = s.Check(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestCancellationFeed: RecordCancellation says whether it recorded; the
// feed returns the records in the database's order, from a point, by page.
func TestCancellationFeed(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	a, b := uuid.NewString(), uuid.NewString()
	first, err := s.RecordCancellation(ctx, "alpha", a, time.Now())
	require.NoError(t, err)
	require.True(t, first)
	again, err := s.RecordCancellation(ctx, "alpha", a, time.Now())
	require.NoError(t, err)
	require.False(t, again, "already cancelled")
	other, err := s.RecordCancellation(ctx, "beta", a, time.Now())
	require.NoError(t, err)
	require.True(t, other, "another namespace's cancellation of the same id is its own")
	_, err = s.RecordCancellation(ctx, "alpha", b, time.Now())
	require.NoError(t, err)

	all, err := s.CancellationsSince(ctx, time.Time{}, 10)
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, store.ExecutionRef{Namespace: "alpha", ExecutionID: a}, all[0].ExecutionRef)
	require.Equal(t, store.ExecutionRef{Namespace: "beta", ExecutionID: a}, all[1].ExecutionRef)
	require.Equal(t, store.ExecutionRef{Namespace: "alpha", ExecutionID: b}, all[2].ExecutionRef)
	page, err := s.CancellationsSince(ctx, time.Time{}, 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	rest, err := s.CancellationsSince(ctx, all[2].RecordedAt, 10)
	require.NoError(t, err)
	require.Len(t, rest, 1, "since is inclusive")
	none, err := s.CancellationsSince(ctx, all[2].RecordedAt.Add(time.Microsecond), 10)
	require.NoError(t, err)
	require.Empty(t, none)
}
