package deliver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/redact"
	"github.com/cronmesh/cronmesh/libs/slotinfo"
	"github.com/cronmesh/cronmesh/libs/ssrfguard"
	"github.com/cronmesh/cronmesh/libs/telemetry"
	"github.com/cronmesh/cronmesh/libs/webhooksign"
)

// droppedHeaders are job headers the dispatcher never sends as given: the
// transport owns framing and the Host, and the signature headers are ours
// (so are the cronmesh-* slot headers, see slotinfo.IsReservedHeader).
// The registry refuses them already; this is defence in depth. Keys are
// canonical.
var droppedHeaders = [...]string{
	"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Proxy-Connection", "Proxy-Authorization", "Te", "Trailer", "Upgrade",
	"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature",
}

// error.type values of the HTTP client span other than status codes.
const (
	errTypeRefused  = "ssrf_refused"
	errTypeTimeout  = "timeout"
	errTypeCanceled = "canceled"
	errTypeNetwork  = "network"
)

// httpAttempt is a prepared webhook call.
type httpAttempt struct {
	req     *dispatchv1.DispatchRequest
	target  *registryv1.HttpTarget
	url     *url.URL
	method  string
	body    []byte
	timeout time.Duration
	// request is sent once, with the attempt's context.
	request *http.Request
	// signedAt is the second of the webhook-timestamp the request is
	// signed with.
	signedAt int64
}

// prepareHTTP checks a webhook call and builds its request, signed for
// the second of the slot's time (req.NotBefore) or of now, whichever is
// later: the second it is normally sent in.
func (c *Client) prepareHTTP(ctx context.Context, req *dispatchv1.DispatchRequest, t *registryv1.HttpTarget) func(context.Context) Outcome {
	u, err := url.Parse(t.GetUrl())
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may carry secrets
		}
		return fails(permanent("invalid URL: %v", err))
	}
	if scheme := strings.ToLower(u.Scheme); scheme != "http" && scheme != "https" {
		return fails(permanent("invalid URL: scheme %q is not http or https", u.Scheme))
	}
	if u.Host == "" || u.Opaque != "" {
		return fails(permanent("invalid URL: no host"))
	}
	switch err := webhooksign.CheckSecret(t.GetSigningSecret()); {
	case errors.Is(err, webhooksign.ErrNoSecret):
		return fails(permanent("no signing secret"))
	case err != nil:
		return fails(permanent("invalid signing secret"))
	}
	a := &httpAttempt{req: req, target: t, url: u, method: strings.ToUpper(t.GetMethod())}
	if a.method == "" {
		a.method = http.MethodPost
	}
	a.timeout = t.GetTimeout().AsDuration()
	if t.GetTimeout() == nil || a.timeout <= 0 {
		a.timeout = DefaultTimeout
	}
	a.timeout = min(a.timeout, c.maxTimeout)
	if a.body, err = slotinfo.Body(t.GetBody(), t.GetBodyFormat(), httpContentType(t), slotinfo.FromRequest(req)); err != nil {
		return fails(permanent("invalid body template: %v", err))
	}
	var reader io.Reader
	if len(a.body) > 0 {
		reader = bytes.NewReader(a.body)
	}
	if a.request, err = http.NewRequestWithContext(ctx, a.method, u.String(), reader); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fails(permanent("invalid request: %v", err))
	}
	slot := slotinfo.FromRequest(req).Headers()
	header := newFields(len(t.GetHeaders()) + len(t.GetSecretHeaders()) + len(slot) + ownHeaders)
	a.request.Header = header.header
	for _, headers := range [...]map[string]string{t.GetHeaders(), t.GetSecretHeaders()} {
		for name, value := range headers {
			if !validHeaderName(name) || !validHeaderValue(value) {
				return fails(permanent("invalid header %q", name))
			}
			name = http.CanonicalHeaderKey(name)
			if slices.Contains(droppedHeaders[:], name) || slotinfo.IsReservedHeader(name) {
				continue
			}
			header.set(name, value)
		}
	}
	for _, h := range slot {
		header.set(h.Name, h.Value)
	}
	header.set(webhooksign.HeaderWebhookID, req.GetExecutionId())
	header.set(webhooksign.HeaderIdempotencyKey, req.GetExecutionId())
	if a.request.Header.Get("User-Agent") == "" {
		header.set("User-Agent", c.userAgent)
	}
	if len(a.body) > 0 && a.request.Header.Get("Content-Type") == "" {
		header.set("Content-Type", "application/json")
	}
	signAt := c.clock.Now()
	if nb := req.GetNotBefore(); nb != nil && nb.AsTime().After(signAt) {
		signAt = nb.AsTime()
	}
	if err := a.sign(signAt); err != nil {
		return fails(permanent("invalid signing secret")) // checked above; never expected
	}
	c.propagator.Inject(ctx, propagation.HeaderCarrier(a.request.Header))
	return func(ctx context.Context) Outcome { return c.sendHTTP(ctx, a) }
}

// ownHeaders is how many header fields a webhook request carries besides
// the job's and the slot's: webhook-id and idempotency-key, User-Agent and
// Content-Type, the signature's two and the trace context's two.
const ownHeaders = 2 + 2 + 2 + 2

// fields builds a request's header with its values in one array. Every
// attempt builds a header of a dozen fields or more; http.Header.Set
// makes a slice per field, and a header map made without a size hint
// grows past its eighth, which together were 8 % of the dispatcher's
// allocations in the mix at 2,000/s (docs/benchmarks, 2026-12-07).
type fields struct {
	header http.Header
	values []string
}

func newFields(n int) *fields {
	return &fields{header: make(http.Header, n), values: make([]string, 0, n)}
}

// set is http.Header.Set. Each field's value is a slice of one capped at
// its length, so an Add to it (none is made) would copy rather than
// overwrite its neighbour.
func (f *fields) set(name, value string) {
	f.values = append(f.values, value)
	n := len(f.values)
	f.header[textproto.CanonicalMIMEHeaderKey(name)] = f.values[n-1 : n : n]
}

// sign sets the request's webhook-timestamp to at's second and its
// signature over it.
func (a *httpAttempt) sign(at time.Time) error {
	sig, err := webhooksign.Sign(a.target.GetSigningSecret(), a.req.GetExecutionId(), at, a.body)
	if err != nil {
		return err
	}
	a.request.Header.Set(webhooksign.HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	a.request.Header.Set(webhooksign.HeaderWebhookSignature, sig)
	a.signedAt = at.Unix()
	return nil
}

// sendHTTP makes the webhook call, under its client span unless the
// attempt's trace is not sampled (the usual case without export), whose
// spans the mesh's parent-based samplers never record: the request then
// carries the context it was prepared with, the attempt's, without a span
// nobody records.
func (c *Client) sendHTTP(ctx context.Context, a *httpAttempt) Outcome {
	span := trace.SpanFromContext(context.Background()) // a no-op span
	if telemetry.MayRecord(ctx) {
		ctx, span = c.tracer.Start(ctx, a.method,
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(
				semconv.HTTPRequestMethodKey.String(a.method),
				semconv.URLFull(redact.URL(a.url)),
				semconv.ServerAddress(a.url.Hostname()),
				semconv.ServerPort(port(a.url)),
				attribute.String("cronmesh.execution.id", a.req.GetExecutionId()),
				attribute.String("cronmesh.job.id", a.req.GetJobId()),
				attribute.Int("cronmesh.attempt", int(a.req.GetAttempt())),
			))
		c.propagator.Inject(ctx, propagation.HeaderCarrier(a.request.Header))
	}
	defer span.End()
	out := c.callHTTP(ctx, a)

	if out.StatusCode != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(out.StatusCode))
	}
	if out.Result != Succeeded {
		span.SetStatus(codes.Error, out.Reason)
	}
	return out
}

// callHTTP sends the request and classifies what came back. A request
// sent in another second than the one it was signed for (held past it,
// or sent before the slot's time) is signed again.
func (c *Client) callHTTP(ctx context.Context, a *httpAttempt) Outcome {
	span := trace.SpanFromContext(ctx)
	attemptCtx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if now := c.clock.Now(); now.Unix() != a.signedAt {
		if err := a.sign(now); err != nil {
			return permanent("invalid signing secret") // checked when prepared; never expected
		}
	}
	resp, err := c.transport.RoundTrip(a.request.WithContext(attemptCtx))
	if err != nil {
		out, errType := c.classifyError(ctx, err, a.timeout)
		span.SetAttributes(semconv.ErrorTypeKey.String(errType))
		if errType == errTypeRefused {
			c.log.Warn("deliver: target refused by the SSRF guard",
				"execution_id", a.req.GetExecutionId(), "job_id", a.req.GetJobId(), "namespace", a.req.GetNamespace(),
				"url", redact.URL(a.url), "reason", out.Reason)
		}
		return out
	}
	excerpt := readExcerpt(resp)
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain) // for keep-alive; a longer body closes the connection
	_ = resp.Body.Close()

	t := a.target
	out := Outcome{
		Result:     classifyStatus(resp.StatusCode, t.GetAcceptedStatusCodes()),
		StatusCode: resp.StatusCode,
		Headers:    resp.Header,
		Excerpt:    scrubSecrets(string(excerpt), t.GetSecretHeaders()),
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), c.clock.Now()),
	}
	switch {
	case out.Result == Succeeded:
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		out.Reason = "HTTP " + resp.Status + " is not one of the job's accepted status codes"
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		out.Reason = "HTTP " + resp.Status + " (redirects are not followed)"
	default:
		out.Reason = "HTTP " + resp.Status
	}
	if out.Result != Succeeded {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
	}
	return out
}

// readExcerpt reads the first MaxExcerpt bytes of resp's body. A body of
// known length is read into a buffer of that length, and an empty one
// (a 204, say) allocates nothing: io.ReadAll starts with 512 bytes.
func readExcerpt(resp *http.Response) []byte {
	switch n := resp.ContentLength; {
	case n == 0:
		return nil
	case n > 0 && n <= MaxExcerpt:
		buf := make([]byte, n)
		read, _ := io.ReadFull(resp.Body, buf)
		return buf[:read]
	default:
		excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, MaxExcerpt))
		return excerpt
	}
}

// httpContentType is the content type a request of t is sent with when it
// has a body: the job's Content-Type header (any case), or application/json.
func httpContentType(t *registryv1.HttpTarget) string {
	for name, value := range t.GetHeaders() {
		if strings.EqualFold(name, "Content-Type") {
			return value
		}
	}
	return "application/json"
}

// classifyError turns a failed round trip into an outcome and the span's
// error.type: an SSRF refusal is Permanent, everything else (timeouts,
// resets, refused connections, DNS and TLS failures, a canceled ctx) is
// Retryable. The reason never contains the URL (url.Error's prefix is cut:
// a query may carry a token).
func (c *Client) classifyError(ctx context.Context, err error, timeout time.Duration) (Outcome, string) {
	var refused *ssrfguard.RefusedError
	if errors.As(err, &refused) {
		return permanent("%s", refused.Error()), errTypeRefused
	}
	if ctx.Err() != nil {
		return retryable("delivery canceled: %v", context.Cause(ctx)), errTypeCanceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return retryable("timeout after %v", timeout), errTypeTimeout
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return retryable("timeout: %v", err), errTypeTimeout
	}
	return retryable("%v", err), errTypeNetwork
}

// classifyStatus applies the success rule: with accepted codes set only
// those succeed (a 2xx outside them fails, permanently unless it is one of
// the retryable codes, which a 2xx is not); without, any 2xx does. A
// failure is Retryable for 408, 429 and 5xx, Permanent otherwise (other
// 4xx, and 1xx/3xx since redirects are not followed).
func classifyStatus(code int, accepted []int32) Result {
	if len(accepted) > 0 {
		if slices.Contains(accepted, int32(code)) {
			return Succeeded
		}
	} else if code >= 200 && code < 300 {
		return Succeeded
	}
	if code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500 {
		return Retryable
	}
	return Permanent
}

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP-date
// (relative to now), clamped to [0, MaxRetryAfter]. Absent, malformed,
// negative or past values are 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		switch {
		case secs <= 0:
			return 0
		case secs >= int64(MaxRetryAfter/time.Second):
			return MaxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return min(max(at.Sub(now), 0), MaxRetryAfter)
	}
	return 0
}

// minScrubbed is the shortest secret value scrubbed from an excerpt: a
// shorter one would mostly hit unrelated text.
const minScrubbed = 6

// scrubSecrets replaces in a response excerpt every secret header value,
// and the credential after an auth scheme ("Bearer <token>"), with
// "[redacted]": an echoing endpoint (or an error page quoting the request)
// must not carry a write-only header into the dead letters and the
// history.
func scrubSecrets(excerpt string, secret map[string]string) string {
	for _, v := range secret {
		for _, s := range []string{v, v[strings.LastIndexByte(v, ' ')+1:]} {
			if len(s) >= minScrubbed {
				excerpt = strings.ReplaceAll(excerpt, s, "[redacted]")
			}
		}
	}
	return excerpt
}

// port is u's port, or the scheme's default.
func port(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return 443
	}
	return 80
}

// validHeaderName reports whether name is an HTTP token (RFC 9110).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := range len(name) {
		b := name[i]
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether value holds no control characters other
// than tab (so no header injection through CR/LF).
func validHeaderValue(value string) bool {
	for i := range len(value) {
		if b := value[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}
