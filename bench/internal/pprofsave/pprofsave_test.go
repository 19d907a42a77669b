package pprofsave_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/bench/internal/pprofsave"
)

func TestSave(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/heap" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("profile bytes"))
	}))
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "heap.pprof")

	require.NoError(t, pprofsave.Save(t.Context(), srv.URL+"/debug/pprof/heap", path, 5*time.Second))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "profile bytes", string(got))

	err = pprofsave.Save(t.Context(), srv.URL+"/debug/pprof/missing", filepath.Join(t.TempDir(), "x"), 5*time.Second)
	require.ErrorContains(t, err, "404", "a service without --pprof is an error, not an empty profile")
}
