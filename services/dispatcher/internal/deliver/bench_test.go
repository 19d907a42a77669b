package deliver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// BenchmarkHTTPAttempt prepares and makes one webhook attempt per
// iteration against a local target that answers 204 with no body, as the
// mesh benchmark's target does. It measures the dispatcher's work for a
// delivery together with the target's (one process); run it with
// -benchmem, whose figures are steadier than the time on a shared host.
func BenchmarkHTTPAttempt(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	c, _ := newTestClient(b, nil)
	req := httpRequest(srv.URL+"/hook", nil)
	req.NominalTime, req.FireTime = timestamppb.New(testNow()), timestamppb.New(testNow())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if out := c.Prepare(ctx, req).Make(ctx); out.Result != Succeeded {
			b.Fatalf("attempt: %v %s", out.Result, out.Reason)
		}
	}
}
