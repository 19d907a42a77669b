// Package history is the registry's client of the history service: it
// reads the execution that JobService.RerunExecution re-runs, as the caller
// sees it.
package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"

	historyv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1"
	"github.com/cronmesh/cronmesh/gen/go/cronmesh/history/v1/historyv1connect"
)

// Domain errors; the API maps them to Connect codes.
var (
	// ErrNotConfigured: the registry was started without --history-url.
	ErrNotConfigured = errors.New("re-running an execution needs the history service: the registry was started without --history-url")
	// ErrNotFound: the history holds no such execution for the caller's
	// namespace (another tenant's, not recorded yet, or past retention).
	ErrNotFound = errors.New("execution not found")
	// ErrNotFinished: the execution still runs or waits for a retry.
	ErrNotFinished = errors.New("the execution has not finished: it is running or waiting for a retry; cancel it or wait for its outcome")
	// ErrUnavailable: the history service did not answer.
	ErrUnavailable = errors.New("the history service is unavailable; retry later")
	// ErrRefused: the history service refused the caller's key; the
	// *RefusedError carries its code.
	ErrRefused = errors.New("the history service refused the caller's key")
)

// RefusedError is ErrRefused with the history's code
// (UNAUTHENTICATED or PERMISSION_DENIED).
type RefusedError struct {
	Code connect.Code
}

func (e *RefusedError) Error() string { return fmt.Sprintf("%v (%v)", ErrRefused, e.Code) }

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// CallTimeout bounds one call, so that a history that hangs makes a re-run
// fail UNAVAILABLE promptly instead of holding the caller.
const CallTimeout = 5 * time.Second

// Client reads executions from the history service. A nil *Client is a
// registry without one: every read is ErrNotConfigured.
type Client struct {
	client     historyv1connect.HistoryServiceClient
	propagator propagation.TextMapPropagator
}

// New returns a Client of the history service at baseURL. propagator
// writes the caller's trace context into each call (nil: W3C trace
// context), so the history's span joins the re-run's trace.
func New(httpClient connect.HTTPClient, baseURL string, propagator propagation.TextMapPropagator, opts ...connect.ClientOption) *Client {
	if propagator == nil {
		propagator = propagation.TraceContext{}
	}
	return &Client{client: historyv1connect.NewHistoryServiceClient(httpClient, baseURL, opts...), propagator: propagator}
}

// Execution returns execution id as the holder of authorization (the
// caller's own Authorization header, forwarded) sees it: the history
// checks the key and the namespace itself, so the registry never reads
// another tenant's execution, whatever it is asked.
func (c *Client) Execution(ctx context.Context, authorization, id string) (*historyv1.Execution, error) {
	if c == nil {
		return nil, ErrNotConfigured
	}
	callCtx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	req := connect.NewRequest(&historyv1.GetExecutionRequest{ExecutionId: id})
	req.Header().Set("Authorization", authorization)
	c.propagator.Inject(callCtx, propagation.HeaderCarrier(req.Header()))
	resp, err := c.client.GetExecution(callCtx, req)
	if err == nil {
		return resp.Msg.GetExecution(), nil
	}
	if ctx.Err() != nil {
		// The caller gave up: its own cancellation, not the history's.
		return nil, ctx.Err()
	}
	switch code := connect.CodeOf(err); code {
	case connect.CodeNotFound:
		return nil, ErrNotFound
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return nil, &RefusedError{Code: code}
	default:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// Finished reports whether an execution in status is over, so that a
// re-run cannot overlap it: anything but running, waiting for a retry or
// of no known status.
func Finished(status historyv1.ExecutionStatus) bool {
	switch status {
	case historyv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED,
		historyv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		historyv1.ExecutionStatus_EXECUTION_STATUS_RETRYING:
		return false
	default:
		return true
	}
}
