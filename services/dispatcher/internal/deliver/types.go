package deliver

import (
	"context"
	"net/http"
	"time"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
)

// Result classifies an attempt.
type Result int

// Results of an attempt.
const (
	// Succeeded: 2xx (or one of the job's accepted codes), or a confirmed
	// AMQP publish.
	Succeeded Result = iota + 1
	// Retryable: 408, 429, 5xx, a timeout or a network error, an AMQP
	// publish not confirmed.
	Retryable
	// Permanent: any other 4xx, a target refused by the SSRF guard, an
	// invalid request. Goes to the dead-letter queue at once.
	Permanent
)

// MaxExcerpt is how much of a response body is kept.
const MaxExcerpt = 64 << 10

// Outcome is what one attempt did.
type Outcome struct {
	Result Result
	// StatusCode of the HTTP response; 0 without one (and for AMQP).
	StatusCode int
	// Headers of the HTTP response.
	Headers http.Header
	// Excerpt is the first MaxExcerpt bytes of the response body.
	Excerpt string
	// Reason says why it failed, for people ("HTTP 503", "dial tcp:
	// connection refused", "refused: 10.0.0.7 is a private address").
	// Never contains the signing secret.
	Reason string
	// Duration of the attempt.
	Duration time.Duration
	// RetryAfter is the target's Retry-After, clamped to [0, 1 h]; 0 when
	// absent.
	RetryAfter time.Duration
}

// Deliverer prepares attempts. Safe for concurrent use.
type Deliverer interface {
	// Prepare does the work of an attempt of req (req.Attempt is its
	// number) that does not depend on when it is made: checking the
	// target, rendering the body, building and signing the request. The
	// pipeline prepares a request the trigger fired ahead of its slot
	// while it holds it, so that at the slot's time, when thousands of
	// slots may be due at once, only the sending is left. ctx's trace
	// context is the one the request carries to the target. An invalid
	// request is prepared too: its attempt fails as Permanent.
	Prepare(ctx context.Context, req *dispatchv1.DispatchRequest) Attempt
}

// Attempt is a prepared attempt. Make it once.
type Attempt interface {
	// Make makes the attempt within ctx, which bounds it (a cancel aborts
	// it) and, when its trace may be recorded, holds the attempt's client
	// or producer span.
	Make(ctx context.Context) Outcome
}

// AttemptFunc is an Attempt made by calling it.
type AttemptFunc func(ctx context.Context) Outcome

// Make calls f.
func (f AttemptFunc) Make(ctx context.Context) Outcome { return f(ctx) }
