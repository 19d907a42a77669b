package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestAwait: a request is acknowledged once every consequence is
// confirmed; one that is not confirmed within the publish timeout, or a
// failed one, requeues it later, and so does the timeout when several are
// never confirmed (the wait for the second does not start over, or block
// once the first has used the timer up); shutdown requeues it at once.
func TestAwait(t *testing.T) {
	t.Parallel()
	p := &Pipeline{opts: Options{PublishTimeout: 50 * time.Millisecond}, logger: slog.New(slog.DiscardHandler)}
	span := noop.Span{}
	confirmed := func(err error) <-chan error {
		c := make(chan error, 1)
		c <- err
		return c
	}
	never := func() <-chan error { return make(chan error) }

	require.Equal(t, ack, p.await(t.Context(), span, nil, confirmed(nil), nil, confirmed(nil)))
	require.Equal(t, requeueLater, p.await(t.Context(), span, errors.New("retry not published"), confirmed(nil)))
	require.Equal(t, requeueLater, p.await(t.Context(), span, nil, confirmed(nil), confirmed(errors.New("nack"))))
	require.Equal(t, requeueLater, p.await(t.Context(), span, nil, never(), never(), confirmed(nil)))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.Equal(t, requeueNow, p.await(ctx, span, nil, never(), never()))
}
