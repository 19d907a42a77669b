package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/services/registry/internal/store"
)

// TestListByName: the name filter ignores case, combines with the label
// filter, keeps other namespaces out, and pages through the namespace a
// scan window at a time: a window without a match is an empty page with a
// token, a full page ends at its last job, and following the tokens finds
// every match once, in id order.
func TestListByName(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	names := []string{"Nightly report", "backup", "nightly CLEANUP", "hourly sync", "weekly", "billing", "NIGHTLY export", "audit", "nightly index"}
	var jobs []store.NewJob
	for i, n := range names {
		team := "core"
		if i == 8 {
			team = "search"
		}
		jobs = append(jobs, store.NewJob{Job: &registryv1.Job{
			Id: uuid.Must(uuid.NewV7()).String(), DisplayName: n, Labels: map[string]string{"team": team},
			Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 * * * *"}},
		}})
	}
	_, err := s.Create(ctx, "alpha", jobs)
	require.NoError(t, err)
	_, err = s.Create(ctx, "beta", []store.NewJob{{Job: &registryv1.Job{
		Id: uuid.Must(uuid.NewV7()).String(), DisplayName: "nightly of beta",
		Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 * * * *"}},
	}}})
	require.NoError(t, err)

	type page struct {
		names []string
		next  bool
	}
	collect := func(f store.ListFilter) []page {
		var pages []page
		for {
			list, next, err := s.List(ctx, "alpha", f)
			require.NoError(t, err)
			p := page{next: next != ""}
			for _, j := range list {
				p.names = append(p.names, j.DisplayName)
			}
			pages = append(pages, p)
			if next == "" {
				return pages
			}
			require.Less(t, len(pages), 20, "the pages never end")
			f.After = next
		}
	}

	// The whole namespace in one window.
	require.Equal(t, []page{{names: []string{"Nightly report", "nightly CLEANUP", "NIGHTLY export", "nightly index"}}},
		collect(store.ListFilter{NameContains: "nIGHTLY", NameScan: 100, PageSize: 50}))
	// With labels: only team core.
	require.Equal(t, []page{{names: []string{"Nightly report", "nightly CLEANUP", "NIGHTLY export"}}},
		collect(store.ListFilter{NameContains: "nightly", Labels: map[string]string{"team": "core"}, NameScan: 100, PageSize: 50}))

	// Windows of three jobs: [Nightly report, backup, nightly CLEANUP],
	// [hourly sync, weekly, billing] (no match), [NIGHTLY export, audit,
	// nightly index], then an empty window past the end.
	require.Equal(t, []page{
		{names: []string{"Nightly report", "nightly CLEANUP"}, next: true},
		{next: true},
		{names: []string{"NIGHTLY export", "nightly index"}, next: true},
		{},
	}, collect(store.ListFilter{NameContains: "nightly", NameScan: 3, PageSize: 50}))
	// A page fills before its window ends: it ends at its last job.
	require.Equal(t, []page{
		{names: []string{"Nightly report"}, next: true},
		{names: []string{"nightly CLEANUP"}, next: true},
		{names: []string{"NIGHTLY export"}, next: true},
		{names: []string{"nightly index"}},
	}, collect(store.ListFilter{NameContains: "nightly", NameScan: 100, PageSize: 1}))

	// A text no name contains; characters LIKE would treat specially are
	// plain text here.
	require.Equal(t, []page{{}}, collect(store.ListFilter{NameContains: "%", NameScan: 100, PageSize: 50}))
	require.Equal(t, []page{{}}, collect(store.ListFilter{NameContains: "nightly_", NameScan: 100, PageSize: 50}))
}
